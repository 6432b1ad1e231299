package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

func upgradeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "upgrade", Short: "Upgrade files (terrarium-VERSION.upgrade)"}
	cmd.AddCommand(upgradeInspectCmd(), upgradeForceCmd())
	return cmd
}

func upgradeInspectCmd() *cobra.Command {
	var trust []string
	cmd := &cobra.Command{
		Use:   "inspect [--trust KEY]... FILE",
		Short: "Print an upgrade file's manifest and check its signature and every part's sha256",
		Long: `Prints the versions, the compatible name, the parts with their sizes and
hashes, and the signer's key, then checks that the manifest is signed by a
trusted key and that every part matches its sha256, as a node does before it
writes anything. Exits non-zero unless all of that holds. KEY is the public
half of the build spec's signing key: its text form (ed25519:...) or a .pub
file. Without --trust, the signature is checked against the key the file
names, which proves the file whole but not who made it, and the exit status
is non-zero.`,
		Example: `  imagebuild upgrade inspect --trust build.pub out/terrarium-0.2.0.upgrade`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var keys []signature.PublicKey
			for _, arg := range trust {
				k, err := upgrade.LoadTrustedKey(arg)
				if err != nil {
					return err
				}
				keys = append(keys, k)
			}
			err := upgrade.Inspect(cmd.Context(), cmd.OutOrStdout(), args[0], keys)
			if errors.Is(err, upgrade.ErrNoTrustedKeys) {
				return fmt.Errorf("%w (with --trust)", err)
			}
			return err
		},
	}
	cmd.Flags().StringArrayVar(&trust, "trust", nil, "a key to trust: ed25519:<base64> or a .pub file (repeatable)")
	return cmd
}

// defaultForceValidity is how long a force instruction is honored unless
// --valid-for says otherwise: long enough to carry it to the site and roll
// it out, short enough that a copy kept afterwards cannot force the same
// (older) file back later.
const defaultForceValidity = 7 * 24 * time.Hour

func upgradeForceCmd() *cobra.Command {
	var (
		keyPath, out string
		validFor     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "force --key KEY [--valid-for DURATION] [-o OUT] FILE",
		Short: "Sign an instruction that makes the nodes force an upgrade file (a downgrade, a reinstall, one marked bad)",
		Long: `Writes a force instruction for the upgrade file FILE, signed with KEY (an
ed25519 key from imagebuild config keygen that the nodes trust for upgrades:
the build spec's upgrade.signingKey, or a key the nodes' configs list for the
upgrade purpose). A node installs an upgrade that its own checks refuse, a
downgrade, the same version again, or one that rolled back on it or anywhere
in its cluster, only with such an instruction: put it beside the file, as
FILE.force, on the TERRA-UPGRADE stick or beside the file given to
firstboot upgrade. On a node of a cluster the instruction rolls out with the
upgrade, and every node checks it before it acts; a forced rollout also
clears the cluster's bad mark on the file. An incompatible upgrade, or one
that breaks Kubernetes' version skew, stays refused.

The instruction names the file by the digest of its manifest, so it forces
that file and no other, and it expires (--valid-for, 7 days by default, on
the nodes' clocks), so that a copy kept afterwards cannot force the same file
back onto a cluster that moved on. The file is checked whole first.`,
		Example: `  imagebuild upgrade force --key build.key out/terrarium-0.2.0.upgrade
  # writes out/terrarium-0.2.0.upgrade.force: copy both files to the stick`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyPath == "" {
				return errors.New("--key is required: the signing key the nodes trust for upgrades")
			}
			key, err := signature.LoadPrivateKey(keyPath)
			if err != nil {
				return err
			}
			if out == "" {
				out = args[0] + upgrade.InstructionSuffix
			}
			return writeForce(cmd.Context(), cmd.OutOrStdout(), args[0], key, time.Now().Add(validFor), out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyPath, "key", "", "the signing key (imagebuild config keygen) the nodes trust for upgrades")
	f.DurationVar(&validFor, "valid-for", defaultForceValidity, "how long the nodes honor the instruction")
	f.StringVarP(&out, "output", "o", "", "where to write the instruction (default FILE.force, beside the file)")
	return cmd
}

// writeForce checks the upgrade file at path whole and writes to out a
// force instruction of it signed with key, valid until expires, telling
// w what it wrote.
func writeForce(ctx context.Context, w io.Writer, path string, key ed25519.PrivateKey, expires time.Time, out string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("force upgrade: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("force upgrade: %w", err)
	}
	uf, err := upgrade.Open(f, fi.Size(), upgrade.WithName(path))
	if err != nil {
		return err
	}
	signer, err := uf.Signer()
	if err != nil {
		return err
	}
	// Whole, as its signer made it; whether the nodes trust that signer
	// they check themselves.
	if _, err := uf.Verify(ctx, []signature.PublicKey{signer}); err != nil {
		return err
	}
	manifest, _ := uf.SignedManifest()
	in := upgrade.Instruction{Action: upgrade.ActionForce, Digest: upgrade.Digest(manifest), Version: uf.Manifest().Version,
		Expires: expires.UTC().Truncate(time.Second)}
	b, err := upgrade.SignInstruction(key, in)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("force upgrade: %w", err)
	}
	pub := signature.PublicKeyOf(key)
	msg := fmt.Sprintf("wrote %s: %s, signed by key %s\n", out, in, pub.ID())
	if pub != signer {
		msg += fmt.Sprintf("note: the upgrade file is signed by key %s and the instruction by key %s: the nodes must trust both for upgrades\n", signer.ID(), pub.ID())
	}
	msg += fmt.Sprintf("put it beside %s on the TERRA-UPGRADE stick (or beside the file for firstboot upgrade)\n", path)
	_, err = io.WriteString(w, msg)
	return err
}
