package rollout

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// signedUpgrade is an upgrade file of version (carrying Kubernetes kube)
// signed with key, as a rollout of it names it: its digest and its
// signed manifest.
func signedUpgrade(t *testing.T, key ed25519.PrivateKey, version, kube string) Upgrade {
	t.Helper()
	var parts []upgrade.Part
	for _, p := range []struct {
		name string
		role upgrade.Role
	}{{"rootfs.squashfs", upgrade.RoleRootfs}, {"vmlinuz", upgrade.RoleKernel}, {"initrd.img", upgrade.RoleInitramfs}} {
		data := []byte(p.name + " of " + version)
		parts = append(parts, upgrade.Part{Name: p.name, Role: p.role, Open: func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}})
	}
	m := upgrade.Manifest{Version: version, Compatible: "terrarium", MinFromVersion: "0.0.0", KubernetesVersion: kube, BuiltAt: "2026-11-01T00:00:00Z"}
	var file bytes.Buffer
	_, err := upgrade.Write(context.Background(), &file, m, parts, key)
	require.NoError(t, err)
	f, err := upgrade.Open(bytes.NewReader(file.Bytes()), int64(file.Len()))
	require.NoError(t, err)
	manifest, sig := f.SignedManifest()
	return Upgrade{Digest: upgrade.Digest(manifest), Version: version, Kubernetes: kube, Ref: "terrarium.internal/upgrade@sha256:" + strings.Repeat("1", 64),
		Instructions: Instructions{Manifest: string(manifest), ManifestSignature: string(sig)}}
}

// forceOf is a force instruction of u signed with key, valid until
// expires.
func forceOf(t *testing.T, key ed25519.PrivateKey, u Upgrade, expires time.Time) string {
	t.Helper()
	b, err := upgrade.SignInstruction(key, upgrade.Instruction{Action: upgrade.ActionForce, Digest: u.Digest, Version: u.Version, Expires: expires})
	require.NoError(t, err)
	return string(b)
}

// Every way a record may lie about what a node is to install is refused
// with what does not hold; a record without signed instructions (one an
// older node started) verifies, but forces nothing.
func TestVerify(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	other, _, err := signature.GenerateKey()
	require.NoError(t, err)
	trusted := []signature.PublicKey{pub}
	now := t0
	u := signedUpgrade(t, key, "0.2.0", "v1.36.3")
	u021 := signedUpgrade(t, key, "0.2.1", "v1.36.3")
	untrusted := signedUpgrade(t, other, "0.2.0", "v1.36.3")

	for _, tt := range []struct {
		name string
		// change makes the record from one that starts u unforced.
		change func(r *Record)
		// want is the refusal's text; "" for a record that verifies.
		want                  string
		forced, unsignedForce bool
		legacy                bool
	}{
		{name: "unforced, signed by the build's key", change: func(*Record) {}},
		{name: "forced by a trusted key", change: func(r *Record) {
			r.Instructions.Force, r.Rollout.Forced = forceOf(t, key, u, now.Add(time.Hour)), true
		}, forced: true},
		{name: "an older node's record: no instructions", change: func(r *Record) { r.Instructions = nil }, legacy: true},
		{name: "an older node's forced record: its force is not honored", change: func(r *Record) {
			r.Instructions, r.Rollout.Forced = nil, true
		}, legacy: true, unsignedForce: true},
		{name: "a forced flag set without an instruction", change: func(r *Record) { r.Rollout.Forced = true }, unsignedForce: true},
		{name: "instructions of another rollout", change: func(r *Record) { r.Instructions.Digest = u021.Digest }, legacy: true},
		{name: "a force instruction by an untrusted key", change: func(r *Record) {
			r.Instructions.Force, r.Rollout.Forced = forceOf(t, other, u, now.Add(time.Hour)), true
		}, want: "its force instruction: signed by key"},
		{name: "a force instruction of another upgrade", change: func(r *Record) {
			r.Instructions.Force, r.Rollout.Forced = forceOf(t, key, u021, now.Add(time.Hour)), true
		}, want: "its force instruction: the instruction is about another upgrade file: it forces 0.2.1"},
		{name: "an expired force instruction", change: func(r *Record) {
			r.Instructions.Force, r.Rollout.Forced = forceOf(t, key, u, now.Add(-time.Second)), true
		}, want: "its force instruction: the instruction has expired"},
		{name: "a force instruction edited", change: func(r *Record) {
			r.Instructions.Force = strings.Replace(forceOf(t, key, u021, now.Add(time.Hour)), "0.2.1", "0.2.0", 1)
		}, want: "its force instruction: signed by key"},
		{name: "a force instruction without a manifest", change: func(r *Record) {
			r.Instructions.Force, r.Instructions.Manifest = forceOf(t, key, u, now.Add(time.Hour)), ""
		}, want: "a force instruction without the upgrade's signed manifest"},
		{name: "a manifest by an untrusted key", change: func(r *Record) {
			r.Instructions.Manifest, r.Instructions.ManifestSignature = untrusted.Instructions.Manifest, untrusted.Instructions.ManifestSignature
		},
			want: "signed by a key that is not trusted"},
		{name: "a manifest edited", change: func(r *Record) {
			r.Instructions.Manifest = strings.Replace(r.Instructions.Manifest, `"0.2.0"`, `"0.2.5"`, 1)
		}, want: "the manifest's signature does not match it"},
		{name: "another signed manifest", change: func(r *Record) {
			r.Instructions.Manifest, r.Instructions.ManifestSignature = u021.Instructions.Manifest, u021.Instructions.ManifestSignature
		}, want: "the record names the upgrade " + u.Digest + ", and its signed manifest is " + u021.Digest},
		{name: "a changed version", change: func(r *Record) { r.Rollout.Version = "0.1.0" }, want: "the record names version 0.1.0, and its signed manifest says 0.2.0"},
		{name: "a changed Kubernetes", change: func(r *Record) { r.Rollout.Kubernetes = "v1.35.0" }, want: `the record names Kubernetes "v1.35.0", and its signed manifest says "v1.36.3"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r Record
			require.NoError(t, r.Start(u, members, "cp-1", t0))
			tt.change(&r)
			v, err := r.Verify(trusted, now)
			if tt.want != "" {
				assert.ErrorIs(t, err, ErrUnverified)
				assert.ErrorContains(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.forced, v.Force != nil, "forced")
			assert.Equal(t, tt.unsignedForce, v.UnsignedForce, "unsigned force")
			assert.Equal(t, tt.legacy, v.Manifest == nil, "no signed manifest")
			if tt.forced {
				assert.Equal(t, pub, v.ForceSigner)
			}
			if !tt.legacy {
				assert.Equal(t, "0.2.0", v.Manifest.Version)
			}
		})
	}
	_, err = new(Record).Verify(trusted, now)
	assert.ErrorContains(t, err, "the record holds no rollout")
}
