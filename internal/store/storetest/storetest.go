// Package storetest is the conformance suite every store backend passes:
// Exercise(t, open) runs the same checks against SQLite and PostgreSQL,
// one file per area (runs, events, mutations, inputs, items, decisions,
// due work, transactions, nodes, accounts, notices, deliveries), each case on a fresh
// store; coverage.go fails it when a store.Tx method has no case.
package storetest

import (
	"context"
	"errors"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Exercise runs the suite. open returns a fresh, empty store.
func Exercise(t *testing.T, open func(t *testing.T) store.Store) {
	cov := &coverage{called: map[string]bool{}}
	cov.check(t)
	run := func(name string, fn func(t *testing.T, s store.Store)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, recordingStore{open(t), cov})
		})
	}
	exerciseWorkflows(run)
	exerciseEvents(run)
	exerciseRuns(run)
	exerciseMutations(run)
	exerciseInputs(run)
	exerciseItems(run)
	exerciseDecisions(run)
	exerciseDue(run)
	exerciseTransactions(run)
	exerciseNodes(run)
	exerciseAccounts(run)
	exerciseNotices(run)
	exerciseDeliveries(run)
	exercisePrune(run)
	exerciseTally(run)
	exercisePages(run)
}

// runCase runs one case of the suite on a fresh store. Each area's file
// (workflows.go, events.go, runs.go, mutations.go, …, as River's
// riverdrivertest) is a list of independent cases, each a run(name, fn):
// longer than 80 lines, it reads better whole, as a table of cases.
type runCase func(name string, fn func(t *testing.T, s store.Store))

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// refused runs write in a transaction beside another write (a handler
// row "w"/"beside") and fails t unless the transaction fails with want —
// said at once or at the commit — and stores nothing, the write beside
// included.
func refused(t *testing.T, s store.Store, what string, want error, write func(tx store.Tx) error) {
	t.Helper()
	ctx := context.Background()
	err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: "beside", Type: kt.HandlerProducer}); err != nil {
			return err
		}
		return write(tx)
	})
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
	must(t, s.View(ctx, func(tx store.Tx) error {
		if _, err := tx.HandlerGet("w", "beside"); !errors.Is(err, kt.ErrNotFound) {
			t.Fatalf("%s: a write beside the refused one was stored (%v)", what, err)
		}
		return nil
	}))
}
