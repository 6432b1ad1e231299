package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/backup"
)

// backupPassphrase is the backup passphrase of the cluster whose secrets
// file is at path.
func backupPassphrase(path string) (*clustersecrets.Secrets, string, error) {
	if path == "" {
		return nil, "", errors.New("give --secrets, the cluster's secrets file")
	}
	s, err := clustersecrets.Load(path)
	if err != nil {
		return nil, "", err
	}
	pass, err := backup.Passphrase([]byte(s.CA.Key), s.ClusterName)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return s, pass, nil
}

// volumesPassphrase is node's volume backup passphrase in the cluster whose
// secrets are s.
func volumesPassphrase(s *clustersecrets.Secrets, path, node string) (string, error) {
	pass, err := backup.VolumesPassphrase([]byte(s.CA.Key), s.ClusterName, node)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return pass, nil
}

func backupKeyCmd() *cobra.Command {
	var secretsPath, node string
	cmd := &cobra.Command{
		Use:   "backup-key",
		Short: "Print the cluster's backup passphrase (derived from its CA key), for the age tool",
		Long: `Prints the passphrase the cluster's backups (terrarium-backup-*.age) are
encrypted to: HKDF-SHA256 of the cluster CA's private key, bound to the
cluster's name (docs/operations/backup.md). Anyone holding the secrets file
can derive it; keep it as you keep the secrets file. With --node, prints that
node's volume backup passphrase instead (terrarium-volumes-*.age).`,
		Example: `  imagebuild config backup-key --secrets cluster/secrets.yaml
  age -d terrarium-backup-plant-7-cp-1-20261126T120000Z.age | tar -t   # paste the passphrase
  imagebuild config backup-key --secrets cluster/secrets.yaml --node w-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, pass, err := backupPassphrase(secretsPath)
			if err != nil {
				return err
			}
			if node != "" {
				if pass, err = volumesPassphrase(s, secretsPath, node); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), pass)
			return err
		},
	}
	cmd.Flags().StringVar(&secretsPath, "secrets", "", "the cluster's secrets file")
	cmd.Flags().StringVar(&node, "node", "", "print this node's volume backup passphrase")
	return cmd
}

func backupOpenCmd() *cobra.Command {
	var secretsPath, out string
	cmd := &cobra.Command{
		Use:   "backup-open FILE",
		Short: "Decrypt and check a cluster or volume backup, unpacking it into a directory",
		Long: `Decrypts a backup with the cluster's passphrase, checks every member's size and
digest against its manifest, and unpacks snapshot.db and pki/ into -o (which
must not exist or be empty). It prints the manifest: which cluster, which
node, when.

A node's volume backup (terrarium-volumes-<cluster>-<node>-<time>.age) is
decrypted with that node's passphrase, found from its file name, and its
volumes unpacked into -o, one directory each, with their modes and times
(their owners too when run as root).`,
		Example: `  imagebuild config backup-open --secrets cluster/secrets.yaml -o restored/ terrarium-backup-plant-7-cp-1-20261126T120000Z.age
  imagebuild config backup-open --secrets cluster/secrets.yaml -o volumes/ terrarium-volumes-plant-7-w-1-20261203T050000Z.age`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("give -o, the directory to unpack into")
			}
			if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
				return fmt.Errorf("-o %s is not empty", out)
			}
			s, pass, err := backupPassphrase(secretsPath)
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			if node, _, ok := backup.ParseVolumesFileName(filepath.Base(args[0]), s.ClusterName); ok {
				pass, err := volumesPassphrase(s, secretsPath, node)
				if err != nil {
					return err
				}
				m, err := backup.ExtractVolumes(f, pass, out, os.Geteuid() == 0)
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				fmt.Printf("%s: cluster %s (CA %s), volumes of %s at %s, release %s: %s\nunpacked into %s\n",
					args[0], m.Cluster, m.CACertHash, m.Node, m.TakenAt.Format("2006-01-02T15:04:05Z07:00"), m.Release, m.VolumesSummary(), out)
				return nil
			}
			m, err := backup.Extract(f, pass, out)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			fmt.Printf("%s: cluster %s (CA %s), snapshot of %s at %s, %d bytes; release %s, Kubernetes %s\nunpacked into %s\n",
				args[0], m.Cluster, m.CACertHash, m.Node, m.TakenAt.Format("2006-01-02T15:04:05Z07:00"), m.Snapshot.Size, m.Release, m.Kubernetes, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&secretsPath, "secrets", "", "the cluster's secrets file")
	cmd.Flags().StringVarP(&out, "out", "o", "", "the directory to unpack into")
	return cmd
}
