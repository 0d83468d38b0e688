package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"

	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReopenKeepsDataAndMigratesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	for i := 0; i < 2; i++ {
		s, err := sqlite.Open(path)
		if err != nil {
			t.Fatalf("open #%d: %v", i+1, err)
		}
		if r, err := s.IntegrityCheck(); err != nil || r != "ok" {
			t.Fatalf("integrity %q %v", r, err)
		}
		s.Close()
	}
}

// TestGroupCommitOnAFullDisk fills a small disk with concurrent updates, so
// that SQLite fails in the middle of groups (and may roll a whole group's
// transaction back on its own). What each caller was told must be what is
// on disk: every update that returned nil is there after a reopen, every
// update that returned an error is not.
func TestGroupCommitOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	path := filepath.Join(dir, "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := json.RawMessage(`"` + strings.Repeat("x", 20000) + `"`)
	const n = 400
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = s.Update(ctx, func(tx store.Tx) error {
				return tx.HandlerPut(kt.Handler{Workflow: "full", Name: fmt.Sprint(i), Type: kt.HandlerProducer, State: big})
			})
		}()
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed == 0 || failed == n {
		t.Fatalf("%d of %d updates failed: the disk should have filled part way", failed, n)
	}
	s.Close()
	// Room to reopen (the WAL is replayed into the database).
	s, err = sqlite.Open(path)
	if err != nil {
		t.Skipf("cannot reopen on the full disk: %v", err)
	}
	defer s.Close()
	if err := s.View(ctx, func(tx store.Tx) error {
		for i := 0; i < n; i++ {
			_, gerr := tx.HandlerGet("full", fmt.Sprint(i))
			switch {
			case errs[i] == nil && gerr != nil:
				return fmt.Errorf("update %d was acknowledged but is not on disk: %v", i, gerr)
			case errs[i] != nil && gerr == nil:
				return fmt.Errorf("update %d failed (%v) but is on disk", i, errs[i])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged, %d refused with an error (e.g. %v)", n-failed, failed, firstErr(errs))
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// A database written by a newer keep (a migration this one does not know)
// is refused with what to do (issue 14: the same rule on both backends).
func TestANewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(context.Background(), func(tx store.Tx) error {
		_, err := tx.(*sqldb.Tx).Runner().Exec(`INSERT INTO schema_migrations(name, applied_at) VALUES('999_from_the_future.sql', 1)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := sqlite.Open(path); err == nil || !strings.Contains(err.Error(), "999_from_the_future.sql") || !strings.Contains(err.Error(), "newer keep") {
		t.Fatalf("opening a newer schema: %v", err)
	}
}

// A lone Update waits for no company (issue 25, the serial path): group
// commit never holds a writer back to gather others. The caller that finds
// no commit under way leads and commits its own request at once, on its
// own goroutine, in a group of one: one commit carrying one transaction,
// with no hand-off to another goroutine that could wait for a window.
func TestALoneUpdateIsCommittedByItsCallerInAGroupOfOne(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 3; i++ {
		before := s.Stats()
		caller, ranOn := goroutineID(), ""
		if err := s.Update(context.Background(), func(tx store.Tx) error {
			ranOn = goroutineID()
			return tx.WorkflowPut(kt.Workflow{Name: fmt.Sprintf("wf%d", i), ActiveVersion: 1})
		}); err != nil {
			t.Fatal(err)
		}
		after := s.Stats()
		if ranOn != caller {
			t.Fatalf("update %d ran on goroutine %s, its caller is %s: a lone writer was handed off", i, ranOn, caller)
		}
		if c, n := after.Commits-before.Commits, after.Transactions-before.Transactions; c != 1 || n != 1 {
			t.Fatalf("update %d: %d commits carrying %d transactions; want 1 and 1", i, c, n)
		}
	}
}

// goroutineID is the running goroutine's number, from its stack's header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

// An Update marked store.NoSync (a write whose loss in a power cut is
// harmless) commits without an fsync: it counts as a transaction, not as a
// durable commit, and the commit note beside the database (which must
// never run ahead of what a power cut leaves) is not moved by it. The next
// durable commit is counted and noted again, its number past the NoSync
// one: the writer is back at synchronous=FULL.
func TestANoSyncUpdateWaitsForNoFsyncAndLeavesTheNoteBehind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(ctx context.Context, name string) {
		t.Helper()
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.WorkflowPut(kt.Workflow{Name: name, ActiveVersion: 1}) }); err != nil {
			t.Fatal(err)
		}
	}
	note := func() int64 {
		t.Helper()
		b, err := os.ReadFile(path + ".seq")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &n); err != nil {
			t.Fatalf("the note %q: %v", b, err)
		}
		return n
	}
	put(context.Background(), "before")
	noted, before := note(), s.Stats()
	put(store.NoSync(context.Background()), "nosync")
	after := s.Stats()
	if c, n := after.Commits-before.Commits, after.Transactions-before.Transactions; c != 0 || n != 1 {
		t.Fatalf("a NoSync update: %d durable commits, %d transactions; want 0 and 1", c, n)
	}
	if got := note(); got != noted {
		t.Fatalf("the note moved to %d after a NoSync commit (was %d)", got, noted)
	}
	if err := s.View(context.Background(), func(tx store.Tx) error {
		_, err := tx.WorkflowGet("nosync")
		return err
	}); err != nil {
		t.Fatalf("the NoSync write is not read back: %v", err)
	}
	put(context.Background(), "after")
	if c := s.Stats().Commits - after.Commits; c != 1 {
		t.Fatalf("the durable update after it: %d durable commits; want 1", c)
	}
	if got := note(); got != noted+2 {
		t.Fatalf("the note says %d after the durable commit; want %d (it carries the NoSync one)", got, noted+2)
	}
}

// A new event is inserted without being read first: its transaction runs
// BEGIN IMMEDIATE, the insert, its cause, the commit number and COMMIT
// (issue 25: 6 → 5). Published again, it is read and merged as before:
// the same id, the causes of both, the new payload.
func TestPublishInsertsWithoutReading(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	publish := func(payload, cause string) (kt.Event, bool, int64) {
		before := s.Stats().Statements
		e := kt.Event{Workflow: "w", Topic: "in", MessageID: "m1", Payload: json.RawMessage(payload), CausedBy: []string{cause}, CreatedAt: 1, UpdatedAt: 1}
		var created bool
		if err := s.Update(ctx, func(tx store.Tx) error { created, err = tx.EventPublish(&e); return err }); err != nil {
			t.Fatal(err)
		}
		return e, created, s.Stats().Statements - before
	}
	first, created, n := publish(`{"a":1}`, "i1")
	if !created || n != 5 {
		t.Errorf("a new event: created %v in %d statements, want true in 5", created, n)
	}
	again, created, _ := publish(`{"a":2}`, "i2")
	if created || again.ID != first.ID {
		t.Errorf("published again: created %v, id %d (first %d), want false and the same id", created, again.ID, first.ID)
	}
	if err := s.View(ctx, func(tx store.Tx) error {
		got, err := tx.EventGet("w", "in", "m1")
		if err != nil {
			return err
		}
		if string(got.Payload) != `{"a":2}` || strings.Join(got.CausedBy, ",") != "i1,i2" || got.Status != kt.EventPending {
			t.Errorf("stored after the second publish: payload %s, causes %v, status %s", got.Payload, got.CausedBy, got.Status)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestThePagesAndTalliesReadByTheirIndexes asks SQLite how it runs each
// page of inputs, runs and outputs (the newest, the next, the previous)
// and the tallies /metrics reads (issue 44): by the (workflow, created_at,
// id) indexes from the page's position, with no sort of the workflow's
// rows and no scan of the history.
func TestThePagesAndTalliesReadByTheirIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	plan := func(q string, args ...any) string {
		rows, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var plan []string
		for rows.Next() {
			var id, parent, notUsed int
			var detail string
			if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(plan, "; ")
	}
	pos := &store.Pos{At: 5, ID: "x"}
	for _, p := range []store.Page{{}, {Older: pos}, {Newer: pos}, {Search: "order", Older: pos}} {
		for index, page := range map[string]func(string, store.Page) (string, []any, bool){"items_page": sqldb.InputPageSQL, "runs_page": sqldb.RunPageSQL, "mutations_page": sqldb.MutationPageSQL} {
			q, args, _ := page("w", p)
			got := plan(q, args...)
			if !strings.Contains(got, "USING INDEX "+index+" (workflow=?") || strings.Contains(got, "TEMP B-TREE") {
				t.Errorf("the page %+v by %s runs as %q: want it along %s from its position, unsorted", p, index, got, index)
			}
			if p.Older != nil && !strings.Contains(got, "(created_at,id)<(?,?)") || p.Newer != nil && !strings.Contains(got, "(created_at,id)>(?,?)") {
				t.Errorf("the page %+v by %s runs as %q: want the index searched from the position, not read from its start", p, index, got)
			}
		}
	}
	for _, p := range []store.Page{{}, {Older: pos}, {Newer: pos}} {
		q, args := sqldb.InputWindowEndSQL("w", p)
		if got := plan(q, args...); !strings.Contains(got, "USING COVERING INDEX items_page (workflow=?") || strings.Contains(got, "TEMP B-TREE") {
			t.Errorf("the end of a search's window %+v runs as %q: want it along items_page alone", p, got)
		}
	}
	if got := plan(sqldb.TalliesSQL, "run"); !strings.Contains(got, "tallies") || strings.Contains(got, "runs") {
		t.Errorf("the tallies are read as %q", got)
	}
}
