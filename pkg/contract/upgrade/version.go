package upgrade

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// version is a semantic version (semver.org 2.0.0) without its build
// metadata, which plays no part in ordering.
type version struct {
	core [3]uint64
	pre  []string // pre-release identifiers; none for a release
}

// parseVersion parses a semantic version, MAJOR.MINOR.PATCH with an
// optional -PRERELEASE and +BUILD, and an optional leading "v" (v1.36.3,
// as Kubernetes writes its versions).
func parseVersion(s string) (version, error) {
	const want = "want a semantic version such as 0.2.0 or v1.36.3"
	if s == "" {
		return version{}, errors.New("empty; " + want)
	}
	rest := strings.TrimPrefix(s, "v")
	rest, build, hasBuild := strings.Cut(rest, "+")
	if hasBuild && !validIdentifiers(build, false) {
		return version{}, fmt.Errorf("%q: bad build metadata; %s", s, want)
	}
	rest, pre, hasPre := strings.Cut(rest, "-")
	var v version
	if hasPre {
		if !validIdentifiers(pre, true) {
			return version{}, fmt.Errorf("%q: bad pre-release; %s", s, want)
		}
		v.pre = strings.Split(pre, ".")
	}
	nums := strings.Split(rest, ".")
	if len(nums) != 3 {
		return version{}, fmt.Errorf("%q: not MAJOR.MINOR.PATCH; %s", s, want)
	}
	for i, n := range nums {
		if !isNumeric(n) {
			return version{}, fmt.Errorf("%q: %q is not a number without leading zeros; %s", s, n, want)
		}
		x, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			return version{}, fmt.Errorf("%q: %q is too large; %s", s, n, want)
		}
		v.core[i] = x
	}
	return v, nil
}

// validIdentifiers reports whether s is a dot-separated list of
// non-empty [0-9A-Za-z-] identifiers; numeric ones may not have leading
// zeros when strictNumeric is set (pre-release, not build metadata).
func validIdentifiers(s string, strictNumeric bool) bool {
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return false
		}
		for _, c := range id {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-') {
				return false
			}
		}
		if strictNumeric && allDigits(id) && len(id) > 1 && id[0] == '0' {
			return false
		}
	}
	return true
}

// isNumeric reports whether s is a decimal number without leading zeros.
func isNumeric(s string) bool {
	return allDigits(s) && (len(s) == 1 || s[0] != '0')
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// compare orders versions by semantic version precedence.
func (v version) compare(w version) int {
	for i := range v.core {
		if c := cmp.Compare(v.core[i], w.core[i]); c != 0 {
			return c
		}
	}
	switch {
	case len(v.pre) == 0 && len(w.pre) == 0:
		return 0
	case len(v.pre) == 0:
		return 1 // a release follows its pre-releases
	case len(w.pre) == 0:
		return -1
	}
	for i := 0; i < len(v.pre) && i < len(w.pre); i++ {
		if c := compareIdentifiers(v.pre[i], w.pre[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(v.pre), len(w.pre))
}

// compareIdentifiers orders pre-release identifiers: numeric ones
// numerically and before alphanumeric ones, which order as ASCII.
func compareIdentifiers(a, b string) int {
	an, bn := allDigits(a), allDigits(b)
	switch {
	case an && bn:
		if c := cmp.Compare(len(a), len(b)); c != 0 { // no leading zeros
			return c
		}
		return strings.Compare(a, b)
	case an:
		return -1
	case bn:
		return 1
	}
	return strings.Compare(a, b)
}

// CompareVersions parses and compares two semantic versions (0.2.0,
// v1.36.3): -1 when a is older, 0 when they are the same release, +1
// when a is newer.
func CompareVersions(a, b string) (int, error) {
	va, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	return va.compare(vb), nil
}

// CheckVersion reports whether s is a semantic version an upgrade file can
// name (0.2.0, v1.36.3, 1.0.0-rc.1).
func CheckVersion(s string) error {
	_, err := parseVersion(s)
	return err
}
