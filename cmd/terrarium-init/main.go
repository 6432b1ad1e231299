// Command terrarium-init is the initramfs's /init. See pkg/node/boot/bootinit.
package main

import (
	"context"
	"os"

	"github.com/terrarium-os/terrarium/pkg/node/boot/bootinit"
)

func main() {
	console, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err != nil {
		console = os.Stdout
	}
	_ = bootinit.New(console).Run(context.Background())
	os.Exit(1)
}
