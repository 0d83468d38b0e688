package account

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/store"
)

// Secrets keeps the named secrets a person gives keep (`keep secret set
// NAME`): sealed in the store with the same key and the same AES-GCM as
// the accounts' tokens, each bound to its name, never printed. Scripts name
// them ({secret:NAME} in a call's headers), webhooks are verified with
// them; a call sends one only where its workflow was granted it and only
// to the hosts the secret is scoped to (Hosts, checked by the engine at the
// call); whoever opens one learns it and tells package redact, so the value
// is masked wherever keep writes text.
type Secrets struct {
	Store store.Store
	Box   *Box
	Now   func() time.Time
}

// sealedAs is what a secret's sealed bytes are bound to: a sealed token
// cannot be passed off as a secret, nor one secret as another.
func sealedAs(name string) string { return "secret:" + name }

// Set seals and saves a secret, replacing the one of that name; it keeps
// the hosts the one before was scoped to (a new secret goes nowhere).
func (s *Secrets) Set(ctx context.Context, name, value string) error {
	return s.set(ctx, name, value, nil)
}

// SetScoped is Set with the hosts the secret may go to, exactly these
// (issue 38: a call sends a secret only to one of its hosts).
func (s *Secrets) SetScoped(ctx context.Context, name, value string, hosts []string) error {
	h, err := checkHosts(hosts)
	if err != nil {
		return err
	}
	return s.set(ctx, name, value, h)
}

func (s *Secrets) set(ctx context.Context, name, value string, hosts []string) error {
	if err := kt.CheckSecretName(name); err != nil {
		return err
	}
	if value == "" {
		return fmt.Errorf("the secret %s is empty; give its value on standard input", name)
	}
	at := s.now().UnixMilli()
	sealed := s.Box.Seal(sealedAs(name), []byte(value))
	redact.Learn(value)
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if hosts == nil {
			old, err := tx.SecretGet(name)
			if err != nil && !errors.Is(err, kt.ErrNotFound) {
				return err
			}
			hosts = old.Hosts
		}
		return tx.SecretPut(kt.Secret{Name: name, Sealed: sealed, Hosts: hosts, CreatedAt: at, UpdatedAt: at})
	})
}

// Scope sets the hosts a secret keep has may go to, exactly these (none:
// it goes nowhere), without its value. A name keep does not have is
// kt.ErrNotFound.
func (s *Secrets) Scope(ctx context.Context, name string, hosts []string) error {
	h, err := checkHosts(hosts)
	if err != nil {
		return err
	}
	return s.Store.Update(ctx, func(tx store.Tx) error {
		x, err := tx.SecretGet(name)
		if err != nil {
			return err
		}
		x.Hosts, x.UpdatedAt = h, s.now().UnixMilli()
		return tx.SecretPut(x)
	})
}

func (s *Secrets) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// checkHosts checks hosts as a person typed them, and returns them sorted,
// once each (never nil).
func checkHosts(hosts []string) ([]string, error) {
	out := []string{}
	for _, h := range hosts {
		if err := kt.CheckSecretHost(h); err != nil {
			return nil, fmt.Errorf("--host %w; nothing was stored", err)
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Get opens a secret. A name keep does not have is kt.ErrNotFound.
func (s *Secrets) Get(ctx context.Context, name string) (string, error) {
	var x kt.Secret
	err := s.Store.View(ctx, func(tx store.Tx) error {
		var err error
		x, err = tx.SecretGet(name)
		return err
	})
	if err != nil {
		return "", err
	}
	plain, err := s.Box.Open(sealedAs(name), x.Sealed)
	if err != nil {
		return "", fmt.Errorf("the secret %s: %w", name, err)
	}
	redact.Learn(string(plain))
	return string(plain), nil
}

// List returns every secret's name and times, never a value.
func (s *Secrets) List(ctx context.Context) ([]kt.Secret, error) {
	var out []kt.Secret
	err := s.Store.View(ctx, func(tx store.Tx) error {
		var err error
		out, err = tx.SecretList()
		return err
	})
	for i := range out {
		out[i].Sealed = nil
	}
	return out, err
}

// Remove forgets a secret. A name keep does not have is kt.ErrNotFound.
func (s *Secrets) Remove(ctx context.Context, name string) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return tx.SecretDelete(name) })
}

// LearnAll opens every secret once so that package redact masks their
// values from the start (a process that shows text it did not produce —
// keep serve, keep status — may meet a value before it ever uses it).
func (s *Secrets) LearnAll(ctx context.Context) error {
	list, err := s.List(ctx)
	if err != nil {
		return err
	}
	for _, x := range list {
		if _, err := s.Get(ctx, x.Name); err != nil {
			return err
		}
	}
	return nil
}
