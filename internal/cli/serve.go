package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
)

func (a *app) serveCmd() *cobra.Command {
	var filesRoot, addr, token, hooksAddr string
	var profiles bool
	c := &cobra.Command{
		Use:   "serve",
		Short: "run every deployed workflow on its schedule, with the web page and API, until stopped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = os.Getenv("KEEP_TOKEN")
			}
			if err := daemon.CheckAddr(addr, token); err != nil {
				return &exitError{code: exitUsageCode, err: err}
			}
			if profiles && addr == "" {
				return &exitError{code: exitUsageCode, err: fmt.Errorf("--pprof serves the profiles on keep serve's address: give --addr too (it is \"\" here)")}
			}
			k, ctx, done, err := a.startEngine(daemon.Options{ConfigFile: a.config(), FilesRootForAll: filesRoot},
				"keep: stopping once the steps under way finish (a write waits for its answer); signal again to stop at once (what is under way is recovered at the next start)")
			if err != nil {
				return err
			}
			defer done()
			// Recorded once this process runs the data directory's workflows
			// (not when another keep holds it).
			if _, err := a.runConfig(); err != nil {
				return err
			}
			n, err := k.Recover(ctx)
			if err != nil {
				return err
			}
			hooksURL := ""
			if hooksAddr != "" {
				ln, err := net.Listen("tcp", hooksAddr)
				if err != nil {
					return fmt.Errorf("listen for webhooks on %s: %w (another program has it, or pass another --webhooks-addr)", hooksAddr, err)
				}
				// Its own server: no API route, no page and no guard of the
				// API's is reachable on this address; bounded, as it faces
				// the internet.
				srv := k.ServeWebhooks(ln)
				defer srv.Close()
				hooksURL = "http://" + ln.Addr().String()
			}
			where := "no web page (--addr \"\")"
			if addr != "" {
				page, stop, err := a.servePage(k, addr, daemon.HTTPOptions{Token: token, Pprof: profiles, WebhooksURL: hooksURL})
				if err != nil {
					return err
				}
				defer stop()
				where = page
			}
			defer runBeside(ctx, k)()
			if hooksURL != "" {
				where += ", webhooks at " + hooksURL + "/hooks/"
			}
			fmt.Fprintf(a.out, "keep serving %s at %s (recovered %s); Ctrl-C stops\n", a.dataDir, where, kt.Count(n, "interrupted run"))
			return k.Scheduler.Run(ctx)
		},
	}
	c.Flags().StringVar(&filesRoot, "files-root", "", "folder of the files connector for every workflow, instead of the one each recorded when it was deployed (without it: the recorded one, or DATA/files)")
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:8347", "address of the web page and API (\"\" for none); beyond loopback it needs a token")
	c.Flags().StringVar(&hooksAddr, "webhooks-addr", "", "address that serves the workflows' webhooks (POST /hooks/WORKFLOW/NAME) and nothing else: no API, no page; each webhook verifies its requests as its script declares, so it may face the internet (\"\" for none)")
	c.Flags().StringVar(&token, "token", "", "token required by the API and the page (default $KEEP_TOKEN)")
	c.Flags().BoolVar(&profiles, "pprof", false, "serve Go's profiles at "+daemon.ProfilesPath+" on --addr, only to requests with the token or the data directory's "+daemon.APISecretFile+" (docs/api.md)")
	return c
}

// servePage serves the page, the API and the metrics on addr, and records
// the address in the data directory for the CLI beside it; stop closes
// the server and removes the record.
func (a *app) servePage(k *daemon.Keep, addr string, o daemon.HTTPOptions) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen on %s: %w (another keep serve, or pass --addr)", addr, err)
	}
	srv := &http.Server{Handler: k.HTTPHandlerWith(o), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	if err := k.WriteAddr(ln.Addr().String()); err != nil {
		srv.Close()
		return "", nil, fmt.Errorf("record the address of this keep serve: %w", err)
	}
	url = "http://" + ln.Addr().String()
	k.Scheduler.SetNodeAddr(ln.Addr().String())
	k.SetPageURL(url)
	return url, func() { os.Remove(daemon.AddrFile(a.dataDir)); srv.Close() }, nil
}

// runBeside runs what keep serve does beside the scheduler: the notifier,
// the Maintainer, the held webhook deliveries, the pruning. They end with
// ctx (ended too when the scheduler stops with an error); the function it
// returns ends them and waits for them, so that keep serve closes the
// store only after a repair under way (cancelled) released its workflow's
// lease instead of leaving it to expire.
func runBeside(ctx context.Context, k *daemon.Keep) (end func()) {
	besideCtx, endBeside := context.WithCancel(ctx)
	var beside sync.WaitGroup
	beside.Go(func() { k.Notify(besideCtx) })
	beside.Go(func() { k.Maintain(besideCtx) })
	beside.Go(func() { k.TakeHeld(besideCtx) })
	beside.Go(func() { k.Prune(besideCtx) })
	return func() { endBeside(); beside.Wait() }
}

// startEngine opens the engine on the data directory (keep serve, keep run)
// with a context that ends on Ctrl-C or SIGTERM; done releases it all.
// o's data directory and store are the command line's. onStop ("" for
// none) is said on the error output when the first signal comes.
func (a *app) startEngine(o daemon.Options, onStop string) (*daemon.Keep, context.Context, func(), error) {
	o.DataDir, o.Store = a.dataDir, a.storeURL
	k, err := daemon.Open(o)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first Ctrl-C or SIGTERM the steps under way finish (a
	// write waits for its answer, so that it is recorded). A second one
	// ends the process at once, as after a crash: what was under way is
	// recovered at the next start. Both watchers let go of the signals
	// after the first (NotifyContext's with stop, the workers' by
	// itself, before it calls this), so the second finds Go's default;
	// onStop is said once both have.
	stopWorkers := daemon.StopWorkersOnSignalThen(func() {
		<-ctx.Done() // the same signal reached NotifyContext
		stop()
		if onStop != "" {
			fmt.Fprintln(a.errOut, onStop)
		}
	})
	return k, ctx, func() {
		stop()
		stopWorkers()
		k.Close()
	}, nil
}
