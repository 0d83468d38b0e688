package engine_test

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/intake"
	"github.com/keep-run/keep/internal/report"
)

// Issue 44: a poll that finds nothing new stores at most 2 KB, counted in
// bytes of rows (deterministic): on main a 53 KB feed stored 110,300 and
// the quick start's 3 files 2,686 a poll. The first poll that finds
// nothing new starts one row that counts them (its trace stored once);
// each one after it is folded into that row.
func TestAPollThatFindsNothingNewStoresAtMost2KB(t *testing.T) {
	t.Parallel()
	const limit = 2048
	t.Run("a 53 KB feed", func(t *testing.T) {
		t.Parallel()
		e, f, wf := feedEnv(t)
		rb, _, first := e.perPoll(wf, 20)
		if rb > limit {
			t.Errorf("a poll of the feed that found nothing new stored %.0f bytes, want at most %d", rb, limit)
		}
		// The read's answer once: the feed's body, not also parsed.
		if feed := int64(len(f.body())); first > feed*13/10 {
			t.Errorf("the first poll that found nothing new stored %d bytes for a feed of %d: the answer is kept more than once", first, feed)
		}
		if n := f.reads.Load(); n != 22 {
			t.Fatalf("the feed was read %d times, want 22: the polls did not run", n)
		}
		quiet := quietRuns(t, e, wf, "poll")
		if len(quiet) != 1 || quiet[0].QuietPolls != 21 {
			t.Fatalf("runs of polls that found nothing new: %+v, want one of 21", quiet)
		}
		if n := len(e.sink.Writes()); n != 1 {
			t.Fatalf("writes at the sink: %d, want 1", n)
		}
	})
	t.Run("the quick start's 3 files", func(t *testing.T) {
		t.Parallel()
		e, wf := quickstartEnv(t, 3)
		rb, _, _ := e.perPoll(wf, 20)
		if rb > limit {
			t.Errorf("a poll of 3 files that found nothing new stored %.0f bytes, want at most %d", rb, limit)
		}
		if quiet := quietRuns(t, e, wf, "pollOrders"); len(quiet) != 1 || quiet[0].QuietPolls != 21 {
			t.Fatalf("runs of polls that found nothing new: %+v, want one of 21", quiet)
		}
	})
}

// quietRuns are the producer's runs that count polls that found nothing new.
func quietRuns(t testing.TB, e *env, wf, producer string) []apitype.Run {
	t.Helper()
	var out []apitype.Run
	for _, r := range e.runs(wf) {
		if r.Handler == producer && r.QuietPolls > 0 {
			out = append(out, r)
		}
	}
	return out
}

