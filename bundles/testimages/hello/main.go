// Command hello is a bundle test image: it prints a greeting and exits 0.
package main

import "fmt"

func main() {
	fmt.Println("hello from terrarium")
}
