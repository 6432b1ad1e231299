package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/recoverykey"
)

func recoveryKeyCmd() *cobra.Command {
	var secretsPath string
	cmd := &cobra.Command{
		Use:   "recovery-key --secrets FILE CODE",
		Short: "Give a node's TERRA-STATE recovery key from the recovery code its console shows",
		Long: `A node whose TPM will not release TERRA-STATE's key (the disk moved to another
machine, the TPM cleared, the Secure Boot keys changed) stops at boot, says why,
and shows its recovery code and the ID of the cluster's escrow key. Given the
code, this derives the node's recovery key from the cluster's secrets file (its
recoveryKey) and prints it: type it at the node's console, which opens
TERRA-STATE and seals its key to that machine's TPM again
(docs/state-encryption.md). The code is not secret; the key and the secrets
file are.`,
		Example: `  imagebuild config recovery-key --secrets cluster/secrets.yaml mfrg-gzdf-mztg-...`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if secretsPath == "" {
				return errors.New("give --secrets (the cluster's secrets file)")
			}
			s, err := clustersecrets.Load(secretsPath)
			if err != nil {
				return err
			}
			e, err := s.RecoveryEscrow()
			if err != nil {
				return fmt.Errorf("%s: %w", secretsPath, err)
			}
			code, err := recoverykey.ParseCode(strings.Join(args, ""))
			if err != nil {
				return err
			}
			key, err := e.Recover(code)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "escrow key %s of cluster %q; if the node shows another escrow key, use that cluster's secrets\n", e.Public().ID(), s.ClusterName)
			_, err = fmt.Fprintln(out, key)
			return err
		},
	}
	cmd.Flags().StringVar(&secretsPath, "secrets", "", "the cluster's secrets file")
	return cmd
}
