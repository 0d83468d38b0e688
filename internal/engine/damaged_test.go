package engine_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
)

// Issue 44: a bit flip inside a row of keep's store passes SQLite's
// integrity check. What keep executes or trusts carries a digest checked
// whenever it is read, and keep's JSON that does not decode is damaged
// storage too: never run, never "a bug in the script".

// rawStore opens e's own store beside keep, as database/sql does (the
// SQLite file in the data directory, or e's PostgreSQL schema), so that a
// test changes bytes inside a row as a bit flip would; q is written with
// ? placeholders.
func rawStore(t *testing.T, e *env) func(q string, args ...any) *sql.Rows {
	t.Helper()
	driver, dsn := "sqlite", "file:"+filepath.Join(e.opts.DataDir, "keep.db")+"?_pragma=busy_timeout(10000)"
	pg := e.opts.Store != ""
	if pg {
		driver, dsn = "pgx", e.opts.Store
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return func(q string, args ...any) *sql.Rows {
		t.Helper()
		if pg {
			for i := 1; strings.Contains(q, "?"); i++ {
				q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
			}
		}
		rows, err := db.Query(q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		t.Cleanup(func() { rows.Close() })
		return rows
	}
}

// flipByte flips the lowest bit of the first byte after marker in s.
func flipByte(t *testing.T, s, marker string) string {
	t.Helper()
	i := strings.Index(s, marker)
	if i < 0 {
		t.Fatalf("%q is not in %q", marker, s)
	}
	b := []byte(s)
	b[i+len(marker)] ^= 0x01
	return string(b)
}

// twoWorkflows deploys hook and other, another workflow that writes to
// the sink under /other/: what is damaged of hook must not stop it.
func twoWorkflows(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	e.deploy(hookScript("", ""))
	e.deploy(strings.Replace(strings.Replace(hookScript("", ""), `name: "hook"`, `name: "other"`, 1), "/write/", "/other/", 1))
	return e
}

// stoppedWithRawStore is twoWorkflows with keep closed and its store open
// beside it (rawStore): a test changes rows, then e.restart().
func stoppedWithRawStore(t *testing.T) (*env, func(q string, args ...any) *sql.Rows) {
	t.Helper()
	e := twoWorkflows(t)
	if err := e.k.Close(); err != nil {
		t.Fatal(err)
	}
	return e, rawStore(t, e)
}

// storedScript is the script stored for wf's first version.
func storedScript(t *testing.T, q func(q string, args ...any) *sql.Rows, wf string) string {
	t.Helper()
	var script string
	rows := q(`SELECT script FROM versions WHERE workflow=? AND id=1`, wf)
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("no version 1 of %s", wf)
	}
	if err := rows.Scan(&script); err != nil {
		t.Fatal(err)
	}
	return script
}

// settleDamaged runs until idle and returns the step errors, which a
// damaged workflow's steps give.
func settleDamaged(t *testing.T, e *env) []error {
	t.Helper()
	if err := e.k.Scheduler.RunUntilIdle(e.ctx()); err != nil {
		t.Fatalf("settle: %v", err)
	}
	return e.k.Scheduler.Errors()
}

// writesTo counts the sink's writes whose path starts with prefix.
func writesTo(e *env, prefix string) int {
	n := 0
	for _, w := range e.sink.Writes() {
		if strings.HasPrefix(w.Path, prefix) {
			n++
		}
	}
	return n
}

func statusOf(t *testing.T, e *env, wf string) apitype.Status {
	t.Helper()
	ss, err := report.Statuses(e.ctx(), e.k.Store, wf)
	if err != nil || len(ss) != 1 {
		t.Fatalf("status of %s: %v %v", wf, ss, err)
	}
	return ss[0]
}

func TestAFlippedStoredScriptNeverRunsAndSaysDamagedStorage(t *testing.T) {
	t.Parallel()
	e, q := stoppedWithRawStore(t)
	// The flip keeps the script valid: "/write/" becomes "/wriue/", a
	// write to another path, which keep made before the digests.
	flipped := flipByte(t, storedScript(t, q, "hook"), "/wri")
	q(`UPDATE versions SET script=? WHERE workflow=?`, flipped, "hook").Close()
	e.restart()

	errs := settleDamaged(t, e)
	if n := writesTo(e, "/other/"); n != 1 {
		t.Fatalf("the other workflow wrote %d times, want 1 (it goes on): %v", n, errs)
	}
	if n := e.sink.Requests() - writesTo(e, "/other/"); n != 0 {
		t.Fatalf("the damaged script made %d requests, want 0", n)
	}
	if len(errs) == 0 || !kt.IsDamaged(errs[0]) || !strings.Contains(errs[0].Error(), "damaged storage") {
		t.Fatalf("step errors: %v", errs)
	}
	s := statusOf(t, e, "hook")
	if s.Status != kt.StatusWordDamaged || !strings.Contains(s.Reason, "damaged storage: the stored script of workflow hook version 1.0 (wf.js) (table versions, row workflow=hook id=1)") ||
		!strings.Contains(s.Reason, "keep deploy wf.js") || !strings.Contains(s.Reason, "restore keep.db from a backup") || strings.Contains(s.Reason, "bug in the script") {
		t.Fatalf("status %s: %s", s.Status, s.Reason)
	}
	if s := statusOf(t, e, "other"); s.Status == kt.StatusWordDamaged {
		t.Fatalf("the other workflow: %s %s", s.Status, s.Reason)
	}
	// The check changed nothing of the row.
	if storedScript(t, q, "hook") != flipped {
		t.Fatal("the damaged row was changed by the check")
	}

	// The restore step: deploy the file again. A new version runs.
	e.redeploy(hookScript("", ""), "")
	// (stepped at once: the scheduler waits a second after a failed step)
	if err := e.k.Scheduler.StepWorkflow(e.ctx(), "hook"); err != nil {
		t.Fatal(err)
	}
	if after := settleDamaged(t, e); len(after) != len(errs) {
		t.Fatalf("step errors after the redeploy: %v", after[len(errs):])
	}
	if n := writesTo(e, "/write/"); n != 1 {
		t.Fatalf("after the redeploy hook wrote %d times, want 1", n)
	}
	if s := statusOf(t, e, "hook"); s.Status == kt.StatusWordDamaged {
		t.Fatalf("after the redeploy: %s %s", s.Status, s.Reason)
	}
}

func TestAGrantFlippedToWidenWhatAWorkflowCallsIsNotTrusted(t *testing.T) {
	t.Parallel()
	e := twoWorkflows(t)
	ctx := context.Background()
	// hook is granted a write to another port only (its deploy granted
	// the sink's): its run would wait for a person's grant.
	host := e.sink.Host()
	want := "http.request POST " + host
	narrow := flipByte(t, want, want[:len(want)-1]) // the port's last digit, one bit off
	if _, err := revoke(ctx, e.k.Store, "hook", []string{want}, nowT()); err != nil {
		t.Fatal(err)
	}
	if _, err := control.GrantItems(ctx, e.k.Store, "hook", []string{narrow}, nowT()); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Close(); err != nil {
		t.Fatal(err)
	}
	// A bit flips back in the stored grant: it now allows the write. The
	// digest written with it is kept.
	q := rawStore(t, e)
	q(`UPDATE grants SET item=? WHERE workflow=? AND item=?`, want, "hook", narrow).Close()
	e.restart()

	errs := settleDamaged(t, e)
	if n := e.sink.Requests() - writesTo(e, "/other/"); n != 0 {
		t.Fatalf("the workflow with the damaged grant made %d requests, want 0", n)
	}
	if n := writesTo(e, "/other/"); n != 1 {
		t.Fatalf("the other workflow wrote %d times, want 1", n)
	}
	if len(errs) == 0 || !kt.IsDamaged(errs[0]) {
		t.Fatalf("step errors: %v", errs)
	}
	s := statusOf(t, e, "hook")
	if s.Status != kt.StatusWordDamaged || !strings.Contains(s.Reason, "the grant '"+want+"' of workflow hook") || !strings.Contains(s.Reason, "table grants") ||
		!strings.Contains(s.Reason, "keep grant hook --revoke '"+want+"', then keep grant hook") {
		t.Fatalf("status %s: %s", s.Status, s.Reason)
	}
	// Its restore step works: revoke it as stored, and the workflow is
	// checked again (it now waits for the grant a person gives).
	if _, err := revoke(ctx, e.k.Store, "hook", []string{want}, nowT()); err != nil {
		t.Fatalf("revoke the damaged grant: %v", err)
	}
	if s := statusOf(t, e, "hook"); s.Status == kt.StatusWordDamaged {
		t.Fatalf("after the revoke: %s %s", s.Status, s.Reason)
	}
}

func TestARunsStoredJSONThatDoesNotDecodeIsDamagedStorageOnItsCard(t *testing.T) {
	t.Parallel()
	e, wf, r := bugInNext(t)
	cards, err := report.Blocked(e.ctx(), e.k.Store, wf)
	if err != nil || len(cards) != 1 || !strings.Contains(strings.Join(cards[0].Notes, " "), "bug in the script") {
		t.Fatalf("before: %v %v", cards, err)
	}
	q := rawStore(t, e)
	q(`UPDATE runs SET prepare_result=? WHERE id=?`, `{"reservations":[{"topic":"job"`, r.ID).Close()
	cards, err = report.Blocked(e.ctx(), e.k.Store, wf)
	if err != nil || len(cards) != 1 {
		t.Fatalf("cards %v %v", cards, err)
	}
	c := cards[0]
	notes := strings.Join(c.Notes, " ")
	if !strings.Contains(c.Reason, "damaged storage: the stored prepare result of run "+r.ID+" (table runs, row id="+r.ID+") does not decode") ||
		!strings.Contains(notes, "damaged storage, not a bug in the script") || strings.Contains(notes, "This is a bug in the script") ||
		!strings.Contains(c.Reason, "restore keep.db from a backup") {
		t.Fatalf("card: %q notes %q", c.Reason, c.Notes)
	}
	// Try again: the engine reads it, stops on it as damaged storage, and
	// says so on the run; nothing is written to the sink again.
	e.resolve(r.ID, kt.ResolveTryAgain)
	if err := e.k.Scheduler.RunUntilIdle(e.ctx()); err != nil {
		t.Fatal(err)
	}
	got := e.open(wf)
	if got.ErrorClass != kt.ClassDamaged || !strings.Contains(got.ErrorMessage, "damaged storage") {
		t.Fatalf("run %s %s: %s", got.Status, got.ErrorClass, got.ErrorMessage)
	}
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes %d, want the 1 before", n)
	}
}

