package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
)

func secureBootCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secureboot", Short: "A site's Secure Boot keys (docs/secure-boot.md)"}
	cmd.AddCommand(secureBootKeysCmd(), secureBootEnrollmentCmd())
	return cmd
}

func secureBootKeysCmd() *cobra.Command {
	var site, out string
	cmd := &cobra.Command{
		Use:   "keys --site NAME --out DIR",
		Short: "Make a site's Secure Boot key set (PK, KEK, db) once",
		Long: `Makes RSA-2048 keys and self-signed certificates for PK, KEK and db, and an
owner GUID, in DIR (created 0700; the keys 0600). A build spec's
secureBoot.keys names DIR; the build signs with db only. A key set is never
replaced: every machine that enrolled it accepts only what its db key signs,
so keep DIR backed up, and offline where you can.`,
		Example: `  imagebuild secureboot keys --site plant-7 --out site/secureboot`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ks, err := secureboot.Generate(out, site)
			if err != nil {
				return err
			}
			var b strings.Builder
			fmt.Fprintf(&b, "Secure Boot key set for %s in %s:\n", site, ks.Dir)
			for _, r := range secureboot.Roles() {
				k := ks.Key(r)
				fmt.Fprintf(&b, "  %-3s %s  (key %s)\n", r, k.CertFile, filepath.Base(k.KeyFile))
			}
			fmt.Fprintf(&b, "Name it in the build spec:  secureBoot: {keys: %s}\n", out)
			_, err = io.WriteString(cmd.OutOrStdout(), b.String())
			return err
		},
	}
	cmd.Flags().StringVar(&site, "site", "", "the site's name (1 to 40 of A-Za-z0-9._-): the certificates' organization")
	cmd.Flags().StringVar(&out, "out", "", "the key set's directory (must not hold one yet)")
	_ = cmd.MarkFlagRequired("site")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func secureBootEnrollmentCmd() *cobra.Command {
	var keys, out string
	cmd := &cobra.Command{
		Use:   "enrollment --keys DIR --out DIR",
		Short: "Write the files a firmware's setup enrolls: PK, KEK and db as .esl, .auth and .der",
		Long: `Writes, for each of PK, KEK and db, the signature list (.esl), the signed
update (.auth) and the certificate (.der): what a firmware's Secure Boot
setup screen or another tool (efi-updatevar, KeyTool) enrolls. A Secure Boot
image carries the .auth files on its ESP for systemd-boot already; these are
for machines whose firmware enrolls keys itself (secureBoot.enroll: off).`,
		Example: `  imagebuild secureboot enrollment --keys site/secureboot --out /media/usb/keys`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ks, err := secureboot.Load(keys)
			if err != nil {
				return err
			}
			if err := ks.WriteEnrollment(out, time.Now()); err != nil {
				return err
			}
			for _, r := range secureboot.Roles() {
				if err := atomicfile.WriteFile(filepath.Join(out, string(r)+".der"), ks.Key(r).Cert.Raw, 0o644); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "enrollment files for %s in %s: enroll db, then KEK, then PK (PK ends setup mode)\n", ks.Site, out)
			return err
		},
	}
	cmd.Flags().StringVar(&keys, "keys", "", "the site's key set directory (imagebuild secureboot keys)")
	cmd.Flags().StringVar(&out, "out", "", "where to write the files")
	_ = cmd.MarkFlagRequired("keys")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
