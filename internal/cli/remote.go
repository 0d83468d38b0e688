package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/keep-run/keep/internal/apiclient"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/inproc"
)

// keepAPI is the one way the CLI reaches keep's state: the API of the keep
// serve running on the data directory (it acts at once, open pages update),
// or, when none answers, the same API served in this process on the data
// directory (inproc.API). local is nil in the first case; close
// releases what was opened.
type keepAPI struct {
	*apiclient.Client
	local *inproc.API
	// serve is the keep serve of the data directory when one answers but
	// this process cannot prove it may act there (reads then go to the
	// store in process); nil otherwise.
	serve *apiclient.Client
}

func (k *keepAPI) Close() {
	if k.local != nil {
		k.local.Close()
	}
}

// apiFor is the command's keep API. config is the config file the
// in-process API validates deploys and deploys approved repairs with;
// filesRoot roots the files connector of a deploy's validation.
func (a *app) apiFor(ctx context.Context, o inproc.APIOptions) (*keepAPI, error) {
	c, found, noSecret := a.serveAPI(ctx)
	if found && noSecret != nil {
		return nil, fmt.Errorf("a keep serve runs on %s, and acting through it needs the instance secret, which cannot be read: %v (or set KEEP_TOKEN to keep serve's --token)", a.dataDir, noSecret)
	}
	if found {
		return &keepAPI{Client: c}, nil
	}
	o.DataDir, o.Store = a.dataDir, a.storeURL
	l, err := inproc.OpenAPI(o)
	if err != nil {
		return nil, err
	}
	return &keepAPI{Client: apiclient.InProcess(l.Handler, a.by), local: l}, nil
}

// readAPI is the keep API of a command that only reads: keep serve's when
// it answers and this process may read there, else the same API in this
// process on the data directory's store — opened for reads only when the
// data directory cannot be written, so reads work there too.
func (a *app) readAPI(ctx context.Context) (*keepAPI, error) {
	c, found, noSecret := a.serveAPI(ctx)
	if found && noSecret == nil {
		return &keepAPI{Client: c}, nil
	}
	l, err := inproc.OpenAPI(inproc.APIOptions{DataDir: a.dataDir, Store: a.storeURL, MustExist: true, Reads: true})
	if err != nil {
		return nil, err
	}
	k := &keepAPI{Client: apiclient.InProcess(l.Handler, a.by), local: l}
	if found {
		k.serve = c
	}
	return k, nil
}

// read is a read command's body: fn reads through readAPI.
func (a *app) read(ctx context.Context, fn func(c *keepAPI) error) error {
	c, err := a.readAPI(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// actionAPI is the keep API of a person's action: a repair approved here
// is deployed with the connectors of the data directory's recorded config,
// never the caller's folder's (issue 24 #5).
func (a *app) actionAPI(ctx context.Context) (*keepAPI, error) {
	return a.apiFor(ctx, inproc.APIOptions{ConfigFile: a.decisionConfig(), MustExist: true})
}

// serveAPI is a client of the keep serve that recorded its address in the
// data directory, when it answers as the instance it recorded. Before
// anything — a decision, the token — is sent there, the address is asked
// who it is: after a kill -9 the file stays behind, and the port may
// belong to another program or another data directory's keep serve.
// noSecret says why the client can only read (neither the instance secret
// nor KEEP_TOKEN).
func (a *app) serveAPI(ctx context.Context) (c *apiclient.Client, found bool, noSecret error) {
	addr, instance, rerr := daemon.ReadAddr(a.dataDir)
	if rerr != nil {
		return nil, false, nil
	}
	probe, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if id, err := apiclient.Remote(addr, "", "").Instance(probe); err != nil || id != instance {
		return nil, false, nil
	}
	// The data directory's instance secret proves this is its owner (and
	// makes keep serve believe --by); KEEP_TOKEN serves who cannot read it.
	// Without either, reads still work.
	secret, err := daemon.ReadAPISecret(a.dataDir)
	if err != nil {
		if secret = os.Getenv("KEEP_TOKEN"); secret != "" {
			err = nil
		}
	}
	return apiclient.Remote(addr, secret, a.by), true, err
}

// serveClient is the keep serve answering for the data directory, whether
// or not this process may act there; nil when none answers.
func (k *keepAPI) serveClient() *apiclient.Client {
	if k.local == nil {
		return k.Client
	}
	return k.serve
}
