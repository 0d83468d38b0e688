package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseTransactions covers transactions: atomic, serialized, isolated, cancelled, closed.
func exerciseTransactions(run runCase) {
	ctx := context.Background()
	run("a failed update leaves nothing", func(t *testing.T, s store.Store) {
		boom := errors.New("boom")
		err := s.Update(ctx, func(tx store.Tx) error {
			if err := tx.WorkflowPut(kt.Workflow{Name: "w"}); err != nil {
				return err
			}
			ev := kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`{}`)}
			if _, err := tx.EventPublish(&ev); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("update error %v", err)
		}
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.WorkflowGet("w"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("rolled back workflow is visible: %v", err)
			}
			if _, err := tx.EventGet("w", "t", "m"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("rolled back event is visible: %v", err)
			}
			return nil
		}))
	})
	run("concurrent updates are serialized", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.HandlerPut(kt.Handler{Workflow: "w", Name: "n", Type: kt.HandlerProducer, State: json.RawMessage(`0`)})
		}))
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Update(ctx, func(tx store.Tx) error {
					h, err := tx.HandlerGet("w", "n")
					if err != nil {
						return err
					}
					var n int
					_ = json.Unmarshal(h.State, &n)
					h.State = json.RawMessage(fmt.Sprint(n + 1))
					return tx.HandlerPut(h)
				})
			}()
		}
		wg.Wait()
		must(t, s.View(ctx, func(tx store.Tx) error {
			h, err := tx.HandlerGet("w", "n")
			if err != nil || string(h.State) != "20" {
				return fmt.Errorf("lost updates: state %s %v", h.State, err)
			}
			return nil
		}))
		if st := s.Stats(); st.Transactions < 21 || st.Commits < 1 || st.Commits > st.Transactions {
			t.Fatalf("commits counted: %+v (want 21 transactions in at most as many commits)", st)
		}
	})
	run("a failing or panicking update leaves the others of its commit alone", func(t *testing.T, s store.Store) {
		var wg sync.WaitGroup
		errs := make([]error, 30)
		panics := make([]any, 30)
		for i := 0; i < 30; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { panics[i] = recover() }()
				errs[i] = s.Update(ctx, func(tx store.Tx) error {
					if err := tx.HandlerPut(kt.Handler{Workflow: "g", Name: fmt.Sprint(i), Type: kt.HandlerProducer, State: json.RawMessage(`1`)}); err != nil {
						return err
					}
					switch i % 3 {
					case 1:
						return fmt.Errorf("refused %d", i)
					case 2:
						panic(fmt.Sprintf("panic %d", i))
					}
					return nil
				})
			}()
		}
		wg.Wait()
		for i := 0; i < 30; i++ {
			switch i % 3 {
			case 0:
				if errs[i] != nil || panics[i] != nil {
					t.Errorf("update %d: %v %v", i, errs[i], panics[i])
				}
			case 1:
				if errs[i] == nil || errs[i].Error() != fmt.Sprintf("refused %d", i) {
					t.Errorf("update %d returned %v, want its own error", i, errs[i])
				}
			case 2:
				if panics[i] != fmt.Sprintf("panic %d", i) {
					t.Errorf("update %d: panic %v reached its caller, want its own", i, panics[i])
				}
			}
		}
		must(t, s.View(ctx, func(tx store.Tx) error {
			hs, err := tx.HandlerList("g")
			if err != nil {
				return err
			}
			got := map[string]bool{}
			for _, h := range hs {
				got[h.Name] = true
			}
			for i := 0; i < 30; i++ {
				if want := i%3 == 0; got[fmt.Sprint(i)] != want {
					return fmt.Errorf("handler %d stored=%v, want %v (a failed update's writes must be rolled back, the others kept)", i, got[fmt.Sprint(i)], want)
				}
			}
			return nil
		}))
	})
	run("a cancelled context does not run the update", func(t *testing.T, s store.Store) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ran := false
		if err := s.Update(cctx, func(tx store.Tx) error { ran = true; return nil }); err == nil || ran {
			t.Fatalf("update with a cancelled context: err %v, ran %v", err, ran)
		}
	})
	run("a closed store refuses transactions", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.WorkflowPut(kt.Workflow{Name: "w"}) }))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.WorkflowPut(kt.Workflow{Name: "x"}) }); err == nil {
			t.Fatal("an update after Close succeeded")
		}
		if err := s.View(ctx, func(tx store.Tx) error { _, err := tx.WorkflowGet("w"); return err }); err == nil {
			t.Fatal("a view after Close succeeded")
		}
	})
}
