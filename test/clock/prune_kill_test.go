package clock

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/testsink"
)

// tallyRecount counts the rows as the tallies of migration 029 count them:
// a workflow's inputs, its runs and its writes by status, its events by
// topic and state.
const tallyRecount = `SELECT workflow, 'input', '', '', count(*) FROM items GROUP BY workflow
UNION ALL SELECT workflow, 'run', '', status, count(*) FROM runs GROUP BY workflow, status
UNION ALL SELECT workflow, 'mutation', '', status, count(*) FROM mutations GROUP BY workflow, status
UNION ALL SELECT workflow, 'event', topic, CASE WHEN status = 'pending' AND reserved_by <> '' THEN 'reserved' ELSE status END, count(*)
  FROM events GROUP BY 1, 2, 3, 4`

// keep serve killed (SIGKILL) again and again in the middle of a prune
// (issue 44): a history of some hundreds of done orders, each with its
// run, event and write, falls behind the horizon when keep's clock moves
// two days on; [retention] batch = 3 makes the pass hundreds of small
// transactions, each rewriting its rows by a DELETE and an INSERT
// (SQLite, sqldb.PruneBodies). keep serve is killed at staggered moments
// once the pass has begun committing, and started again, until every body
// is pruned. What a person sees afterwards: every order still done, not
// one write sent twice (all the orders posted again are not written
// again; a new one is), the tallies behind /metrics and the topics view
// equal to a recount of the rows, keep.db intact and smaller than before.
func TestKeepServeKilledWhilePruning(t *testing.T) {
	t.Parallel()
	const orders = 240
	sink := testsink.New()
	defer sink.Close()
	dir, data, cfg := deployOrders(t, sink, "batch = 3")
	r := &rig{t: t, dir: dir}
	clock := r.clockFile("a")
	dbPath := filepath.Join(data, "keep.db")
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	// pruned counts the orders' runs, events and writes whose bodies are
	// pruned, of all three.
	const prunedQ = `SELECT (SELECT count(*) FROM runs WHERE workflow='orders' AND handler_type='consumer' AND pruned_at>0)
  + (SELECT count(*) FROM events WHERE workflow='orders' AND pruned_at>0) + (SELECT count(*) FROM mutations WHERE workflow='orders' AND pruned_at>0)`
	const bodiesQ = `SELECT (SELECT count(*) FROM runs WHERE workflow='orders' AND handler_type='consumer')
  + (SELECT count(*) FROM events WHERE workflow='orders') + (SELECT count(*) FROM mutations WHERE workflow='orders')`
	var cur struct {
		cmd  *exec.Cmd
		logs *logs
	}
	var all strings.Builder // every keep serve's log, for a failure's message
	start := func() {
		cur.logs, cur.cmd = r.start("a", clock)
	}
	stop := func(sig syscall.Signal) {
		t.Helper()
		if err := cur.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cur.cmd.Wait()
		all.WriteString(cur.logs.String())
		if sig == syscall.SIGTERM && err != nil {
			t.Fatalf("keep serve stopped by SIGTERM: %v\n%s", err, cur.logs)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not reached in 5 minutes (sink writes: %d; bodies %d, pruned %d)\nkeep serve's logs:\n%s%s", what, len(sink.Writes()), count(bodiesQ), count(prunedQ), all.String(), cur.logs)
			}
		}
	}
	publish := func(n int) error {
		pad := strings.Repeat("x", 3000) // a body worth pruning
		out, err := exec.Command(keepBin, "publish", "orders", "o", "--data", data, "--id", fmt.Sprintf("order-%d", n),
			"--title", fmt.Sprintf("Order %d", n), "--json", fmt.Sprintf(`{"n":%d,"pad":%q}`, n, pad)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("keep publish %d: %v\n%s", n, err, out)
		}
		return nil
	}
	publishAll := func(from, to int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, to-from+1)
		next := make(chan int)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range next {
					if err := publish(n); err != nil {
						errs <- err
					}
				}
			}()
		}
		for n := from; n <= to; n++ {
			next <- n
		}
		close(next)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	writes := func() map[string]int {
		m := map[string]int{}
		for _, w := range sink.Writes() {
			m[w.Path]++
		}
		return m
	}

	start()
	publishAll(1, orders)
	waitFor("every order written once and its run, event and write stored", func() bool {
		return len(sink.Writes()) == orders && count(bodiesQ) == 3*orders
	})
	inputsDone(t, data, orders)
	if p := count(prunedQ); p != 0 {
		t.Fatalf("%d bodies pruned before keep's clock moved: the horizon is a day", p)
	}
	stop(syscall.SIGTERM) // keep.db whole, its log checkpointed
	before := fileSize(t, dbPath)

	// Keep's clock moves two days on: every order is past the horizon.
	// Whatever prunes is killed once it has pruned more than at the last
	// kill, a little later each time, and started again: keep serve's own
	// pass twice (its first pass comes a minute after it starts: the least
	// [retention] interval), then keep prune, the same pass from the
	// command line, until a keep prune ends by itself.
	r.step(clock, 49*time.Hour)
	last, kills := 0, 0
	for ; kills < 2; kills++ {
		start()
		waitFor("keep serve's pass pruning after a restart", func() bool { return count(prunedQ) > last })
		time.Sleep(time.Duration(kills) * 40 * time.Millisecond)
		stop(syscall.SIGKILL)
		last = count(prunedQ)
	}
	for done := false; !done; {
		cmd := exec.Command(keepBin, "prune", "--data", data, "--config", cfg)
		cmd.Env = append(os.Environ(), "KEEP_TEST_CLOCK_FILE="+clock)
		out := &logs{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		for deadline := time.Now().Add(5 * time.Minute); !done && count(prunedQ) <= last; time.Sleep(5 * time.Millisecond) {
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("keep prune after %d kills: %v\n%s", kills, err, out)
				}
				done = true
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("keep prune did not move on in 5 minutes\n%s", out)
			}
		}
		if done {
			break
		}
		time.Sleep(time.Duration(kills%5) * 10 * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		if err := <-exited; err == nil {
			done = true // it ended before the kill
		} else {
			kills++
		}
		last = count(prunedQ)
	}
	if p := count(prunedQ); p != 3*orders {
		t.Fatalf("%d of %d bodies pruned after keep prune ended", p, 3*orders)
	}
	if kills < 5 {
		t.Fatalf("the prune was killed %d times, want at least 5: the test did not attack", kills)
	}
	t.Logf("the prune killed %d times in its middle (keep serve twice)", kills)

	// What a person sees.
	inputsDone(t, data, orders)
	checkTallies(t, db)
	var ok string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("PRAGMA integrity_check: %q %v", ok, err)
	}
	// Every order posted again is not written again; a new one is.
	start()
	publishAll(1, orders+1)
	waitFor("the new order written", func() bool { return writes()[fmt.Sprintf("/write/%d", orders+1)] == 1 })
	for p, n := range writes() {
		if n != 1 {
			t.Fatalf("%s written %d times after the killed prunes and the orders posted again, want once", p, n)
		}
	}
	if n := len(writes()); n != orders+1 {
		t.Fatalf("the sink holds %d writes, want %d", n, orders+1)
	}
	checkTallies(t, db)
	stop(syscall.SIGTERM)
	if after := fileSize(t, dbPath); after >= before {
		t.Fatalf("keep.db is %d bytes after the prune, %d before: the disk was not given back", after, before)
	} else {
		t.Logf("keep.db: %d bytes before the prune, %d after", before, after)
	}
}

