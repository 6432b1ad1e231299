package registry

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fuzzed index.json may name the fuzzed manifest by these
// placeholders, which sideloadFuzzDisk replaces with its digest and size:
// without them a mutated manifest would never match a digest the index
// names, and the fuzzer would not get past the index.
const (
	fuzzManifestDigest = "MANIFEST_DIGEST"
	fuzzManifestSize   = "MANIFEST_SIZE"
)

// fuzzBlobs are the config and layer every seed's manifest names, present
// on every fuzzed disk.
type fuzzBlobs struct {
	config, layer   []byte
	configD, layerD v1.Hash
}

func newFuzzBlobs(t testing.TB) fuzzBlobs {
	b := fuzzBlobs{
		config: []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`),
		layer:  []byte("not really a tar, but its digest is right"),
	}
	var err error
	b.configD, _, err = v1.SHA256(bytes.NewReader(b.config))
	require.NoError(t, err)
	b.layerD, _, err = v1.SHA256(bytes.NewReader(b.layer))
	require.NoError(t, err)
	return b
}

// manifest is an OCI image manifest of the config and the layer.
func (b fuzzBlobs) manifest() []byte {
	return []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` +
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + b.configD.String() + `","size":` + strconv.Itoa(len(b.config)) + `},` +
		`"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"` + b.layerD.String() + `","size":` + strconv.Itoa(len(b.layer)) + `}]}`)
}

// indexNaming is an index.json naming the fuzzed manifest ref.
func indexNaming(mediaType string, refs ...string) []byte {
	var entries []string
	for _, ref := range refs {
		entries = append(entries, `{"mediaType":"`+mediaType+`","digest":"`+fuzzManifestDigest+`","size":`+fuzzManifestSize+
			`,"annotations":{"org.opencontainers.image.ref.name":"`+ref+`","io.containerd.image.name":"`+ref+`"}}`)
	}
	return []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + strings.Join(entries, ",") + `]}`)
}

// sideloadFuzzDisk writes a side-load disk: the oci-layout marker, index,
// the manifest under its digest, and the fixed blobs.
func sideloadFuzzDisk(t *testing.T, b fuzzBlobs, index, manifest []byte) string {
	dir := filepath.Join(t.TempDir(), "disk")
	md, _, err := v1.SHA256(bytes.NewReader(manifest))
	require.NoError(t, err)
	index = bytes.ReplaceAll(index, []byte(fuzzManifestDigest), []byte(md.String()))
	index = bytes.ReplaceAll(index, []byte(fuzzManifestSize), []byte(strconv.Itoa(len(manifest))))
	blobs := filepath.Join(dir, "blobs", "sha256")
	require.NoError(t, os.MkdirAll(blobs, 0o755))
	for name, data := range map[string][]byte{
		filepath.Join(dir, "oci-layout"):    []byte(layoutMarker),
		filepath.Join(dir, "index.json"):    index,
		filepath.Join(blobs, md.Hex):        manifest,
		filepath.Join(blobs, b.configD.Hex): b.config,
		filepath.Join(blobs, b.layerD.Hex):  b.layer,
	} {
		require.NoError(t, os.WriteFile(name, data, 0o644))
	}
	return dir
}

// FuzzAddLayout: a side-load disk's index.json and manifest, the untrusted
// input the registry reads from a stick. Whatever they hold, AddLayout
// does not panic; when it refuses the disk it names it and leaves the
// cache as it was (no blob, no name, on disk too); when it accepts it,
// every reference it returns resolves in the cache and none shadows a tag
// of the slot's bundle.
func FuzzAddLayout(f *testing.F) {
	b := newFuzzBlobs(f)
	manifest := b.manifest()
	oci := "application/vnd.oci.image.manifest.v1+json"
	f.Add(indexNaming(oci, extraRef), manifest)
	f.Add(indexNaming(oci, extraRef, "quay.io/extra/app:2", "quay.io/extra/app@sha256:"+strings.Repeat("0", 64)), manifest)
	f.Add(indexNaming(oci, apiserverRef), manifest) // shadows the slot's bundle
	f.Add(indexNaming("", "localhost:5000/x:y"), manifest)
	f.Add(indexNaming("application/vnd.oci.image.index.v1+json", extraRef),
		[]byte(`{"schemaVersion":2,"manifests":[{"mediaType":"`+oci+`","digest":"`+b.configD.String()+`","size":1}]}`))
	f.Add([]byte(`{"manifests":[{"digest":"sha256:../../etc","size":-1}]}`), manifest)
	f.Add([]byte(`[]`), []byte(`{}`))

	// The slot's bundle: built once per worker, only read.
	bundle, _ := slotBundle(f)
	slot, err := OpenLayout(bundle.dir)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, index, manifest []byte) {
		ctx := context.Background()
		cache, err := OpenCache(filepath.Join(t.TempDir(), "cache"), WithBundle(slot))
		require.NoError(t, err)
		dir := sideloadFuzzDisk(t, b, index, manifest)

		refs, err := cache.AddLayout(ctx, dir)
		if err != nil {
			assert.Contains(t, err.Error(), dir, "the error names the disk")
			assert.Empty(t, blobFiles(t, cache.Dir()), "a refused disk adds no blob")
			repos, rerr := cache.Repositories(ctx)
			require.NoError(t, rerr)
			assert.Empty(t, repos, "a refused disk adds no name")
			return
		}
		for _, ref := range refs {
			i := strings.LastIndex(ref, ":")
			require.Positive(t, i, "reference %q has a tag", ref)
			repo, tag := ref[:i], ref[i+1:]
			desc, err := cache.Resolve(ctx, repo, tag)
			require.NoError(t, err, "%s resolves in the cache", ref)
			if held, herr := slot.Resolve(ctx, repo, tag); herr == nil {
				assert.Equal(t, held.Digest, desc.Digest, "%s shadows the slot's bundle", ref)
			}
		}
	})
}
