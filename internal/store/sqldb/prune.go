package sqldb

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// pruneTable is how one kind of row is pruned: its table, the column it
// ended at, the size of its bodies and what dropping them sets (each
// column's new value; "?" is the time of the prune). Rows keep their
// identity (ids, messageIds, identity keys, statuses).
type pruneTable struct {
	table, at, version, run, bytes, kept string
	drop                                 [][2]string
	numericID                            bool
}

var pruneTables = map[store.PruneKind]pruneTable{
	store.PruneRuns: {table: "runs", at: "finished_at", version: "version", run: "''",
		bytes: "length(coalesce(trace,''))+length(coalesce(prepare_result,''))+length(coalesce(mutation_result,''))+length(coalesce(pending_call,''))",
		drop:  [][2]string{{"trace", "NULL"}, {"prepare_result", "NULL"}, {"mutation_result", "NULL"}, {"pending_call", "NULL"}, {"pruned_at", "?"}},
		kept:  "pruned_at=0 AND finished_at>0"},
	store.PruneEvents: {table: "events", at: "updated_at", version: "0", run: "''", numericID: true,
		bytes: "length(payload)", drop: [][2]string{{"payload", "'null'"}, {"pruned_at", "?"}}, kept: "pruned_at=0"},
	store.PruneMutations: {table: "mutations", at: "updated_at", version: "0", run: "run_id",
		// The result stays: a write found applied hands it to the script
		// again (stepReplay), as its answer.
		bytes: "length(params)", drop: [][2]string{{"params", "'{}'"}, {"pruned_at", "?"}}, kept: "pruned_at=0"},
	// A delivery has no pruned_at: an empty request is a pruned one (a
	// settled delivery's request is forgotten when it settles).
	store.PruneDeliveries: {table: "deliveries", at: "received_at", version: "0", run: "''", numericID: true,
		bytes: "length(request)", drop: [][2]string{{"request", "''"}}, kept: "request<>''"},
}

// RowRewriter is what a backend's Runner implements when a row shrunk
// in place keeps the pages it took (SQLite: an UPDATE never merges an
// underfull page with its neighbours, so a pruned run whose trace filled
// a page would keep that page for good). PruneBodies then rewrites the
// pruned rows whole (a DELETE and an INSERT: the delete merges the pages);
// Columns lists a table's columns.
type RowRewriter interface {
	Columns(table string) ([]string, error)
}

func pruneTableOf(kind store.PruneKind) (pruneTable, error) {
	p, ok := pruneTables[kind]
	if !ok {
		return p, fmt.Errorf("prune: no such kind %q", kind)
	}
	return p, nil
}

// id converts a row's id for the statement: events and deliveries have
// numbers.
func (p pruneTable) id(s string) (any, error) {
	if !p.numericID {
		return s, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("prune %s: id %q is not a number", p.table, s)
	}
	return n, nil
}

