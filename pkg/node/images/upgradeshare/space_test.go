package upgradeshare

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// manifestPeer serves one artifact manifest; it fails the test if asked
// for a blob.
type manifestPeer struct {
	t   *testing.T
	raw []byte
}

func (p manifestPeer) Manifest(context.Context, string, v1.Hash) ([]byte, string, error) {
	return p.raw, "10.0.0.11:5443", nil
}

func (p manifestPeer) Peers() []string { return []string{"10.0.0.11:5443"} }

func (p manifestPeer) Blob(context.Context, string, string, v1.Hash) (io.ReadCloser, int64, error) {
	p.t.Error("the upgrade file was fetched although it does not fit")
	return io.NopCloser(strings.NewReader("")), 0, nil
}

// TestShareSpace: an upgrade file that would leave less than the reserve
// free on STATE is refused before anything is written or fetched, with
// the sizes.
func TestShareSpace(t *testing.T) {
	const size = 3 << 20
	for _, tc := range []struct {
		name           string
		avail, reserve uint64
		want           string // "" when it fits
	}{
		{name: "fits beside the reserve", avail: size + 2<<20, reserve: 1 << 20},
		{name: "would eat into the reserve", avail: size + 512<<10, reserve: 1 << 20,
			want: "the upgrade file 0.2.0 needs 3.0 MiB on %s, which has 3.5 MiB free and keeps 1.0 MiB of it for etcd (state.reserveMiB): not enough free space; " +
				`free space on TERRA-STATE or enlarge it (the runbook's "TERRA-STATE is full"), or lower state.reserveMiB in the node's config if etcd needs less`},
		{name: "no reserve, too little free", avail: size - 1,
			want: "the upgrade file 0.2.0 needs 3.0 MiB on %s, which has 3.0 MiB free: not enough free space"},
	} {
		t.Run(tc.name+": add", func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, WithSpace(diskspace.Fixed{Avail: tc.avail}, tc.reserve))
			require.NoError(t, err)
			v, data := testUpgrade(t, "0.2.0", size)
			art, err := s.Add(context.Background(), v)
			if tc.want == "" {
				require.NoError(t, err)
				assert.EqualValues(t, len(data), art.Size)
				return
			}
			require.ErrorIs(t, err, diskspace.ErrNoSpace)
			t.Log(err)
			assert.ErrorContains(t, err, strings.ReplaceAll(tc.want, "%s", dir))
			assert.Empty(t, blobNames(t, dir), "nothing written")
			list, err := s.List()
			require.NoError(t, err)
			assert.Empty(t, list)
		})
		t.Run(tc.name+": fetch", func(t *testing.T) {
			if tc.want == "" {
				t.Skip("TestAddServeFetch fetches a file that fits")
			}
			empty, _, err := v1.SHA256(strings.NewReader(emptyJSON))
			require.NoError(t, err)
			digest := func(s string) v1.Hash {
				d, _, err := v1.SHA256(strings.NewReader(s))
				require.NoError(t, err)
				return d
			}
			raw, err := manifestFor(empty, []v1.Descriptor{
				{MediaType: ManifestMediaType, Digest: digest("manifest"), Size: 7, Annotations: map[string]string{titleAnnotation: "manifest.json"}},
				{MediaType: SignatureMediaType, Digest: digest("signature"), Size: 7, Annotations: map[string]string{titleAnnotation: "manifest.json.sig"}},
				{MediaType: PartMediaType, Digest: digest("rootfs"), Size: size, Annotations: map[string]string{titleAnnotation: "rootfs.squashfs"}},
			}, "0.2.0")
			require.NoError(t, err)
			d, _, err := v1.SHA256(bytes.NewReader(raw))
			require.NoError(t, err)
			dir := t.TempDir()
			s, err := Open(dir, WithSpace(diskspace.Fixed{Avail: tc.avail}, tc.reserve))
			require.NoError(t, err)
			_, err = s.Fetch(context.Background(), manifestPeer{t: t, raw: raw}, d)
			require.ErrorIs(t, err, diskspace.ErrNoSpace)
			assert.ErrorContains(t, err, "fetch upgrade 0.2.0 from 10.0.0.11:5443: "+strings.ReplaceAll(tc.want, "%s", dir))
			assert.Empty(t, blobNames(t, dir), "nothing written")
		})
	}
}