// inputsDone fails the test unless keep inputs lists n orders, each done.
func inputsDone(t *testing.T, data string, n int) {
	t.Helper()
	out, err := exec.Command(keepBin, "inputs", "orders", "--data", data, "--all", "--json").Output()
	if err != nil {
		t.Fatalf("keep inputs: %v", err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("keep inputs --json: %v\n%.2000s", err, out)
	}
	if len(rows) != n {
		t.Fatalf("keep inputs lists %d orders, want %d", len(rows), n)
	}
	for _, r := range rows {
		if r["status"] != "done" {
			t.Fatalf("keep inputs: an order is not done: %v", r)
		}
	}
}

// checkTallies fails the test unless every tally kept by the triggers
// equals a recount of its rows.
func checkTallies(t *testing.T, db *sql.DB) {
	t.Helper()
	read := func(q string) map[string]int {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		m := map[string]int{}
		for rows.Next() {
			var w, kind, topic, status string
			var n int
			if err := rows.Scan(&w, &kind, &topic, &status, &n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				m[w+" "+kind+" "+topic+" "+status] = n
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	tallies, recount := read(`SELECT workflow, kind, topic, status, n FROM tallies`), read(tallyRecount)
	if fmt.Sprint(tallies) != fmt.Sprint(recount) {
		t.Fatalf("the tallies differ from a recount of the rows:\ntallies: %v\nrecount: %v", tallies, recount)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
