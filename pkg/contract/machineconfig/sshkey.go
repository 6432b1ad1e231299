package machineconfig

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// supportedKeyTypes lists the SSH public key types keyFields accepts.
const supportedKeyTypes = "ssh-ed25519, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, " +
	"ssh-rsa, sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com"

// keyFields returns the number of length-prefixed fields that follow the
// type name in a key blob of type typ, or 0 when typ is not supported.
func keyFields(typ string) int {
	switch typ {
	case "ssh-ed25519": // public key
		return 1
	case "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521": // curve, point
		return 2
	case "ssh-rsa": // e, n
		return 2
	case "sk-ssh-ed25519@openssh.com": // public key, application
		return 2
	case "sk-ecdsa-sha2-nistp256@openssh.com": // curve, point, application
		return 3
	}
	return 0
}

// parseAuthorizedKey checks an authorized_keys line "<type> <base64>
// [comment]" (options are not supported). It returns a string identifying
// the key (type and blob) or a message saying what is wrong.
func parseAuthorizedKey(line string) (string, string) {
	const paste = `paste the whole line of your .pub file, like "ssh-ed25519 AAAAC3Nza... you@host"`
	fields := strings.Fields(line)
	switch {
	case len(fields) == 0:
		return "", "empty key; " + paste
	case strings.ContainsAny(line, "\r\n"):
		return "", "a key must be a single line; put each key in its own list item"
	case strings.HasPrefix(line, "-----BEGIN"):
		return "", "this is a private key; use the public key (the .pub file) instead, and keep the private key secret"
	}
	typ := fields[0]
	if keyFields(typ) == 0 {
		if slices.ContainsFunc(fields[1:], func(f string) bool { return keyFields(f) > 0 }) {
			return "", fmt.Sprintf("authorized_keys options (%q) are not supported; start the line with the key type", typ)
		}
		if len(fields) == 1 {
			return "", "not an SSH public key; " + paste
		}
		return "", fmt.Sprintf("key type %q is not supported; use one of %s", typ, supportedKeyTypes)
	}
	if len(fields) == 1 {
		return "", "the key data after the key type is missing; " + paste
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return "", "the key data is not valid base64 (cut short, or wrapped?); " + paste
	}
	if msg := checkKeyBlob(typ, blob); msg != "" {
		return "", msg
	}
	return typ + " " + fields[1], ""
}

// checkKeyBlob checks the wire format of a public key blob (RFC 4253 and
// OpenSSH's PROTOCOL.u2f): a sequence of uint32-length-prefixed fields,
// starting with the key type, then the type's own fields.
func checkKeyBlob(typ string, blob []byte) string {
	var fields [][]byte
	for len(blob) > 0 {
		if len(blob) < 4 || uint64(binary.BigEndian.Uint32(blob)) > uint64(len(blob)-4) {
			return "the key data is truncated or corrupt; paste the whole line of your .pub file again"
		}
		n := binary.BigEndian.Uint32(blob)
		fields = append(fields, blob[4:4+n])
		blob = blob[4+n:]
	}
	if len(fields) == 0 || string(fields[0]) != typ {
		if len(fields) > 0 && keyFields(string(fields[0])) > 0 {
			return fmt.Sprintf("the key data holds a key of type %s, but the line says %s; "+
				"check that the line was not edited", fields[0], typ)
		}
		return fmt.Sprintf("the key data does not start with the key type %s; check that the line was not edited", typ)
	}
	fields = fields[1:]
	if len(fields) != keyFields(typ) {
		return fmt.Sprintf("the key data has %d fields, but %s keys have %d; paste the whole line of your .pub file again",
			len(fields), typ, keyFields(typ))
	}
	switch {
	case strings.Contains(typ, "ed25519"):
		if len(fields[0]) != 32 {
			return fmt.Sprintf("the key data holds a %d-byte ed25519 key; it must be 32 bytes", len(fields[0]))
		}
	case strings.Contains(typ, "ecdsa-sha2-"):
		curve := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(typ, "sk-"), "ecdsa-sha2-"), "@openssh.com")
		if string(fields[0]) != curve {
			return fmt.Sprintf("the key data names curve %q, but %s keys use %q", fields[0], typ, curve)
		}
	}
	return ""
}