// A store written before the digests gets them at migration: its rows are
// read as they were, nothing is taken for damaged, and its work goes on.
func TestRowsStoredBeforeTheDigestsGetThemAtMigration(t *testing.T) {
	t.Parallel()
	e, q := stoppedWithRawStore(t)
	for _, table := range []string{"versions", "grants", "workflows", "secrets", "repairs"} {
		q(`ALTER TABLE ` + table + ` DROP COLUMN digest`).Close()
	}
	q(`DELETE FROM schema_migrations WHERE name LIKE '%_stored_digests.sql'`).Close()
	e.restart()
	e.settle()
	if n := len(e.sink.Writes()); n != 2 {
		t.Fatalf("writes %d, want 2 (one per workflow)", n)
	}
	for _, wf := range []string{"hook", "other"} {
		if s := statusOf(t, e, wf); s.Status == kt.StatusWordDamaged {
			t.Fatalf("%s: %s %s", wf, s.Status, s.Reason)
		}
	}
}

// A workflow's recorded files root flipped (its digest kept) is not where
// its files connector goes: the workflow stops as damaged storage, and
// deploying it again records it afresh.
func TestAFlippedFilesRootIsDamagedStorageAndADeployRestoresIt(t *testing.T) {
	t.Parallel()
	e, q := stoppedWithRawStore(t)
	q(`UPDATE workflows SET files_root=? WHERE name=?`, "/etc", "hook").Close()
	e.restart()
	errs := settleDamaged(t, e)
	if n := e.sink.Requests() - writesTo(e, "/other/"); n != 0 || writesTo(e, "/other/") != 1 {
		t.Fatalf("requests of hook %d, writes of other %d", n, writesTo(e, "/other/"))
	}
	s := statusOf(t, e, "hook")
	if len(errs) == 0 || s.Status != kt.StatusWordDamaged || !strings.Contains(s.Reason, "the recorded files root and policy of workflow hook (table workflows, row name=hook)") ||
		!strings.Contains(s.Reason, "keep deploy") {
		t.Fatalf("status %s: %s (%v)", s.Status, s.Reason, errs)
	}
	e.redeploy(hookScript("", ""), "")
	if err := e.k.Scheduler.StepWorkflow(e.ctx(), "hook"); err != nil {
		t.Fatal(err)
	}
	if s := statusOf(t, e, "hook"); s.Status == kt.StatusWordDamaged || s.FilesRoot == "/etc" {
		t.Fatalf("after the redeploy: %s %s %s", s.Status, s.FilesRoot, s.Reason)
	}
	if n := writesTo(e, "/write/"); n != 1 {
		t.Fatalf("after the redeploy hook wrote %d times, want 1", n)
	}
}

