// Package crds keeps Terrarium's copy of MetalLB's CustomResourceDefinitions
// (pkg/node/kube/addons/metallb-crds.yaml, which firstboot embeds and
// applies) equal to those of the MetalLB this module pins: its test
// compares them, and `go test ./crds -update` rewrites the copy after a
// version change in components/versions.yaml.
package crds
