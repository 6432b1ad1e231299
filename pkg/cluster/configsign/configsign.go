// Package configsign is the build host's side of machine config signatures,
// behind `imagebuild config sign`, `config disk --sign` and `config keygen`:
// it validates a config before signing it (its Ignition part too, which
// may come from a Butane or Container Linux Config file: ignition.go),
// loads signing keys (a key file or a cluster's secrets), and writes
// signature and key files atomically.
// The format and the checks are package signature's.
package configsign

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// Signed describes a config that was signed.
type Signed struct {
	// Config is the parsed config.
	Config *machineconfig.Config
	// Key is the key that signed it.
	Key signature.PublicKey
	// KeyTrusted reports whether Config trusts Key for configs, that is,
	// whether a later change may be signed with the same key.
	KeyTrusted bool
	// SignaturePath is where the signature was written, if anywhere.
	SignaturePath string
}

// ErrGeneration marks a config whose generation no node would take as a
// change.
var ErrGeneration = errors.New("the config's generation is not above the one it changes")

// SignFile validates the machine config at path, checks its generation
// (CheckGeneration, against the config at previous when that is not
// empty), signs it with the key at keyPath (see LoadKey) and writes the
// signature to path+signature.FileSuffix (mode 0644), replacing it
// atomically.
func SignFile(path, keyPath, previous string) (*Signed, error) {
	data, cfg, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	if err := CheckGeneration(path, cfg, previous); err != nil {
		return nil, err
	}
	key, err := LoadKey(keyPath)
	if err != nil {
		return nil, err
	}
	s := signed(cfg, key)
	s.SignaturePath = path + signature.FileSuffix
	if err := atomicfile.WriteFile(s.SignaturePath, signature.Sign(key, data), 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

// WriteDisk validates the machine config at path and writes the config
// disk out holding it and, when keyPath is not empty, its signature by the
// key at keyPath (see LoadKey). The config's Ignition part, its own
// ignition field or the file of WithIgnition, is checked as the node will
// check it (CheckIgnition, AddIgnition). It returns the parsed config and,
// for a signed disk, the Signed describing the signature (nil otherwise).
func WriteDisk(path, out, keyPath string, opts ...DiskOption) (*machineconfig.Config, *Signed, error) {
	o, err := makeDiskOptions(opts)
	if err != nil {
		return nil, nil, err
	}
	data, cfg, err := readConfig(path)
	if err != nil {
		return nil, nil, err
	}
	if o.ignition != "" {
		data, cfg, err = AddIgnition(path, cfg, o.ignition)
	} else {
		err = CheckIgnition(path, data, cfg)
	}
	if err != nil {
		return nil, nil, err
	}
	if keyPath == "" {
		return cfg, nil, configdisk.Write(out, data)
	}
	if err := CheckGeneration(path, cfg, ""); err != nil {
		return nil, nil, err
	}
	key, err := LoadKey(keyPath)
	if err != nil {
		return nil, nil, err
	}
	if err := configdisk.WriteSigned(out, data, signature.Sign(key, data)); err != nil {
		return nil, nil, err
	}
	return cfg, signed(cfg, key), nil
}

// CheckGeneration refuses to sign a config a node would refuse as
// replayed: one with no generation (a node takes a signed change only
// above the generation it applied, and every node has applied at least
// 0), or, when previous names the config the node runs now, one not above
// previous's generation. Its errors wrap ErrGeneration and name the file
// and the fix.
func CheckGeneration(path string, cfg *machineconfig.Config, previous string) error {
	if cfg.Generation == 0 {
		return fmt.Errorf("%s: generation: %w: it has none, and a node takes a signed change only when its generation is above the highest it applied; add generation: N (1 for a node's first change, one more than the config it runs for later ones)", path, ErrGeneration)
	}
	if previous == "" {
		return nil
	}
	_, prev, err := readConfig(previous)
	if err != nil {
		return fmt.Errorf("read the previous config: %w", err)
	}
	if cfg.Generation <= prev.Generation {
		return fmt.Errorf("%s: generation: %w: it is %d and %s has %d; set generation: %d or higher", path, ErrGeneration, cfg.Generation, previous, prev.Generation, prev.Generation+1)
	}
	return nil
}

func readConfig(path string) ([]byte, *machineconfig.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := machineconfig.Parse(path, data)
	if err != nil {
		return nil, nil, err
	}
	return data, cfg, nil
}

func signed(cfg *machineconfig.Config, key ed25519.PrivateKey) *Signed {
	pub := signature.PublicKeyOf(key)
	return &Signed{Config: cfg, Key: pub, KeyTrusted: slices.Contains(cfg.KeysFor(machineconfig.PurposeConfig), pub)}
}

// LoadKey reads a signing key from path: either a key file (PEM, as Keygen
// writes it) or a cluster secrets file, whose config signing key it takes.
// Its errors name the file.
func LoadKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load signing key: %w", err)
	}
	if !bytes.Contains(data, []byte("kind: "+clustersecrets.Kind)) {
		return signature.LoadPrivateKey(path)
	}
	s, err := clustersecrets.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load signing key from cluster secrets: %w", err)
	}
	key, err := s.SigningPrivateKey()
	if err != nil {
		return nil, fmt.Errorf("cluster secrets %s: %w", path, err)
	}
	return key, nil
}

// KeyFiles are the files Keygen wrote.
type KeyFiles struct {
	// PrivatePath is NAME.key, the PEM private key (mode 0600).
	PrivatePath string
	// PublicPath is NAME.pub, the public key's text form and a newline.
	PublicPath string
	// Key is the public key.
	Key signature.PublicKey
}

// Keygen makes a new signing key and writes it as name+".key" (PEM, mode
// 0600) and name+".pub" (its public key, the line for trustedKeys). It
// refuses to replace either file: configs signed with an old key would
// need it.
func Keygen(name string) (*KeyFiles, error) {
	kf := &KeyFiles{PrivatePath: name + ".key", PublicPath: name + ".pub"}
	for _, p := range []string{kf.PrivatePath, kf.PublicPath} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("keygen: %s exists; move it away or pick another name: nodes may trust the key it holds", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("keygen: %w", err)
		}
	}
	priv, pub, err := signature.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	pemBytes, err := signature.MarshalPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	if err := atomicfile.WriteFile(kf.PrivatePath, pemBytes, 0o600); err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	if err := atomicfile.WriteFile(kf.PublicPath, []byte(pub.String()+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	kf.Key = pub
	return kf, nil
}
