package nocloud

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cloudinit"
)

func TestParseMetaData(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     cloudinit.MetaData
	}{
		{name: "empty", in: ""},
		{name: "cloud-localds", in: "instance-id: iid-local01\nlocal-hostname: cloudimg\n",
			want: cloudinit.MetaData{InstanceID: "iid-local01", LocalHostname: "cloudimg"}},
		{name: "keys as a list, others ignored", in: "instance-id: 42\ndsmode: local\npublic-keys: [\"" + key1 + "\"]\n",
			want: cloudinit.MetaData{InstanceID: "42", PublicKeys: []string{key1}}},
		{name: "keys as lines", in: "public-keys: |\n  " + key1 + "\n\n  " + key2 + "\n",
			want: cloudinit.MetaData{PublicKeys: []string{key1, key2}}},
		{name: "keys by name", in: "public-keys:\n  alice: " + key1 + "\n  bob: [\"" + key2 + "\"]\n",
			want: cloudinit.MetaData{PublicKeys: []string{key1, key2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMetaData([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseMetaDataErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		sentinel error
		want     string
	}{
		{name: "not YAML", in: "instance-id: [", sentinel: cloudinit.ErrMalformed, want: "meta-data is malformed"},
		{name: "not a mapping", in: "- a\n", sentinel: cloudinit.ErrMalformed},
		{name: "a hostname list", in: "local-hostname: [a, b]\n", sentinel: cloudinit.ErrMalformed},
		{name: "keys of keys", in: "public-keys:\n  a: {b: c}\n", sentinel: cloudinit.ErrMalformed, want: "public-keys: a: must be a key or a list of keys (line 2)"},
		{name: "a list of lists", in: "public-keys: [[a]]\n", sentinel: cloudinit.ErrMalformed, want: "public-keys"},
		{name: "network-interfaces", in: "network-interfaces: |\n  auto eth0\n", sentinel: cloudinit.ErrUnsupported, want: "describe the network in network-config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMetaData([]byte(tc.in))
			require.ErrorIs(t, err, tc.sentinel)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// FuzzMetaData feeds meta-data (the seed corpus is in
// testdata/fuzz/FuzzMetaData) to ParseMetaData: it never panics and fails
// only with cloudinit's sentinels.
func FuzzMetaData(f *testing.F) {
	f.Add([]byte("instance-id: iid-local01\nlocal-hostname: cloudimg\n"))
	f.Add([]byte("public-keys:\n  alice: [\"" + key1 + "\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := ParseMetaData(data)
		if err != nil && !errors.Is(err, cloudinit.ErrMalformed) && !errors.Is(err, cloudinit.ErrUnsupported) {
			t.Fatalf("undocumented error: %v", err)
		}
	})
}
