package main

import (
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/cluster/configsign"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/bundledisk"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

func bundleCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bundle", Short: "Bundles of container images"}
	var out, cacheDir, keyPath string
	var replaceTags []string
	var generation uint64
	disk := &cobra.Command{
		Use:   "disk BUNDLE.yaml",
		Short: "Write a TERRA-BUNDLE disk (FAT32 with an OCI layout) that nodes add to their registry cache",
		Long: `Writes a TERRA-BUNDLE disk (FAT32 with an OCI layout) that nodes add to their
registry cache when it is attached. A node that trusts any key takes it only
signed (--sign) by a key it trusts for bundles. A side-load never moves a tag
a node has to another image, unless the signed bundle names the tag in
--replace-tags with the bundle's --generation: a node records, per tag, the
highest generation that moved it and refuses a bundle at or below it, so an
older stick played again cannot move the tag back. Number a tag's bundles
upwards (1, 2, …); the node's refusal names the generation it needs.`,
		Example: `  imagebuild bundle disk my-apps.yaml --sign lab/secrets.yaml -o my-apps.img
  imagebuild bundle disk my-apps.yaml --sign lab/secrets.yaml \
    --replace-tags quay.io/terrarium/sideloaded:1.0 --generation 2 -o my-apps.img`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			var key ed25519.PrivateKey
			if keyPath != "" {
				k, err := configsign.LoadKey(keyPath)
				if err != nil {
					return err
				}
				key = k
			}
			m, err := bundledisk.Write(cmd.Context(), args[0], out, bundledisk.Signing{Key: key, ReplaceTags: replaceTags, Generation: generation},
				bundle.WithCacheDir(filepath.Join(cacheDir, "bundle-blobs")), bundle.WithLogger(log))
			if err != nil {
				return err
			}
			for _, img := range m.Images {
				mark := ""
				if slices.Contains(replaceTags, img.Name) {
					mark = fmt.Sprintf("  (replaces the image a node has under this name, generation %d)", generation)
				}
				fmt.Printf("  %-50s %s%s\n", img.Name, img.Digest, mark)
			}
			fmt.Printf("wrote %s: %d images, %d blobs, %.1f MiB; attach it to a node (disk or USB stick)\n", out, len(m.Images), m.Blobs, float64(m.Size)/(1<<20))
			if key == nil {
				fmt.Printf("unsigned: only a node that trusts no key takes it\n")
				return nil
			}
			fmt.Printf("signed with key %s (%s): nodes that trust it for bundles (trustedKeys purposes: [bundle]) take it\n", signature.PublicKeyOf(key).ID(), signature.PublicKeyOf(key))
			return nil
		},
	}
	disk.Flags().StringVarP(&out, "out", "o", "bundle.img", "disk image to write")
	disk.Flags().StringVar(&cacheDir, "cache", cache.DefaultDir(), "content-addressed cache")
	disk.Flags().StringVar(&keyPath, "sign", "", "sign the bundle with this key: a .key file from config keygen, or a cluster's secrets file; a node that trusts any key takes only bundles signed by a key it trusts for bundles")
	disk.Flags().StringSliceVar(&replaceTags, "replace-tags", nil, "images of the bundle (host/path:tag, comma-separated or repeated) that replace the image a node holds under that name; needs --sign (without it a side-load never moves a tag) and --generation")
	disk.Flags().Uint64Var(&generation, "generation", 0, "the bundle's generation, signed with --replace-tags (which needs it): a node refuses a bundle whose generation is not above the highest that already moved the tag, so an older bundle cannot be played again; number a tag's bundles upwards (1, 2, …)")
	cmd.AddCommand(disk)
	return cmd
}
