package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// Issue 44: every checked row of the SQLite file (a version's script, a
// grant, a workflow's files root and policy, a secret's hosts, a repair's
// script), changed by a byte beside keep with its digest kept, is read as
// damaged storage naming its table, and is read as before once restored.
func TestEveryCheckedRowChangedBesideKeepIsDamagedStorage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.WorkflowPut(kt.Workflow{Name: "wf", ActiveVersion: 1, FilesRoot: "/srv/files", Policy: `{"TransientRetries":2}`}); err != nil {
			return err
		}
		if err := tx.VersionInsert(&kt.Version{Workflow: "wf", Major: 1, Script: "export default 1", File: "wf.js"}); err != nil {
			return err
		}
		if err := tx.GrantAdd(kt.Grant{Workflow: "wf", Item: "http.request POST api.example.com"}); err != nil {
			return err
		}
		if err := tx.SecretPut(kt.Secret{Name: "key", Sealed: []byte("x"), Hosts: []string{"api.example.com"}}); err != nil {
			return err
		}
		return tx.RepairPut(kt.Repair{ID: "r1", Workflow: "wf", Status: "held", Script: "export default 2"})
	}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		table, column, key, value, flipped, restore string
		read                                        func(tx store.Tx) error
	}{
		{"versions", "script", "workflow='wf'", "export default 1", "export default 0", "keep deploy wf.js", func(tx store.Tx) error { _, err := tx.VersionGet("wf", 1); return err }},
		{"grants", "item", "workflow='wf'", "http.request POST api.example.com", "http.request POST api.exampme.com", "keep grant wf --revoke 'http.request POST api.exampme.com'", func(tx store.Tx) error { _, err := tx.GrantList("wf"); return err }},
		{"workflows", "files_root", "name='wf'", "/srv/files", "/srv/filer", "keep deploy", func(tx store.Tx) error { _, err := tx.WorkflowGet("wf"); return err }},
		{"workflows", "policy", "name='wf'", `{"TransientRetries":2}`, `{"TransientRetries":3}`, "keep deploy", func(tx store.Tx) error { _, err := tx.WorkflowGet("wf"); return err }},
		{"secrets", "hosts", "name='key'", `["api.example.com"]`, `["api.exampme.com"]`, "keep secret rm key", func(tx store.Tx) error { _, err := tx.SecretGet("key"); return err }},
		{"repairs", "script", "id='r1'", "export default 2", "export default 3", "restore keep.db from a backup", func(tx store.Tx) error { _, err := tx.RepairList("wf"); return err }},
	} {
		set := func(v string) {
			t.Helper()
			if _, err := db.Exec(`UPDATE `+c.table+` SET `+c.column+`=? WHERE `+c.key, v); err != nil {
				t.Fatal(err)
			}
		}
		set(c.flipped)
		err := s.View(ctx, c.read)
		if !kt.IsDamaged(err) || !strings.Contains(err.Error(), "damaged storage: ") || !strings.Contains(err.Error(), "(table "+c.table+", row ") || !strings.Contains(err.Error(), c.restore) {
			t.Errorf("%s.%s changed: %v", c.table, c.column, err)
		}
		set(c.value)
		if err := s.View(ctx, c.read); err != nil {
			t.Errorf("%s.%s restored: %v", c.table, c.column, err)
		}
	}
}
