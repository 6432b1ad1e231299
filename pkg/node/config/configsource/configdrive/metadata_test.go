package configdrive

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
		{name: "Nova's", in: metaJSON, want: cloudinit.MetaData{
			InstanceID: "83679162-1378-4288-a2d4-70e13ec132aa", LocalHostname: "web-1.novalocal", PublicKeys: []string{key1, key2},
		}},
		{name: "name without hostname", in: `{"name": " db "}`, want: cloudinit.MetaData{LocalHostname: "db"}},
		{name: "empty object", in: `{}`},
		{name: "null keys", in: `{"public_keys": null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMetaData([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseMetaDataErrors(t *testing.T) {
	for _, in := range []string{``, `[]`, `{"hostname": 5}`, `{"public_keys": ["a"]}`, `{"public_keys": {"a": 1}}`, `{`} {
		_, err := ParseMetaData([]byte(in))
		require.ErrorIs(t, err, cloudinit.ErrMalformed, in)
		assert.Contains(t, err.Error(), "meta_data.json is malformed")
	}
}

// FuzzMetaData feeds meta_data.json (the seed corpus is in
// testdata/fuzz/FuzzMetaData) to ParseMetaData: it never panics and fails
// only with cloudinit.ErrMalformed.
func FuzzMetaData(f *testing.F) {
	f.Add([]byte(metaJSON))
	f.Add([]byte(`{"name": "x", "public_keys": {}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ParseMetaData(data); err != nil && !errors.Is(err, cloudinit.ErrMalformed) {
			t.Fatalf("undocumented error: %v", err)
		}
	})
}
