// Command keep is the durable runtime for automations; see the README.
package main

import (
	"os"

	"github.com/keep-run/keep/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
