// Command keep-fake serves faithful fakes of the public APIs keep's
// connectors talk to, so that people can try keep, and tests can break it,
// without an account anywhere. It is not linked into keep.
//
//	keep-fake google --addr 127.0.0.1:0
//
// prints its base URL as the first line of its output, then serves until
// it is stopped.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/keep-run/keep/internal/fake/googlefake"
)

const usage = `keep-fake serves fakes of public APIs for trying and testing keep.

Usage:
  keep-fake google [--addr 127.0.0.1:0]   Gmail, Sheets, Calendar and Google's OAuth 2.0

It prints the base URL as the first line of its output; point keep at it with
  [connectors.google]
  endpoint = "<that URL>"
in keep.toml. Admin routes (for seeding and faults) are listed in docs/scripts.md.
`

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Print(usage)
		return
	}
	if os.Args[1] != "google" {
		fmt.Fprintf(os.Stderr, "keep-fake: unknown fake %q (known: google)\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	fs := flag.NewFlagSet("keep-fake google", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on (port 0 picks a free one)")
	fs.Parse(os.Args[2:])
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "keep-fake google: listen on %s: %v\n", *addr, err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	if err := http.Serve(ln, googlefake.New().Handler()); err != nil {
		fmt.Fprintf(os.Stderr, "keep-fake google: %v\n", err)
		os.Exit(1)
	}
}
