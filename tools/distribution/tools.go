//go:build tools

// Package tools pins the reference registry the benchmarks compare against.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