// A failed run's card reads its version's script (the note on how to fix
// it): when that script is damaged, the card says damaged storage, not
// "a bug in the script", and keep status shows the workflow damaged.
func TestTheCardOfAFailedRunWhoseScriptIsDamagedSaysDamagedStorage(t *testing.T) {
	t.Parallel()
	e, wf, r := bugInNext(t)
	q := rawStore(t, e)
	q(`UPDATE versions SET script=? WHERE workflow=? AND id=1`, flipByte(t, storedScript(t, q, wf), "a bug in nex"), wf).Close()
	cards, err := report.Blocked(e.ctx(), e.k.Store, wf)
	if err != nil || len(cards) != 1 {
		t.Fatalf("cards %v %v", cards, err)
	}
	notes := strings.Join(cards[0].Notes, " ")
	if cards[0].RunID != r.ID || !strings.Contains(cards[0].Reason, "damaged storage: the stored script of workflow hook version 1.0") ||
		!strings.Contains(notes, "not a bug in the script") || strings.Contains(notes, "This is a bug in the script") {
		t.Fatalf("card: %q notes %q", cards[0].Reason, cards[0].Notes)
	}
	if s := statusOf(t, e, wf); s.Status != kt.StatusWordDamaged {
		t.Fatalf("status %s: %s", s.Status, s.Reason)
	}
}

