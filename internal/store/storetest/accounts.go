package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseAccounts covers secrets, connected accounts and grants.
func exerciseAccounts(run runCase) {
	ctx := context.Background()
	run("secrets: put replaces and keeps the creation time, list by name, delete", func(t *testing.T, s store.Store) {
		sealed := []byte{0, 1, 2, 255, 'x'}
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if err := tx.SecretPut(kt.Secret{Name: "sig", Sealed: []byte("old"), CreatedAt: 1, UpdatedAt: 1}); err != nil {
				return err
			}
			if err := tx.SecretPut(kt.Secret{Name: "sig", Sealed: sealed, Hosts: []string{"api.crm.example", "127.0.0.1:8090"}, CreatedAt: 9, UpdatedAt: 9}); err != nil {
				return err
			}
			return tx.SecretPut(kt.Secret{Name: "api", Sealed: []byte("a"), CreatedAt: 2, UpdatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			x, err := tx.SecretGet("sig")
			if err != nil || string(x.Sealed) != string(sealed) || x.CreatedAt != 1 || x.UpdatedAt != 9 || fmt.Sprint(x.Hosts) != "[api.crm.example 127.0.0.1:8090]" {
				return fmt.Errorf("sig after a second put: %+v %v", x, err)
			}
			xs, err := tx.SecretList()
			if err != nil || len(xs) != 2 || xs[0].Name != "api" || xs[1].Name != "sig" || len(xs[0].Hosts) != 0 || len(xs[1].Hosts) != 2 {
				return fmt.Errorf("secrets %+v %v", xs, err)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.SecretDelete("api") }))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if err := tx.SecretDelete("api"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("deleting a secret twice: %v", err)
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.SecretGet("api"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a deleted secret: %v", err)
			}
			return nil
		}))
	})
	run("connections: put replaces, list, delete", func(t *testing.T, s store.Store) {
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.ConnectionGet("google"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a connection that was never made: %v", err)
			}
			return nil
		}))
		sealed := []byte{0, 1, 2, 255, 'x'} // binary, as sealed credentials are
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.ConnectionPut(kt.Connection{Provider: "google", Account: "a@x", Scopes: []string{"s1", "s2"}, Sealed: sealed, CreatedAt: 1, UpdatedAt: 1})
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.ConnectionPut(kt.Connection{Provider: "google", Account: "a@x", Scopes: []string{"s3"}, Sealed: []byte("new"), Broken: "revoked", CreatedAt: 5, UpdatedAt: 5})
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.ConnectionPut(kt.Connection{Provider: "slack", Sealed: []byte("t"), CreatedAt: 2, UpdatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			c, err := tx.ConnectionGet("google")
			if err != nil || string(c.Sealed) != "new" || len(c.Scopes) != 1 || c.Scopes[0] != "s3" || c.Broken != "revoked" || c.CreatedAt != 1 || c.UpdatedAt != 5 {
				return fmt.Errorf("google after a second put: %+v %v (it keeps its creation time)", c, err)
			}
			cs, err := tx.ConnectionList()
			if err != nil || len(cs) != 2 || cs[0].Provider != "google" || cs[1].Provider != "slack" || cs[1].Scopes != nil {
				return fmt.Errorf("connections %+v %v", cs, err)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.ConnectionDelete("slack") }))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.ConnectionPut(kt.Connection{Provider: "bin", Sealed: sealed, CreatedAt: 2, UpdatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.ConnectionGet("slack"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a deleted connection: %v", err)
			}
			c, err := tx.ConnectionGet("bin")
			if err != nil || string(c.Sealed) != string(sealed) {
				return fmt.Errorf("binary sealed bytes came back as %v %v", c.Sealed, err)
			}
			return nil
		}))
	})
	run("grants: added once, listed by workflow", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for _, g := range []kt.Grant{{Workflow: "w", Item: "gmail.send", GrantedBy: "ann", GrantedAt: 1}, {Workflow: "w", Item: "gmail.send", GrantedBy: "bob", GrantedAt: 2},
				{Workflow: "w", Item: "source:gmail", GrantedBy: "ann", GrantedAt: 1}, {Workflow: "v", Item: "*", GrantedBy: "ann", GrantedAt: 1}} {
				if err := tx.GrantAdd(g); err != nil {
					return err
				}
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			gs, err := tx.GrantList("w")
			if err != nil || len(gs) != 2 || gs[0].Item != "gmail.send" || gs[0].GrantedBy != "ann" || gs[1].Item != "source:gmail" {
				return fmt.Errorf("grants of w: %+v %v", gs, err)
			}
			gs, err = tx.GrantList("nobody")
			if err != nil || len(gs) != 0 {
				return fmt.Errorf("grants of a workflow without any: %+v %v", gs, err)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if ok, err := tx.GrantRemove("w", "gmail.send"); !ok || err != nil {
				return fmt.Errorf("revoke a grant: %v %v", ok, err)
			}
			if ok, err := tx.GrantRemove("w", "gmail.send"); ok || err != nil {
				return fmt.Errorf("revoke it again: %v %v, want false", ok, err)
			}
			gs, err := tx.GrantList("w")
			if err != nil || len(gs) != 1 || gs[0].Item != "source:gmail" {
				return fmt.Errorf("grants of w after the revoke: %+v %v", gs, err)
			}
			if gs, err := tx.GrantList("v"); err != nil || len(gs) != 1 {
				return fmt.Errorf("another workflow's grants after the revoke: %+v %v", gs, err)
			}
			return nil
		}))
	})
}
