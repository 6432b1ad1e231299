package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
)

func backupCmd() *cobra.Command {
	dir := layout.BackupDir
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Write encrypted backups: of the cluster on a control plane, of the node's volumes where its config opts in",
		Long: `Takes a fresh etcd snapshot of the local member (or, if etcd does not answer,
uses the newest scheduled one) and writes terrarium-backup-<cluster>-<node>-<time>.age
to --dir: the snapshot and the cluster's CAs and service-account key, encrypted with
age to the cluster's backup passphrase (derived from the cluster CA key; see
docs/operations/backup.md). A new init node booted with its config disk and a
TERRA-BACKUP stick holding this file restores the cluster from it. Inserting a
stick labelled TERRA-BACKUP into a running control plane writes the same file to it.

On a node whose config opts in (imagebuild config cluster --backup-volumes), it
also writes terrarium-volumes-<cluster>-<node>-<time>.age: the node's local
volumes, encrypted to the node's own volume backup passphrase. A new node of
the same name booted with a stick holding it restores its volumes from it.`,
		Example: `  sudo firstboot backup --dir /home/admin`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := firstboot.Defaults(slog.New(slog.NewTextHandler(os.Stderr, nil)))
			o.Console = os.Stderr
			written, err := firstboot.Backup(cmd.Context(), o, dir)
			for _, w := range written {
				fmt.Println(w)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", dir, "the directory to write the backup to (created if missing)")
	return cmd
}
