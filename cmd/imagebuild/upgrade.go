package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

func upgradeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "upgrade", Short: "Upgrade files (terrarium-VERSION.upgrade)"}
	cmd.AddCommand(upgradeInspectCmd())
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
