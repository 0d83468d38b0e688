package postgres

import (
	"context"
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
	var read int64
	if err := s.onConn(ctx, "begin", true, func(r *runner) error {
		// The backend's counts not yet reported, before and after: index
		// entries its scans returned, over every index of the table.
		const entriesRead = `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0) FROM pg_index WHERE indrelid = 'mutations'::regclass`
		var before int64
		if err := r.QueryRow(entriesRead).Scan(&before); err != nil {
			return err
		}
		if err := settle(sqldb.NewTx(r), mutation(settled)); err != nil {
			return err
		}
		if err := r.QueryRow(entriesRead).Scan(&read); err != nil {
			return err
		}
		read -= before
		return r.commit()
	}); err != nil {
		t.Fatal(err)
	}
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
