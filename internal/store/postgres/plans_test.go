package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
)

// A write's ledger row is settled by its id and its status. The plan
// PostgreSQL made for that statement while the table was small went by
// an index of statuses rather than the primary key, and kept doing so;
// every settled row left a dead in_flight entry in that index until
// VACUUM, so each settlement read them all. It reads one index entry,
// however many rows were settled before it.
func TestASettlementReadsOnlyItsOwnRow(t *testing.T) {
	ctx := context.Background()
	s := openOneConnection(t)
	if _, err := s.db.ExecContext(ctx, `ALTER TABLE mutations SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	mutation := func(i int) kt.Mutation {
		return kt.Mutation{
			ID: fmt.Sprintf("m-%d", i), Workflow: "w", RunID: fmt.Sprintf("r-%d", i), Handler: "h", Tool: "http", Method: "post",
			Params: []byte(`{}`), IdentityKey: fmt.Sprintf("id-%d", i), PayloadHash: "p", IdempotencyKey: fmt.Sprintf("k-%d", i),
			Status: kt.MutationInFlight, CreatedAt: int64(i + 1), UpdatedAt: int64(i + 1),
		}
	}
	settle := func(tx store.Tx, m kt.Mutation) error {
		m.Status = kt.MutationApplied
		return tx.MutationPutFrom(m, kt.MutationInFlight)
	}
	// One by one from an empty table, as a new installation does: the
	// plan PostgreSQL keeps for a prepared statement is made while the
	// table is small.
	const settled = 300
	for i := 0; i < settled; i++ {
		if err := s.Update(ctx, func(tx store.Tx) error {
			if err := tx.MutationInsert(mutation(i)); err != nil {
				return err
			}
			return settle(tx, mutation(i))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.MutationInsert(mutation(settled)) }); err != nil {
		t.Fatal(err)
	}
	read := readBy(t, s, "mutations", false, func(tx store.Tx) error { return settle(tx, mutation(settled)) })
	if read > 2 {
		t.Errorf("settling one ledger row read %d index entries (%d rows settled before it)", read, settled)
	}
	if err := s.View(ctx, func(tx store.Tx) error {
		m, err := tx.MutationGet(mutation(settled).ID)
		if err == nil && m.Status != kt.MutationApplied {
			err = fmt.Errorf("the row is %s after its settlement", m.Status)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// A refused or duplicate delivery makes room for itself among its
// webhook's deliveries of that status; accepted ones are never forgotten,
// so the prune must not read them: 3,000 accepted deliveries cost it
// nothing.
func TestAPruneOfDeliveriesReadsOnlyItsStatus(t *testing.T) {
	ctx := context.Background()
	s := openOneConnection(t)
	const accepted = 3000
	if err := s.Update(ctx, func(tx store.Tx) error {
		for i := 0; i < accepted+5; i++ {
			d := kt.Delivery{Workflow: "w", Webhook: "gh", DeliveryID: fmt.Sprint("d", i), Status: kt.DeliveryAccepted, ReceivedAt: int64(i)}
			if i >= accepted {
				d.Status = kt.DeliveryRefused
			}
			if err := tx.DeliveryAdd(&d); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, `ANALYZE deliveries`); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 8; round++ { // past the five custom plans PostgreSQL makes before it weighs a generic one
		read := readBy(t, s, "deliveries", true, func(tx store.Tx) error { return tx.DeliveryPrune("w", "gh", kt.DeliveryRefused, 4) })
		if read > 20 {
			t.Fatalf("round %d: forgetting a refused delivery read %d rows and index entries (%d accepted deliveries)", round, read, accepted)
		}
	}
	if err := s.View(ctx, func(tx store.Tx) error {
		all, err := tx.DeliveryList("w", 0)
		if err == nil && len(all) != accepted+4 {
			err = fmt.Errorf("%d deliveries after the prune, want %d", len(all), accepted+4)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// readBy runs fn in a write transaction of s's one connection and answers
// how many index entries (and, with seq, rows of sequential scans) of
// table and its indexes fn's statements read: the backend's own counts,
// not yet reported, before and after.
func readBy(t *testing.T, s *Store, table string, seq bool, fn func(store.Tx) error) int64 {
	t.Helper()
	q := `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0) FROM pg_index WHERE indrelid = ?::regclass`
	if seq {
		q = `SELECT (` + q + `) + pg_stat_get_xact_tuples_returned(?::regclass)`
	}
	args := []any{table}
	if seq {
		args = append(args, table)
	}
	var before, after int64
	if err := s.onConn(context.Background(), "begin", true, func(r *runner) error {
		if err := r.QueryRow(q, args...).Scan(&before); err != nil {
			return err
		}
		if err := fn(sqldb.NewTx(r)); err != nil {
			return err
		}
		if err := r.QueryRow(q, args...).Scan(&after); err != nil {
			return err
		}
		return r.commit()
	}); err != nil {
		t.Fatal(err)
	}
	return after - before
}

// A workflow's pending events are counted and its held ones listed from
// the pending ones alone, not from every event it ever had: the status of
// every workflow asks for the count on each refresh of the page.
func TestPendingEventsAreFoundWithoutTheHistory(t *testing.T) {
	ctx := context.Background()
	s := openOneConnection(t)
	// Another session's transaction, open throughout, as a shared server
	// has: VACUUM removes no version it could still see.
	other := openOneConnection(t)
	held, err := other.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	var xid int64
	if err := held.QueryRowContext(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	const consumed = 3000
	// The history as a live installation holds it once autovacuum has
	// passed: consumed events whose pending versions are gone. They are
	// written consumed, so that no dead pending version is left for VACUUM
	// to remove: on a shared server another session's open transaction
	// keeps VACUUM from removing any (issue 41: the test then read 3,014
	// index entries, every dead version, under load and passed alone).
	if _, err := s.db.ExecContext(ctx, `INSERT INTO events(workflow, topic, message_id, payload, status, created_at, updated_at)
SELECT 'w', 't', 'm' || g, '{}', 'consumed', g + 1, g + 1 FROM generate_series(0, $1 - 1) AS g`, consumed); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx store.Tx) error {
		for i := consumed; i < consumed+5; i++ {
			e := kt.Event{Workflow: "w", Topic: "t", MessageID: fmt.Sprint("m", i), Payload: []byte(`{}`), Status: kt.EventPending, CreatedAt: int64(i + 1), UpdatedAt: int64(i + 1)}
			if _, err := tx.EventPublish(&e); err != nil {
				return err
			}
			if i >= consumed+3 {
				e.ReservedBy = "run-1"
				if err := tx.EventUpdate(e); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var all int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE workflow = 'w'`).Scan(&all); err != nil || all != consumed+5 {
		t.Fatalf("the workflow has %d events (%v), want its history of %d and 5 pending", all, err, consumed)
	}
	// The planner's statistics, as autovacuum's ANALYZE leaves them.
	if _, err := s.db.ExecContext(ctx, `ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 8; round++ { // past the five custom plans PostgreSQL makes before it weighs a generic one
		var pending int
		var held []kt.Event
		read := readBy(t, s, "events", true, func(tx store.Tx) error {
			var err error
			if pending, err = tx.CountPending("w"); err != nil {
				return err
			}
			held, err = tx.EventList("w", store.EventFilter{Status: kt.EventPending, Held: store.HeldReserved, Limit: 1})
			return err
		})
		if pending != 5 || len(held) != 1 || held[0].ReservedBy != "run-1" {
			t.Fatalf("round %d: %d pending (want 5), held %+v", round, pending, held)
		}
		// 5 pending events and the 2 old versions of the reserved ones,
		// read by two statements: 40 is room, the history is 3,000.
		if read > 40 {
			t.Fatalf("round %d: counting 5 pending events and finding a held one read %d rows and index entries (%d consumed events)", round, read, consumed)
		}
	}
}

// A page of inputs, runs or outputs (issue 44) reads its own rows from the
// (workflow, created_at, id) index, from its position, whatever the
// history before it; /metrics' counts and the topics view read the
// tallies, not one row of the ledgers.
func TestAPageReadsItsRowsAndTheCountsNone(t *testing.T) {
	ctx := context.Background()
	s := openOneConnection(t)
	const history = 2000
	if err := s.Update(ctx, func(tx store.Tx) error {
		for i := range history {
			id, at := fmt.Sprintf("x%05d", i), int64(i/2) // two rows a millisecond
			if err := tx.InputPut(kt.Input{ID: id, Workflow: "w", Key: "s:t:" + id, Kind: kt.KindInput, Title: "Order " + id, CurrentAttempt: 1, CreatedAt: at}); err != nil {
				return err
			}
			if err := tx.RunPut(kt.Run{ID: id, Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating, Status: kt.StatusCommitted, CreatedAt: at}); err != nil {
				return err
			}
			if err := tx.MutationInsert(kt.Mutation{ID: id, Workflow: "w", RunID: id, Tool: "http", Method: "request", Params: []byte(`{}`),
				IdentityKey: "k" + id, IdempotencyKey: "keep-k" + id, Status: kt.MutationApplied, CreatedAt: at}); err != nil {
				return err
			}
			if _, err := tx.EventPublish(&kt.Event{Workflow: "w", Topic: "t", MessageID: id, Payload: []byte(`1`), Status: kt.EventConsumed}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	mid := &store.Pos{At: history / 4, ID: fmt.Sprintf("x%05d", history/2)}
	for _, p := range []store.Page{{Limit: 10}, {Limit: 10, Older: mid}, {Limit: 10, Newer: mid}} {
		for table, page := range map[string]func(tx store.Tx) (int, error){
			"items": func(tx store.Tx) (int, error) { rows, err := tx.InputPage("w", p); return len(rows), err },
			"runs":  func(tx store.Tx) (int, error) { rows, err := tx.RunPage("w", p); return len(rows), err },
			"mutations": func(tx store.Tx) (int, error) {
				rows, err := tx.MutationPage("w", p)
				return len(rows), err
			},
		} {
			var n int
			read := readBy(t, s, table, true, func(tx store.Tx) (err error) { n, err = page(tx); return err })
			if n != 10 || read > 12 {
				t.Errorf("a page of %d %s %+v read %d rows or index entries of %d", n, table, p, read, history)
			}
		}
	}
	for _, table := range []string{"runs", "mutations", "events"} {
		read := readBy(t, s, table, true, func(tx store.Tx) error {
			if _, err := tx.Counts(); err != nil {
				return err
			}
			_, err := tx.TopicCounts("w")
			return err
		})
		if read != 0 {
			t.Errorf("the counts of /metrics and the topics view read %d rows of %s", read, table)
		}
	}
}
