package bench

import (
	"context"
	"testing"
)

// What a consumer run costs keep's process on SQLite, counted: the
// statements it runs (BEGIN, COMMIT and savepoints included). Two runs of
// the benchmark's workflow that differ only in their number of inputs: the
// difference is the consumer runs' alone (deploy, the producer and the
// last, empty run cancel out). Issue 25 counted 33, then 31 (at 309d898),
// then 28 (prepare's selection checked against the page it peeked, not
// read again in a read transaction of its own), then 26 (the ledger's
// identity looked up by the in_flight commit, not in a read transaction
// before it), then 28 (the plan's short read on the writer's connection
// sets query_only around it, as a reader connection has it, so that a
// write in a View is refused there too), then 26 (the in_flight commit's
// checks made its writes' conditions, EventReserve and MutationInsert:
// the selection's re-read and the identity look-up gone), then 23 (the
// second commit writes on the copies the first wrote, MutationPutFrom,
// EventSettle, HandlerAdvance: its three reads gone): the two write
// transactions' BEGIN IMMEDIATE, commit number and COMMIT, the read transactions'
// BEGIN and ROLLBACK, the short read's two pragmas, and the reads and
// writes.
// A change that adds a statement to every run fails here; one that saves
// one updates the figure.
func TestStatementsPerConsumerRun(t *testing.T) {
	const few, many = 10, 20
	var count [2]int64
	for i, n := range []int{few, many} {
		r, err := endToEnd(context.Background(), t.TempDir(), 1, n)
		if err != nil {
			t.Fatal(err)
		}
		count[i] = r.statements
	}
	if d := count[1] - count[0]; d != 23*(many-few) {
		t.Errorf("%d statements for %d more consumer runs: %.1f a run, want 23", d, many-few, float64(d)/float64(many-few))
	}
}
