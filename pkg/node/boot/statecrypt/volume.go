package statecrypt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Runner runs a program (cryptsetup) with stdin as its input and returns
// its output; the initramfs runs it in the slot's root filesystem.
type Runner interface {
	Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

// Exec runs programs on this machine (cryptsetup for firstboot, which
// runs in the root it opens volumes for).
type Exec struct{}

// Run implements Runner.
func (Exec) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// KeySize is the size of the keys that open a volume: the sealed key and
// the recovery key, each random, so a slow password hash adds nothing;
// keyslots use PBKDF2 with few iterations, which also keeps unlocking
// quick on a small machine.
const KeySize = 32

// Volume is a LUKS2 volume on a block device.
type Volume struct {
	// Device is the block device (or, in tests, a file).
	Device string
	Run    Runner
}

// common are cryptsetup's arguments for every command: no question, no
// lock directory (the initramfs has no /run/cryptsetup of the root's),
// no udev (the initramfs runs none; libdevmapper makes the node itself).
var common = []string{"--batch-mode", "--disable-locks"}

func (v Volume) cryptsetup(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	return cryptsetup(ctx, v.Run, stdin, v.Device, args...)
}

// cryptsetup runs cryptsetup with the common arguments and args (a
// command first) about what (a device or a mapped name).
func cryptsetup(ctx context.Context, run Runner, stdin []byte, what string, args ...string) ([]byte, error) {
	out, err := run.Run(ctx, stdin, "cryptsetup", append(append([]string{}, common...), args...)...)
	if err != nil {
		return out, fmt.Errorf("cryptsetup %s %s: %w", args[0], what, err)
	}
	return out, nil
}

// Format makes v a new LUKS2 volume (AES-XTS, 512-bit key, 4 KiB sectors
// where the device allows) whose keyslot 0 opens with key. It erases what
// v holds.
func (v Volume) Format(ctx context.Context, key []byte, label string) error {
	if len(key) != KeySize {
		return fmt.Errorf("format %s: a key of %d bytes, want %d", v.Device, len(key), KeySize)
	}
	_, err := v.cryptsetup(ctx, key, FormatArgs(label, "-", v.Device, "--key-slot", "0")...)
	return err
}

// keyDerivation is how every keyslot derives its key: PBKDF2 with few
// iterations, since every key is random (KeySize).
var keyDerivation = []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}

// FormatArgs are the cryptsetup arguments that make device a new LUKS2
// volume labelled label whose first keyslot opens with the key in keyFile
// ("-": standard input): the cipher and key derivation of every volume
// Terrarium makes. extra go before the device.
func FormatArgs(label, keyFile, device string, extra ...string) []string {
	args := []string{"luksFormat", "--type", "luks2", "--cipher", "aes-xts-plain64", "--key-size", "512"}
	args = append(args, keyDerivation...)
	args = append(args, "--label", label, "--key-file", keyFile)
	return append(append(args, extra...), device)
}

// AddKey adds keyslot slot, which opens with newKey, authorized by key.
// The existing key passes through a file in /run, which the runner's
// program must see as this process does (firstboot's runner, not the
// initramfs's chroot).
func (v Volume) AddKey(ctx context.Context, key, newKey []byte, slot int) error {
	if len(newKey) != KeySize {
		return fmt.Errorf("add a key to %s: a key of %d bytes, want %d", v.Device, len(newKey), KeySize)
	}
	// cryptsetup reads the existing key from a file and the new one from
	// stdin: a file under /run (tmpfs), removed at once.
	f, err := os.CreateTemp("/run", "statecrypt-key-")
	if err != nil {
		return fmt.Errorf("add a key to %s: %w", v.Device, err)
	}
	defer func() { _ = os.Remove(f.Name()) }() // in /run: gone at the next boot anyway
	_, err = f.Write(key)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("add a key to %s: %w", v.Device, err)
	}
	args := append(append([]string{"luksAddKey"}, keyDerivation...),
		"--key-slot", strconv.Itoa(slot), "--key-file", f.Name(), "--new-keyfile", "-", v.Device)
	_, err = v.cryptsetup(ctx, newKey, args...)
	return err
}

// ImportToken stores t in v's header.
func (v Volume) ImportToken(ctx context.Context, t Token) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = v.cryptsetup(ctx, b, "token", "import", "--json-file", "-", v.Device)
	return err
}

// KillSlot wipes keyslot slot, asking for no key (batch mode): the
// caller holds another that opens v.
func (v Volume) KillSlot(ctx context.Context, slot int) error {
	_, err := v.cryptsetup(ctx, nil, "luksKillSlot", v.Device, strconv.Itoa(slot))
	return err
}

// RemoveToken removes token id from v's header.
func (v Volume) RemoveToken(ctx context.Context, id string) error {
	_, err := v.cryptsetup(ctx, nil, "token", "remove", "--token-id", id, v.Device)
	return err
}

// Open maps v, opened with key, as /dev/mapper/<name>.
func (v Volume) Open(ctx context.Context, key []byte, name string) error {
	_, err := v.cryptsetup(ctx, key, "open", "--type", "luks2", "--key-file", "-", v.Device, name)
	return err
}

// Header reads v's LUKS2 header.
func (v Volume) Header() (*Header, error) {
	f, err := os.Open(v.Device)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := ReadHeader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.Device, err)
	}
	return h, nil
}
