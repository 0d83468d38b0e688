package cli

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

// Issue 44: a byte of the stored script flipped in keep.db (the digest
// written with it kept) is damaged storage on keep status, with the
// restore step; the restore step (keep deploy FILE) works.
func TestStatusSaysAFlippedStoredScriptIsDamagedStorage(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	file := filepath.Join(dir, "workflow.js")
	if r := keep(t, "deploy", "--grant", "--data", data, file); r.code != 0 {
		t.Fatalf("deploy: %d %s", r.code, r.err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, "keep.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var script string
	if err := db.QueryRow(`SELECT script FROM versions WHERE workflow='quickstart-orders'`).Scan(&script); err != nil {
		t.Fatal(err)
	}
	b := []byte(script)
	b[strings.Index(script, `dir: "incoming"`)+len(`dir: "`)] ^= 0x01 // "incoming" → "hncoming": still a valid script
	if _, err := db.Exec(`UPDATE versions SET script=? WHERE workflow='quickstart-orders'`, string(b)); err != nil {
		t.Fatal(err)
	}
	r := keep(t, "status", "--data", data)
	if r.code != 0 || !strings.Contains(r.out, "quickstart-orders") || !strings.Contains(r.out, "damaged") ||
		!strings.Contains(r.out, "damaged storage: the stored script of workflow quickstart-orders version 1.0") ||
		!strings.Contains(r.out, "keep deploy "+file) || !strings.Contains(r.out, "restore keep.db from a backup") || strings.Contains(r.out, "bug in the script") {
		t.Fatalf("status: %d\n%s\n%s", r.code, r.out, r.err)
	}
	if r := keep(t, "deploy", "--grant", "--data", data, file); r.code != 0 {
		t.Fatalf("the restore step, deploy: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "status", "--data", data); r.code != 0 || strings.Contains(r.out, "damaged") {
		t.Fatalf("status after the redeploy: %d\n%s\n%s", r.code, r.out, r.err)
	}
}
