// Command hello prints the stamps its component's ldflags set.
package main

import (
	"fmt"

	"example.com/dep"
)

var buildDate = "unset"

func main() { fmt.Println(dep.Version, buildDate) }
