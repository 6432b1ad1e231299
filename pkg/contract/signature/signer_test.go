package signature

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Signer names the key of a signature file whatever it signs, and refuses
// a file that is not one.
func TestSigner(t *testing.T) {
	key := fixedKey(1)
	k, err := Signer(SignFor(PurposeBundle, key, []byte("index")))
	require.NoError(t, err)
	assert.Equal(t, PublicKeyOf(key), k)
	_, err = Signer([]byte("not a signature"))
	assert.ErrorIs(t, err, ErrMalformed)
}
