package postgres

import (
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Reads sent ahead (sqldb.Prefetcher): a transaction names the reads it is
// about to make, and they are held back like writes and sent in one
// pipeline with its next statement that needs an answer — a step's
// commit sends its fence check and the rows it reads before writing in
// one round trip instead of one each. Their answers are kept and given to
// the Query that asks for the same statement with the same arguments.
//
// An answer is given only while it is what that Query would read itself:
// the read ran inside the same transaction, after every statement queued
// before it, so what can differ is only what this transaction writes
// after it. A write (Defer, Exec, or any statement that is not a plain
// SELECT) drops the answers of the reads of its table that were queued
// before it, and a lock or a statement keep cannot read drops them all
// (read committed: a read after a lock must see what the lock waited for).
// A read never asked for is sent for nothing; nothing depends on it.

// prefetched is a read sent ahead and, once its pipeline was read, its answer.
type prefetched struct {
	q      string
	args   []any
	tables []string // what it reads (nil: not known, any write drops it)
	done   bool     // answered
	fields []pgconn.FieldDescription
	rows   [][][]byte
	err    error
}

// Prefetch holds a read back to be sent ahead (sqldb.Prefetcher); it
// reports false for a statement that is not a plain read.
func (r *runner) Prefetch(q string, args ...any) bool {
	k := kindOf(q)
	if !k.read {
		return false
	}
	for _, p := range r.ahead {
		if p.q == q && reflect.DeepEqual(p.args, args) {
			return true // already on its way
		}
	}
	p := &prefetched{q: q, args: args, tables: k.tables}
	r.ahead = append(r.ahead, p)
	r.pending = append(r.pending, deferred{what: "a read sent ahead", q: q, args: args, ahead: p})
	return true
}

// takeAhead returns the read sent ahead that answers q. A write
// transaction forgets it (a second read may follow a write of this
// transaction's own); a View's answers stay good to its end, so the same
// read asked twice costs nothing (and does not end a ReadsAhead View's
// early snapshot in vain).
func (r *runner) takeAhead(q string, args []any) *prefetched {
	for i, p := range r.ahead {
		if p.q == q && reflect.DeepEqual(p.args, args) {
			if r.write {
				r.ahead = append(r.ahead[:i], r.ahead[i+1:]...)
			}
			return p
		}
	}
	return nil
}

// invalidate drops the answers a statement about to be queued could change.
func (r *runner) invalidate(q string) {
	if len(r.ahead) == 0 {
		return
	}
	k := kindOf(q)
	if k.read {
		return
	}
	kept := r.ahead[:0]
	for _, p := range r.ahead {
		if k.writes != "" && p.tables != nil && !contains(p.tables, k.writes) && !(tallied[k.writes] && contains(p.tables, "tallies")) {
			kept = append(kept, p)
		}
	}
	clear(r.ahead[len(kept):])
	r.ahead = kept
}

// tallied are the tables whose writes also write tallies, by trigger
// (migration 024): a read of tallies sent ahead is forgotten on them too.
var tallied = map[string]bool{"items": true, "runs": true, "mutations": true, "events": true}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// read reads a read sent ahead's answer from its pipeline, all of it (the
// pipeline's next answers come after it).
func (p *prefetched) read(br pgx.BatchResults) error {
	p.done = true
	rows, err := br.Query()
	if err != nil {
		p.err = err
		return err
	}
	for rows.Next() {
		raw := rows.RawValues()
		row := make([][]byte, len(raw))
		for i, v := range raw {
			if v != nil {
				row[i] = append([]byte{}, v...)
			}
		}
		p.rows = append(p.rows, row)
	}
	p.fields = slices.Clone(rows.FieldDescriptions()) // pgconn reuses its slice for the next answer
	rows.Close()
	if err := rows.Err(); err != nil {
		p.err = err
		return err
	}
	return nil
}

// bufRows are the rows of a read sent ahead, read as a Query's.
type bufRows struct {
	p   *prefetched
	m   *pgtype.Map
	i   int
	err error
}

func (b *bufRows) Next() bool {
	if b.err != nil || b.i+1 >= len(b.p.rows) {
		b.i = len(b.p.rows)
		return false
	}
	b.i++
	return true
}

func (b *bufRows) Scan(dest ...any) error {
	if b.i < 0 || b.i >= len(b.p.rows) {
		return pgx.ErrNoRows
	}
	if err := pgx.ScanRow(b.m, b.p.fields, b.p.rows[b.i], dest...); err != nil {
		b.err = err
		return err
	}
	return nil
}

func (b *bufRows) Err() error   { return b.err }
func (b *bufRows) Close() error { return b.err }

// stmtKind is what a statement does, as far as reads sent ahead care.
type stmtKind struct {
	read   bool     // a plain SELECT: it changes nothing and takes no lock
	writes string   // the one table an INSERT, UPDATE or DELETE writes ("" : not known)
	tables []string // a read's tables (nil: not known)
}

var kinds sync.Map // statement text → stmtKind

// kindOf reads a statement's first words and its FROM and JOIN clauses.
func kindOf(q string) stmtKind {
	if v, ok := kinds.Load(q); ok {
		return v.(stmtKind)
	}
	var k stmtKind
	lower := strings.Join(strings.Fields(strings.ToLower(q)), " ")
	words := strings.Fields(strings.NewReplacer("(", " ( ", ")", " ) ", ",", " , ").Replace(lower))
	switch {
	case len(words) == 0:
	case words[0] == "select":
		k.read = !strings.Contains(lower, "pg_advisory") && !strings.Contains(lower, "keep_fence") &&
			!strings.Contains(lower, " for update") && !strings.Contains(lower, " for no key update") &&
			!strings.Contains(lower, " for share") && !strings.Contains(lower, " for key share")
		if k.read {
			for i, w := range words[:len(words)-1] {
				if (w == "from" || w == "join") && isName(words[i+1]) {
					k.tables = append(k.tables, words[i+1])
				}
			}
		}
	case len(words) >= 3 && words[0] == "insert" && words[1] == "into" && isName(words[2]):
		k.writes = words[2]
	case len(words) >= 2 && words[0] == "update" && isName(words[1]):
		k.writes = words[1]
	case len(words) >= 3 && words[0] == "delete" && words[1] == "from" && isName(words[2]):
		k.writes = words[2]
	}
	kinds.Store(q, k)
	return k
}

// isName says a word is a table's bare name.
func isName(w string) bool {
	if w == "" {
		return false
	}
	for _, c := range w {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
