// Package common holds the pointer helpers that flannel's tencentvpc
// backend uses (see ../tencentvpc-unavailable/go.mod).
package common

// StringPtr returns &s.
func StringPtr(s string) *string { return &s }

// StringPtrs returns pointers to each of ss.
func StringPtrs(ss []string) []*string {
	out := make([]*string, len(ss))
	for i := range ss {
		out[i] = &ss[i]
	}
	return out
}

// BoolPtr returns &b.
func BoolPtr(b bool) *bool { return &b }
