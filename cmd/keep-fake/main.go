// Command keep-fake serves faithful fakes of the public APIs keep's
// connectors talk to, so that people can try keep, and tests can break it,
// without an account anywhere. It is not linked into keep.
//
//	keep-fake google --addr 127.0.0.1:0
//	keep-fake llm --reply answer.md [--reply next.md …]
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
	"github.com/keep-run/keep/internal/fake/llmfake"
	"github.com/keep-run/keep/internal/fake/slackfake"
)

const usage = `keep-fake serves fakes of public APIs for trying and testing keep.

Usage:
  keep-fake google [--addr 127.0.0.1:0]   Gmail, Sheets, Calendar and Google's OAuth 2.0
  keep-fake slack [--addr 127.0.0.1:0]    Slack's Web API (any xoxb- token is accepted)
  keep-fake llm --reply FILE [--reply FILE …] [--addr 127.0.0.1:0]
                                          an OpenAI-compatible model (POST /v1/chat/completions)
                                          that answers each request with the next FILE's text,
                                          then with a 500: keep plan and the Maintainer without
                                          a paid model

It prints the base URL as the first line of its output; point keep at it with
  [connectors.google] (or [connectors.slack])
  endpoint = "<that URL>"
in keep.toml. Admin routes (for seeding and faults) are listed in docs/scripts.md.
For llm: [llm] base_url = "<that URL>/v1" and model = "fake" (README, "Trying keep
plan and the Maintainer without a paid model").
`

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Print(usage)
		return
	}
	fs := flag.NewFlagSet("keep-fake "+os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on (port 0 picks a free one)")
	var replies replyFiles
	if os.Args[1] == "llm" {
		fs.Var(&replies, "reply", "a file whose text is the next answer (repeat: one answer per request, in order)")
	}
	fs.Parse(os.Args[2:])
	var handler http.Handler
	switch os.Args[1] {
	case "google":
		handler = googlefake.New().Handler()
	case "slack":
		handler = slackfake.New().Handler()
	case "llm":
		if len(replies) == 0 {
			fmt.Fprintf(os.Stderr, "keep-fake llm: give at least one --reply FILE: the text the model answers (a script in a ```js block, then a few words)\n")
			os.Exit(2)
		}
		handler = llmfake.New(replies...).Handler()
	default:
		fmt.Fprintf(os.Stderr, "keep-fake: unknown fake %q (known: google, slack, llm)\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
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

// replyFiles are the llm fake's answers, read from --reply files.
type replyFiles []llmfake.Reply

func (r *replyFiles) String() string { return fmt.Sprintf("%d replies", len(*r)) }

func (r *replyFiles) Set(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	*r = append(*r, llmfake.Reply{Content: string(b), Tokens: (len(b) + 3) / 4})
	return nil
}