// What a person sees of quiet polls, and what replays them: the run that
// counts them shows the last one's trace with the read's answer whole
// (body and parsed json), the producer says when it last polled and how
// many polls found nothing new, a poll that finds something is a run of
// its own and the next quiet poll starts a new count.
func TestQuietPollsAreCountedAndTheirLastTraceIsWhole(t *testing.T) {
	t.Parallel()
	e, f, wf := feedEnv(t)
	for range 3 {
		e.poll(wf)
	}
	quiet := quietRuns(t, e, wf, "poll")
	if len(quiet) != 1 || quiet[0].QuietPolls != 3 || quiet[0].QuietSince == "" || !strings.Contains(quiet[0].Title, "3 polls found nothing new") {
		t.Fatalf("runs of quiet polls: %+v", quiet)
	}
	// Stored once: the trace in the runs table holds the body, not also
	// the parsed json.
	raw := storedTrace(t, e, quiet[0].ID)
	if !strings.Contains(raw, `"jsonOfBody":true`) || strings.Contains(raw, `"json":{`) {
		t.Fatalf("the stored trace keeps the read's answer twice (%d bytes)", len(raw))
	}
	// Read whole: the trace view answers body and json.
	d, err := report.ShowRun(e.ctx(), e.k.Store, quiet[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	whole := false
	for _, en := range d.Trace {
		if en.Kind != "call" || len(en.Result) == 0 {
			continue
		}
		var res struct {
			Body string `json:"body"`
			JSON struct {
				Items []json.RawMessage `json:"items"`
			} `json:"json"`
		}
		if err := json.Unmarshal(en.Result, &res); err != nil {
			t.Fatal(err)
		}
		whole = len(res.JSON.Items) == 180 && len(res.Body) == len(f.body()) && !en.JSONOfBody
	}
	if !whole {
		t.Fatalf("the trace view does not show the feed's answer whole: %+v", d.Trace)
	}
	// Replayed from the trace: the script reads res.json.items, which a
	// dry run answers from the stored body (it fails on a missing json).
	src := strings.ReplaceAll(strings.ReplaceAll(feedScript, "%FEED%", f.URL), "%SINK%", e.sink.URL)
	if _, err := e.k.Engine.DryRun(e.ctx(), wf, quiet[0].ID, src); err != nil {
		t.Fatalf("a dry run of the quiet poll from its trace: %v", err)
	}
	_, producers, err := report.Topics(e.ctx(), e.k.Store, wf)
	if err != nil || len(producers) != 1 || producers[0].QuietPolls != 3 || producers[0].LastPolledAt == "" || producers[0].QuietRun != quiet[0].ID {
		t.Fatalf("the producer as the topics view shows it: %+v %v", producers, err)
	}
	ss, err := report.Statuses(e.ctx(), e.k.Store, wf)
	if err != nil || len(ss) != 1 || len(ss[0].QuietPolls) != 1 || !strings.HasPrefix(ss[0].QuietPolls[0], "producer poll: last polled at ") ||
		!strings.Contains(ss[0].QuietPolls[0], ", 3 polls found nothing new since ") {
		t.Fatalf("the workflow's status (keep status) does not say the producer's quiet polls: %+v %v", ss, err)
	}
	// Something new: a run of its own, and the count starts again.
	f.count.Add(1)
	e.poll(wf)
	if n := len(e.sink.Writes()); n != 2 {
		t.Fatalf("writes at the sink: %d, want 2", n)
	}
	_, producers, _ = report.Topics(e.ctx(), e.k.Store, wf)
	if producers[0].QuietPolls != 0 {
		t.Fatalf("after a poll that found something the producer still shows quiet polls: %+v", producers[0])
	}
	e.poll(wf)
	quiet = quietRuns(t, e, wf, "poll")
	if len(quiet) != 2 || quiet[0].QuietPolls != 1 || quiet[1].QuietPolls != 3 {
		t.Fatalf("runs of quiet polls after one that found something: %+v", quiet)
	}
	polls := 0
	for _, r := range e.runs(wf) {
		if r.Handler == "poll" {
			polls++
		}
	}
	if polls != 4 { // the first, 3 quiet, the new item, 1 quiet
		t.Fatalf("producer runs stored: %d, want 4", polls)
	}
}

// storedTrace is a run's trace as the runs table holds it.
func storedTrace(t *testing.T, e *env, id string) string {
	t.Helper()
	driver, dsn, q := "sqlite", "file:"+filepath.Join(e.opts.DataDir, "keep.db")+"?mode=ro", `SELECT trace FROM runs WHERE id=?`
	if e.opts.Store != "" {
		driver, dsn, q = "pgx", e.opts.Store, `SELECT trace FROM runs WHERE id=$1`
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var s string
	if err := db.QueryRow(q, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A write's arguments are stored once in its run's trace (issue 44: they
// were stored three times, requested, in flight and applied), and the
// trace view shows them on each of those lines.
func TestAWritesArgumentsAreStoredOnceInItsTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(apiScript)
	if _, err := intake.Post(e.ctx(), e.k.Store, intake.APIEvent{Workflow: wf, Topic: "job", ID: "e1", Title: "Job e1", Payload: json.RawMessage(`{"id":"e1","note":"written-once-marker"}`)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.settle()
	var run apitype.Run
	for _, r := range e.runs(wf) {
		if r.Handler == "c" && r.Status == "committed" {
			run = r
		}
	}
	if run.ID == "" {
		t.Fatalf("no committed consumer run: %+v", e.runs(wf))
	}
	if n := strings.Count(storedTrace(t, e, run.ID), "written-once-marker"); n != 1 {
		t.Fatalf("the write's arguments are stored %d times in its trace, want once", n)
	}
	d, err := report.ShowRun(e.ctx(), e.k.Store, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	shown := 0
	for _, l := range d.Trace {
		if b, _ := json.Marshal(l.Args); l.Method == "http.request" && strings.Contains(string(b), "written-once-marker") {
			shown++
		}
	}
	if shown != 3 {
		t.Fatalf("the trace view shows the write's arguments on %d lines, want 3 (requested, in flight, applied): %+v", shown, d.Trace)
	}
}

// A poll that failed and is retried has its row already (the retry is
// written when it is made): when the retry finds nothing new it commits
// there, a run of its own, never folded (a folded retry would leave its
// row open and the workflow stuck), and the next quiet poll starts a new
// count.
func TestARetriedPollThatFindsNothingNewIsARunOfItsOwn(t *testing.T) {
	t.Parallel()
	e, f, wf := feedEnv(t)
	e.poll(wf)
	e.poll(wf)
	f.fail.Store(1)
	e.poll(wf)
	e.noOpenRun(wf)
	var retried, retry int
	for _, r := range e.runs(wf) {
		switch {
		case r.Handler != "poll":
		case r.Status == "retried":
			retried++
		case r.RetryOf != "" && r.Status == "committed" && r.QuietPolls == 0:
			retry++
		}
	}
	if retried != 1 || retry != 1 {
		t.Fatalf("after a failed poll: %d retried and %d retries committed, want 1 and 1: %+v", retried, retry, e.runs(wf))
	}
	e.poll(wf)
	e.noOpenRun(wf)
	quiet := quietRuns(t, e, wf, "poll")
	if len(quiet) != 2 || quiet[0].QuietPolls != 1 || quiet[1].QuietPolls != 2 {
		t.Fatalf("runs of quiet polls: %+v", quiet)
	}
}
