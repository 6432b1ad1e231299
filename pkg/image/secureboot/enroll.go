package secureboot

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
)

// ExtraCert is a certificate enrolled in db besides the site's own, with
// its owner's GUID: e.g. Microsoft's UEFI CA on hardware whose graphics or
// network option ROMs it signed (docs/secure-boot.md).
type ExtraCert struct {
	Owner efisig.GUID
	Cert  *x509.Certificate
}

// LoadExtraCert reads a certificate for WithExtraDB from path, PEM or DER
// (Microsoft publishes its UEFI CA as DER), with the GUID of its owner
// in text form.
func LoadExtraCert(path, owner string) (ExtraCert, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return ExtraCert{}, fmt.Errorf("read a db certificate: %w", err)
	}
	der := b
	if block, _ := pem.Decode(b); block != nil {
		if block.Type != "CERTIFICATE" {
			return ExtraCert{}, fmt.Errorf("%s: a PEM %s, not a CERTIFICATE", path, block.Type)
		}
		der = block.Bytes
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return ExtraCert{}, fmt.Errorf("%s: not a PEM or DER certificate: %w", path, err)
	}
	g, err := efisig.ParseGUID(owner)
	if err != nil {
		return ExtraCert{}, fmt.Errorf("%s's owner: %w", path, err)
	}
	return ExtraCert{Owner: g, Cert: cert}, nil
}

// EnrollOption sets an optional input of Enrollment.
type EnrollOption func(*enrollOptions) error

type enrollOptions struct {
	extraDB []ExtraCert
}

// WithExtraDB adds certificates to db after the site's db certificate.
func WithExtraDB(certs ...ExtraCert) EnrollOption {
	return func(o *enrollOptions) error {
		for i, c := range certs {
			if c.Cert == nil {
				return fmt.Errorf("WithExtraDB: certificate %d is nil", i)
			}
		}
		o.extraDB = append(o.extraDB, certs...)
		return nil
	}
}

// ESLFile names r's signature list file, the variable's new content (as
// efitools' cert-to-efi-sig-list writes it).
func ESLFile(r Role) string { return string(r) + ".esl" }

// AuthFile names r's signed update file (as efitools' sign-efi-sig-list
// writes it), which systemd-boot's secure-boot-enroll reads from
// loader/keys/SITE/ on the ESP.
func AuthFile(r Role) string { return string(r) + ".auth" }

// signerOf is the role whose key signs the update of r: PK signs PK and
// KEK, KEK signs db.
func signerOf(r Role) Role {
	if r == DB {
		return KEK
	}
	return PK
}

// Enrollment returns the enrollment files of ks, file name -> content:
// for each of PK, KEK and db, ROLE.esl and ROLE.auth, the update
// timestamped ts (a firmware in setup mode takes any time; one with keys
// takes only a time later than its variable's) and signed as a firmware
// requires (PK by PK, KEK by PK, db by KEK). Each signature is verified
// before it is returned.
func (ks *KeySet) Enrollment(ts time.Time, opts ...EnrollOption) (map[string][]byte, error) {
	var o enrollOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("make enrollment files: %w", err)
		}
	}
	if ts.IsZero() {
		return nil, errors.New("make enrollment files: zero timestamp")
	}
	et := NewEFITime(ts)
	files := map[string][]byte{}
	for _, r := range Roles() {
		lists := []efisig.SignatureList{efisig.X509SignatureList(ks.Owner, ks.Key(r).Cert)}
		if r == DB {
			for _, c := range o.extraDB {
				lists = append(lists, efisig.X509SignatureList(c.Owner, c.Cert))
			}
		}
		esl, err := efisig.MarshalSignatureLists(lists...)
		if err != nil {
			return nil, fmt.Errorf("make enrollment files: %s: %w", ESLFile(r), err)
		}
		signer := ks.Key(signerOf(r))
		v := VariableOf(r)
		av, err := SignVariable(v, et, esl, signer)
		if err != nil {
			return nil, fmt.Errorf("make enrollment files: %s: %w", AuthFile(r), err)
		}
		if err := av.Verify(v, signer.Cert); err != nil {
			return nil, fmt.Errorf("make enrollment files: %s: %w", AuthFile(r), err)
		}
		auth, err := av.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("make enrollment files: %s: %w", AuthFile(r), err)
		}
		files[ESLFile(r)], files[AuthFile(r)] = esl, auth
	}
	return files, nil
}

// WriteEnrollment writes Enrollment's files into dir (created if absent),
// 0644: they hold certificates only.
func (ks *KeySet) WriteEnrollment(dir string, ts time.Time, opts ...EnrollOption) error {
	files, err := ks.Enrollment(ts, opts...)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write enrollment files: %w", err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("write enrollment files: %w", err)
		}
	}
	return nil
}
