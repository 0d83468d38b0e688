package sqldb

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// Stored state checked (issue 44, docs/design.md "Stored state checked"):
// each row keep executes or trusts is written with the digest of the
// fields that matter (kt.StoredDigest) and checked against it whenever it
// is read; a mismatch is kt.ClassDamaged, naming the row and what to do,
// and the row is left as it is.

func versionDigest(v kt.Version) string {
	return kt.StoredDigest("version", v.Workflow, strconv.FormatInt(v.ID, 10), v.File, v.Script, v.Test)
}

func checkVersion(v kt.Version, digest string) error {
	return kt.CheckDigest(digest, kt.Damage{
		What:  fmt.Sprintf("the stored script of workflow %s version %s (%s)", v.Workflow, v.Label(), v.File),
		Table: "versions", Row: fmt.Sprintf("workflow=%s id=%d", v.Workflow, v.ID),
		Restore: kt.RestoreScript(v.File),
	}, "version", v.Workflow, strconv.FormatInt(v.ID, 10), v.File, v.Script, v.Test)
}

func grantDigest(workflow, item string) string {
	return kt.StoredDigest("grant", workflow, item)
}

func checkGrant(g kt.Grant, digest string) error {
	return kt.CheckDigest(digest, kt.Damage{
		What:  fmt.Sprintf("the grant '%s' of workflow %s", g.Item, g.Workflow),
		Table: "grants", Row: fmt.Sprintf("workflow=%s item='%s'", g.Workflow, g.Item),
		Restore: kt.RestoreGrant(g.Workflow, g.Item),
	}, "grant", g.Workflow, g.Item)
}

func workflowDigest(name, filesRoot, policy string) string {
	return kt.StoredDigest("workflow", name, filesRoot, policy)
}

func checkWorkflow(w kt.Workflow, digest string) error {
	return kt.CheckDigest(digest, kt.Damage{
		What:  fmt.Sprintf("the recorded files root and policy of workflow %s", w.Name),
		Table: "workflows", Row: "name=" + w.Name,
		Restore: "deploy the workflow again to record them: keep deploy FILE (its script's file)",
	}, "workflow", w.Name, w.FilesRoot, w.Policy)
}

func secretDigest(name, hosts string) string {
	return kt.StoredDigest("secret", name, hosts)
}

func checkSecret(name, hosts, digest string) error {
	return kt.CheckDigest(digest, kt.Damage{
		What:  fmt.Sprintf("the hosts the secret %s may be sent to", name),
		Table: "secrets", Row: "name=" + name,
		Restore: fmt.Sprintf("remove it and set it again with its hosts: keep secret rm %s, then keep secret set %s --host HOST", name, name),
	}, "secret", name, hosts)
}

func repairDigest(r kt.Repair) string {
	return kt.StoredDigest("repair", r.ID, r.Workflow, r.Script)
}

func checkRepair(r kt.Repair, digest string) error {
	return kt.CheckDigest(digest, kt.Damage{
		What:  fmt.Sprintf("the script the Maintainer proposed in repair %s of workflow %s", r.ID, r.Workflow),
		Table: "repairs", Row: "id=" + r.ID,
	}, "repair", r.ID, r.Workflow, r.Script)
}

// AfterMigration runs what a migration needs of Go after its SQL, in the
// same transaction: the stored-digests migration gives every existing row
// its digest (SQLite has no SHA-256 in SQL). Both backends call it with
// each migration's file name.
func AfterMigration(name string, r Runner) error {
	if !strings.HasSuffix(name, "_stored_digests.sql") {
		return nil
	}
	if err := fillDigests(r, `SELECT workflow, id, file, script, test FROM versions`, func(rows Rows) (string, []any, error) {
		var v kt.Version
		if err := rows.Scan(&v.Workflow, &v.ID, &v.File, &v.Script, &v.Test); err != nil {
			return "", nil, err
		}
		return versionDigest(v), []any{v.Workflow, v.ID}, nil
	}, `UPDATE versions SET digest=? WHERE workflow=? AND id=?`); err != nil {
		return err
	}
	if err := fillDigests(r, `SELECT workflow, item FROM grants`, func(rows Rows) (string, []any, error) {
		var wf, item string
		if err := rows.Scan(&wf, &item); err != nil {
			return "", nil, err
		}
		return grantDigest(wf, item), []any{wf, item}, nil
	}, `UPDATE grants SET digest=? WHERE workflow=? AND item=?`); err != nil {
		return err
	}
	if err := fillDigests(r, `SELECT name, files_root, policy FROM workflows`, func(rows Rows) (string, []any, error) {
		var name, root, policy string
		if err := rows.Scan(&name, &root, &policy); err != nil {
			return "", nil, err
		}
		return workflowDigest(name, root, policy), []any{name}, nil
	}, `UPDATE workflows SET digest=? WHERE name=?`); err != nil {
		return err
	}
	if err := fillDigests(r, `SELECT name, hosts FROM secrets`, func(rows Rows) (string, []any, error) {
		var name, hosts string
		if err := rows.Scan(&name, &hosts); err != nil {
			return "", nil, err
		}
		return secretDigest(name, hosts), []any{name}, nil
	}, `UPDATE secrets SET digest=? WHERE name=?`); err != nil {
		return err
	}
	return fillDigests(r, `SELECT id, workflow, script FROM repairs`, func(rows Rows) (string, []any, error) {
		var x kt.Repair
		if err := rows.Scan(&x.ID, &x.Workflow, &x.Script); err != nil {
			return "", nil, err
		}
		return repairDigest(x), []any{x.ID}, nil
	}, `UPDATE repairs SET digest=? WHERE id=?`)
}

// fillDigests reads every row of sel, then writes each its digest.
func fillDigests(r Runner, sel string, scan func(Rows) (string, []any, error), upd string) error {
	rows, err := r.Query(sel)
	if err != nil {
		return fmt.Errorf("stored digests: %w", err)
	}
	var todo [][]any
	for rows.Next() {
		d, key, err := scan(rows)
		if err != nil {
			rows.Close()
			return fmt.Errorf("stored digests: %w", err)
		}
		todo = append(todo, append([]any{d}, key...))
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return fmt.Errorf("stored digests: %w", err)
	}
	rows.Close()
	for _, args := range todo {
		if _, err := r.Exec(upd, args...); err != nil {
			return fmt.Errorf("stored digests: %w", err)
		}
	}
	return nil
}

// SQLTx runs a migration's statements on a database/sql transaction.
func SQLTx(tx *sql.Tx) Runner { return sqlTx{tx} }

type sqlTx struct{ tx *sql.Tx }

func (s sqlTx) Exec(q string, args ...any) (sql.Result, error) { return s.tx.Exec(q, args...) }
func (s sqlTx) Query(q string, args ...any) (Rows, error)      { return s.tx.Query(q, args...) }
func (s sqlTx) QueryRow(q string, args ...any) Row             { return s.tx.QueryRow(q, args...) }