// lines is a log that counts its lines, for a test that reads what keep
// logged.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }

// count is how many lines hold every one of parts.
func (l *lines) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.b.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// A workflow whose stored script is damaged is not stepped every second
// with an error logged each time until someone restores it (issue 44's
// follow-up): keep serve's scheduler logs it once and looks again after
// 1 s, 2 s, 4 s … (at most 5 minutes apart), and at once when it is
// deployed again. Counted, not timed: each look after the first is a
// debug line, and over T seconds from the first, looks that double their
// wait are at most 1 + log2(T+1) however slow the machine; a scheduler
// that looks every second makes about T of them and logs each.
func TestADamagedWorkflowIsLoggedOnceAndLookedAtLessAndLessOften(t *testing.T) {
	t.Parallel()
	e, q := stoppedWithRawStore(t)
	q(`UPDATE versions SET script=? WHERE workflow=?`, flipByte(t, storedScript(t, q, "hook"), "/wri"), "hook").Close()
	log := &lines{}
	e.opts.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.restart()

	serve := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.k.Scheduler.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("the scheduler: %v", err)
			}
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not reached in 2 minutes\n%s", what, log.b.String())
			}
		}
	}
	failed := func() int { return log.count(`msg="step failed"`, "workflow=hook", "damaged storage") }
	again := func() int { return log.count("step failed again on the same damaged storage", "workflow=hook") }

	stop := serve()
	waitFor("the damaged workflow's first failed step, and the other workflow's write", func() bool { return failed() >= 1 && writesTo(e, "/other/") == 1 })
	first := time.Now()
	// Long enough for a scheduler that looks every second to look five
	// times more; nothing below depends on how much longer it takes.
	waitFor("5 s of keep serve after the first failed step", func() bool { return time.Since(first) >= 5*time.Second })
	stop()
	elapsed := time.Since(first).Seconds()
	if n := failed(); n != 1 {
		t.Fatalf("the damaged workflow's failed step was logged %d times in %.1f s, want once:\n%s", n, elapsed, log.b.String())
	}
	looks := 1 + again()
	if most := 1 + int(math.Log2(elapsed+1)); looks > most {
		t.Fatalf("the damaged workflow was looked at %d times in %.1f s, want at most %d (each wait twice the one before)", looks, elapsed, most)
	}
	if n := e.sink.Requests() - writesTo(e, "/other/"); n != 0 {
		t.Fatalf("the damaged script made %d requests", n)
	}
	if errs := e.k.Scheduler.Errors(); len(errs) != 1 || !kt.IsDamaged(errs[0]) {
		t.Fatalf("the scheduler's errors: %v, want the damage once", errs)
	}

	// Deployed again, it is looked at again (the deploy tells the
	// scheduler), and runs.
	e.redeploy(hookScript("", ""), "")
	stop = serve()
	waitFor("hook's write after the redeploy", func() bool { return writesTo(e, "/write/") == 1 })
	stop()
	if s := statusOf(t, e, "hook"); s.Status == kt.StatusWordDamaged {
		t.Fatalf("after the redeploy: %s %s", s.Status, s.Reason)
	}
}
