package grubenv

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEncodeParseRoundTrip(t *testing.T) {
	env := Env{"terrarium_prefer": "b", "terrarium_tried_b": "xx", "terrarium_tried_b_of": "terrarium-b+3.conf", "gone": ""}
	b, err := Encode(env)
	require.NoError(t, err)
	assert.Len(t, b, Size)
	assert.True(t, bytes.HasPrefix(b, []byte(Signature)))
	assert.True(t, strings.HasPrefix(string(b), "# GRUB Environment Block\nterrarium_prefer=b\nterrarium_tried_b=xx\nterrarium_tried_b_of=terrarium-b+3.conf\n####"), "%q", b[:120])
	assert.Equal(t, strings.Repeat("#", Size-Sector), string(b[Sector:]), "the second sector is padding alone")

	got, err := Parse(b)
	require.NoError(t, err)
	delete(env, "gone")
	assert.Equal(t, env, got)
}

// GRUB's own save_env writes a block this package reads: the one GRUB
// wrote in a SeaBIOS boot (a variable appended after the padding it
// shortened).
func TestParseWhatGRUBWrites(t *testing.T) {
	b := []byte(Signature + "terrarium_prefer=b\nterrarium_tried_b=x\nterrarium_tried_b_of=terrarium-b+3.conf\n" + strings.Repeat("#", 800))
	env, err := Parse(b)
	require.NoError(t, err)
	assert.Equal(t, Env{"terrarium_prefer": "b", "terrarium_tried_b": "x", "terrarium_tried_b_of": "terrarium-b+3.conf"}, env)
}

func TestParseSkipsWhatIsNotAVariable(t *testing.T) {
	env, err := Parse([]byte(Signature + "# a comment\nno equals sign\nbad name!=1\nok=a b\nfine=1\n###"))
	require.NoError(t, err)
	assert.Equal(t, Env{"fine": "1"}, env)
}

func TestRefusals(t *testing.T) {
	_, err := Parse([]byte("terrarium_prefer=b\n"))
	require.ErrorIs(t, err, ErrNotBlock)

	for _, tc := range []struct {
		env  Env
		want string
	}{
		{Env{"": "x"}, "an empty variable name"},
		{Env{"9lives": "x"}, `variable name "9lives"`},
		{Env{"a": "x y"}, `variable a: value "x y"`},
		{Env{"a": "x\ny=1"}, `variable a: value`},
		{Env{"a": strings.Repeat("x", Sector)}, "more than its first 512-byte sector"},
	} {
		_, err := Encode(tc.env)
		assert.ErrorContains(t, err, tc.want)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(Signature + "terrarium_prefer=b\n###"))
	f.Add([]byte(Signature + "a=\n=b\n\n#x=y\n"))
	f.Add([]byte("# GRUB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := Parse(b)
		if err != nil {
			return
		}
		// What parses and fits encodes, and reads back the same.
		out, err := Encode(env)
		if err != nil {
			return
		}
		again, err := Parse(out)
		require.NoError(t, err)
		for k, v := range env {
			if v == "" {
				delete(env, k)
			}
		}
		assert.Equal(t, env, again)
	})
}

func TestUpdateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grubenv")
	b, err := Encode(Env{"terrarium_prefer": "a", "terrarium_tried_b": "x"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))

	changed, err := UpdateFile(path, func(e Env) { e["terrarium_prefer"] = "b"; delete(e, "terrarium_tried_b") })
	require.NoError(t, err)
	assert.True(t, changed)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, got, Size)
	env, err := Parse(got)
	require.NoError(t, err)
	assert.Equal(t, Env{"terrarium_prefer": "b"}, env)

	changed, err = UpdateFile(path, func(e Env) { e["terrarium_prefer"] = "b" })
	require.NoError(t, err)
	assert.False(t, changed, "nothing to write")

	_, err = UpdateFile(filepath.Join(t.TempDir(), "none"), func(Env) {})
	require.ErrorIs(t, err, fs.ErrNotExist)

	// A block GRUB filled past its first sector is rewritten within it.
	full := filepath.Join(t.TempDir(), "full")
	long := []byte(Signature + "terrarium_prefer=a\nbig=" + strings.Repeat("x", 600) + "\n")
	require.NoError(t, os.WriteFile(full, append(long, bytes.Repeat([]byte{'#'}, Size-len(long))...), 0o644))
	changed, err = UpdateFile(full, func(e Env) { delete(e, "big") })
	require.NoError(t, err)
	assert.True(t, changed)

	short := filepath.Join(t.TempDir(), "short")
	require.NoError(t, os.WriteFile(short, b[:600], 0o644))
	_, err = UpdateFile(short, func(e Env) { e["x"] = "1" })
	assert.ErrorContains(t, err, "is 600 bytes, not a 1024-byte environment block")
}
