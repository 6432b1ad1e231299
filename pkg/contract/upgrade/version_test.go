package upgrade

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseVersion(t *testing.T) {
	for _, s := range []string{"0.0.0", "1.2.3", "v1.36.3", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-0.3.7",
		"1.0.0-x.7.z.92", "1.0.0+20130313144700", "1.0.0-beta+exp.sha.5114f85", "1.0.0+001", "1.0.0--"} {
		_, err := parseVersion(s)
		assert.NoError(t, err, s)
	}
	for _, s := range []string{"", "v", "1", "1.2", "1.2.3.4", "01.2.3", "1.02.3", "1.2.03", "1.2.3-", "1.2.3-01",
		"1.2.3-a..b", "1.2.3+", "1.2.3+a_b", "1.2.3-a_b", "vv1.2.3", "V1.2.3", " 1.2.3", "1.2.3 ", "-1.2.3",
		"1.2.-3", "1.2.+3", "99999999999999999999.0.0", "1.2.3-é"} {
		_, err := parseVersion(s)
		assert.Error(t, err, "%q", s)
	}
}

func TestCompareVersions(t *testing.T) {
	// semver.org's example of precedence, and more.
	ordered := []string{"0.9.9", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
		"1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "1.10.0", "2.0.0"}
	for i := range ordered {
		for j := range ordered {
			c, err := CompareVersions(ordered[i], ordered[j])
			require.NoError(t, err)
			assert.Equal(t, cmpInt(i, j), c, "%s vs %s", ordered[i], ordered[j])
		}
	}
	for _, pair := range [][2]string{{"1.0.0+a", "1.0.0+b"}, {"v1.0.0", "1.0.0"}, {"1.0.0-rc.1+x", "1.0.0-rc.1"}} {
		c, err := CompareVersions(pair[0], pair[1])
		require.NoError(t, err)
		assert.Zero(t, c, "%s vs %s", pair[0], pair[1])
	}
	_, err := CompareVersions("1.0.0", "x")
	assert.Error(t, err)
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