func (t *Tx) PruneList(kind store.PruneKind, before int64, after store.PruneCursor, limit int) ([]store.PruneRow, error) {
	p, err := pruneTableOf(kind)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	var afterID any = after.ID
	if p.numericID {
		afterID = int64(0)
		if after.ID != "" {
			if afterID, err = p.id(after.ID); err != nil {
				return nil, err
			}
		}
	}
	q := `SELECT id, workflow, ` + p.version + `, ` + p.run + `, status, ` + p.at + `, ` + p.bytes + ` FROM ` + p.table +
		` WHERE ` + p.kept + ` AND ` + p.at + `<? AND (` + p.at + `>? OR (` + p.at + `=? AND id>?)) ORDER BY ` + p.at + `, id LIMIT ` + limitSQL(limit)
	rows, err := t.r.Query(q, before, after.At, after.At, afterID)
	if err != nil {
		return nil, fmt.Errorf("list %s to prune: %w", p.table, err)
	}
	defer rows.Close()
	var out []store.PruneRow
	for rows.Next() {
		var r store.PruneRow
		if p.numericID {
			var id int64
			if err := rows.Scan(&id, &r.Workflow, &r.Version, &r.Run, &r.Status, &r.At, &r.Bytes); err != nil {
				return nil, err
			}
			r.ID = strconv.FormatInt(id, 10)
		} else if err := rows.Scan(&r.ID, &r.Workflow, &r.Version, &r.Run, &r.Status, &r.At, &r.Bytes); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *Tx) PruneBodies(kind store.PruneKind, ids []string, now int64) (int, int64, error) {
	p, err := pruneTableOf(kind)
	if err != nil || len(ids) == 0 {
		return 0, 0, err
	}
	args := make([]any, 0, len(ids))
	for _, s := range ids {
		id, err := p.id(s)
		if err != nil {
			return 0, 0, err
		}
		args = append(args, id)
	}
	where := ` FROM ` + p.table + ` WHERE ` + p.kept + ` AND id IN (` + placeholders(len(ids)) + `)`
	var n int
	var bytes int64
	if err := t.r.QueryRow(`SELECT count(*), coalesce(sum(`+p.bytes+`),0)`+where, args...).Scan(&n, &bytes); err != nil {
		return 0, 0, fmt.Errorf("measure %s to prune: %w", p.table, err)
	}
	var sets []string
	var at []any // the prune's time, once for each "?" of drop
	for _, d := range p.drop {
		sets = append(sets, d[0]+"="+d[1])
		if d[1] == "?" {
			at = append(at, now)
		}
	}
	if rw, ok := t.r.(RowRewriter); ok {
		cols, err := rw.Columns(p.table)
		if err != nil {
			return 0, 0, err
		}
		exprs := slices.Clone(cols)
		for i, c := range cols {
			for _, d := range p.drop {
				if d[0] == c {
					exprs[i] = d[1]
				}
			}
		}
		// A copy of the pruned rows, then a DELETE and an INSERT, not INSERT
		// OR REPLACE: a REPLACE fires the table's insert triggers but not
		// its delete triggers, so the tallies kept by triggers (issue 44's
		// paged reads) would count each pruned row twice.
		for i, c := range cols {
			exprs[i] += ` AS ` + c
		}
		copyOf := `temp.keep_pruned_` + p.table
		steps := []struct {
			q    string
			args []any
		}{
			{`DROP TABLE IF EXISTS ` + copyOf, nil},
			{`CREATE TABLE ` + copyOf + ` AS SELECT ` + strings.Join(exprs, ", ") + where, append(at, args...)},
			{`DELETE FROM ` + p.table + ` WHERE id IN (SELECT id FROM ` + copyOf + `)`, nil},
			{`INSERT INTO ` + p.table + `(` + strings.Join(cols, ", ") + `) SELECT ` + strings.Join(cols, ", ") + ` FROM ` + copyOf, nil},
			{`DROP TABLE ` + copyOf, nil},
		}
		for _, st := range steps {
			if _, err := t.r.Exec(st.q, st.args...); err != nil {
				return 0, 0, fmt.Errorf("prune %s: %w", p.table, err)
			}
		}
		return n, bytes, nil
	}
	if _, err := t.r.Exec(`UPDATE `+p.table+` SET `+strings.Join(sets, ", ")+` WHERE `+p.kept+` AND id IN (`+placeholders(len(ids))+`)`, append(at, args...)...); err != nil {
		return 0, 0, fmt.Errorf("prune %s: %w", p.table, err)
	}
	return n, bytes, nil
}

func (t *Tx) RunIDsNewest(workflow string, version int64, status kt.Status, limit int) ([]string, error) {
	// The status written into the statement, as RunsOfVersion does.
	if !slices.Contains(kt.RunStatuses, status) {
		return nil, fmt.Errorf("list the newest runs of %s: %q is not a run status", workflow, status)
	}
	q, args := `SELECT id FROM runs WHERE workflow=? AND status='`+string(status)+`'`, []any{workflow}
	if version != 0 {
		q, args = q+` AND version=?`, append(args, version)
	}
	rows, err := t.r.Query(q+` ORDER BY created_at DESC, id DESC LIMIT `+limitSQL(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("list the newest runs of %s: %w", workflow, err)
	}
	return Strings(rows)
}
