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
	"github.com/keep-run/keep/internal/fake/slackfake"
)

const usage = `keep-fake serves fakes of public APIs for trying and testing keep.

Usage:
  keep-fake google [--addr 127.0.0.1:0]   Gmail, Sheets, Calendar and Google's OAuth 2.0
  keep-fake slack [--addr 127.0.0.1:0]    Slack's Web API (any xoxb- token is accepted)

It prints the base URL as the first line of its output; point keep at it with
  [connectors.google] (or [connectors.slack])
  endpoint = "<that URL>"
in keep.toml. Admin routes (for seeding and faults) are listed in docs/scripts.md.
`

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Print(usage)
		return
	}
	var handler http.Handler
	switch os.Args[1] {
	case "google":
		handler = googlefake.New().Handler()
	case "slack":
		handler = slackfake.New().Handler()
	default:
		fmt.Fprintf(os.Stderr, "keep-fake: unknown fake %q (known: google, slack)\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	fs := flag.NewFlagSet("keep-fake "+os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on (port 0 picks a free one)")
	fs.Parse(os.Args[2:])
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "keep-fake %s: listen on %s: %v\n", os.Args[1], *addr, err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	if err := http.Serve(ln, handler); err != nil {
		fmt.Fprintf(os.Stderr, "keep-fake %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
