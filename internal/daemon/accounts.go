package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/google"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// pageAccounts runs the page's Connect Google: the flows started here wait
// for Google's answer for at most flowTTL.
type pageAccounts struct {
	cfg   google.Config
	accts connector.Accounts
	st    store.Store
	mu    sync.Mutex
	flows map[string]pendingFlow
}

type pendingFlow struct {
	flow    *google.Flow
	expires time.Time
}

const flowTTL = 15 * time.Minute

func (p *pageAccounts) StartGoogle(ctx context.Context, redirect string) (string, error) {
	if p.cfg.Endpoint == "" && p.cfg.ClientID == "" {
		return "", errors.New("no Google OAuth client: set [connectors.google] client_id and client_secret in keep.toml, or KEEP_GOOGLE_CLIENT_ID and KEEP_GOOGLE_CLIENT_SECRET, and restart keep serve")
	}
	scripts, err := report.LatestScripts(ctx, p.st)
	if err != nil {
		return "", err
	}
	scopes := google.ScopesFor(Registry("."), engine.UsesOf(scripts))
	if scopes == nil {
		return "", errors.New(google.NoScopesError)
	}
	f := google.StartFlow(p.cfg, redirect, scopes)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for k, pf := range p.flows {
		if now.After(pf.expires) {
			delete(p.flows, k)
		}
	}
	p.flows[f.State] = pendingFlow{flow: f, expires: now.Add(flowTTL)}
	return f.URL(), nil
}

func (p *pageAccounts) FinishGoogle(ctx context.Context, state, code string) (string, error) {
	p.mu.Lock()
	pf, ok := p.flows[state]
	delete(p.flows, state)
	p.mu.Unlock()
	if !ok || time.Now().After(pf.expires) {
		return "", errors.New("this answer does not belong to a Connect Google started here in the last 15 minutes; start again")
	}
	acct, _, err := pf.flow.Finish(ctx, p.accts, code)
	return acct, err
}
