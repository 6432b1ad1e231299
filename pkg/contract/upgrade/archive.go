package upgrade

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// blockSize is the tar block size: headers are one block, data is padded
// to whole blocks, and two zero blocks end the archive.
const blockSize = 512

// memberHeader returns the tar header Write gives a member.
func memberHeader(name string, size int64, mtime time.Time) *tar.Header {
	return &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Size:     size,
		Mode:     0o644,
		ModTime:  mtime,
		Format:   tar.FormatUSTAR,
	}
}

// headerBlock returns the 512 bytes of a member's header as Write writes
// them.
func headerBlock(name string, size int64, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(memberHeader(name, size, mtime)); err != nil {
		return nil, err
	}
	// The member's data is not written: only the header block is wanted.
	return buf.Bytes()[:blockSize], nil
}

// padding is the number of zero bytes after n bytes of data.
func padding(n int64) int64 { return -n & (blockSize - 1) }

// signatureDomain starts the data an upgrade manifest's signature covers.
// Package signature signs with a domain of its own, meant for machine
// configs; prefixing this one keeps the two purposes apart until it takes
// a purpose of its own: a config never starts with this line, and no
// upgrade manifest is signed bare.
const signatureDomain = "terrarium upgrade manifest v1\n"

// signedData returns what the signature of manifest covers.
func signedData(manifest []byte) []byte {
	return append([]byte(signatureDomain), manifest...)
}

// signManifest returns the signature file of manifest.
func signManifest(key ed25519.PrivateKey, manifest []byte) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign upgrade manifest: the key is %d bytes; an ed25519 private key has %d", len(key), ed25519.PrivateKeySize)
	}
	return signature.Sign(key, signedData(manifest)), nil
}
