// Package dep carries a version stamp set by the linker.
package dep

// Version is stamped with -X.
var Version = "unset"
