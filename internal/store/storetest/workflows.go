package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseWorkflows covers workflows and their versions.
func exerciseWorkflows(run runCase) {
	ctx := context.Background()
	run("workflow and versions round-trip", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			v := kt.Version{Workflow: "w", Major: 1, Script: "s1", CreatedAt: 1}
			if err := tx.VersionInsert(&v); err != nil {
				return err
			}
			v2 := kt.Version{Workflow: "w", Major: 1, Minor: 1, Script: "s2", CreatedAt: 2}
			if err := tx.VersionInsert(&v2); err != nil {
				return err
			}
			if v.ID != 1 || v2.ID != 2 {
				return fmt.Errorf("version ids %d %d", v.ID, v2.ID)
			}
			return tx.WorkflowPut(kt.Workflow{Name: "w", ActiveVersion: 2, FilesRoot: "/srv/orders", Policy: `{"TransientRetries":0}`, CreatedAt: 1, UpdatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			w, err := tx.WorkflowGet("w")
			if err != nil || w.ActiveVersion != 2 || w.FilesRoot != "/srv/orders" || w.Policy != `{"TransientRetries":0}` {
				return fmt.Errorf("workflow %+v %v", w, err)
			}
			v, err := tx.VersionGet("w", 2)
			if err != nil || v.Script != "s2" || v.Label() != "1.1" {
				return fmt.Errorf("version %+v %v", v, err)
			}
			if _, err := tx.WorkflowGet("nope"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("missing workflow: %v", err)
			}
			return nil
		}))
	})
	run("workflows and versions are listed in order", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for _, w := range []string{"b", "a"} {
				if err := tx.WorkflowPut(kt.Workflow{Name: w, Paused: w == "b", PausedReason: "by a person"}); err != nil {
					return err
				}
				for i := 0; i < 2; i++ {
					v := kt.Version{Workflow: w, Major: 1, Minor: i, Script: w, File: w + ".js", Test: "test of " + w}
					if err := tx.VersionInsert(&v); err != nil {
						return err
					}
				}
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			ws, err := tx.WorkflowList()
			if err != nil || len(ws) != 2 || ws[0].Name != "a" || ws[1].Name != "b" || !ws[1].Paused || ws[1].PausedReason != "by a person" {
				return fmt.Errorf("workflows %+v %v", ws, err)
			}
			vs, err := tx.VersionList("b")
			if err != nil || len(vs) != 2 || vs[0].Label() != "1.0" || vs[1].Label() != "1.1" || vs[0].ID >= vs[1].ID || vs[1].File != "b.js" || vs[1].Test != "test of b" {
				return fmt.Errorf("versions %+v %v", vs, err)
			}
			if vs, err := tx.VersionList("none"); err != nil || len(vs) != 0 {
				return fmt.Errorf("versions of an unknown workflow %+v %v", vs, err)
			}
			return nil
		}))
	})
}
