package cli

import (
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
	_ "modernc.org/sqlite"
)

// TestPlantedSecretsNeverShow plants credentials in Authorization and Cookie
// headers (of the call and of its reconcile probe) and looks for them in
// everything keep writes: CLI output in every format, logs, errors, traces,
// and every column of the database except the ledger's params (the call as
// sent, kept so that reconcile can repeat the probe).
func TestPlantedSecretsNeverShow(t *testing.T) {
	t.Parallel()
	headers := fmt.Sprintf(`{ Authorization: "Bearer %s", Cookie: "session=%s", "X-Api-Key": "%s" }`, secret, secret, secret)
	plantAndLook(t, headers, headers, "", "", func(h http.Header) string { return h.Get("Authorization") })
}

// The carriers an attack found printed (issue 11 #7): Authorization only in
// the reconcile probe's headers, credentials in the URL (user:pw@, api_key,
// access_token, password) and the headers X-Auth-Token, Api-Key,
// PRIVATE-TOKEN and X-Goog-Api-Key.
func TestPlantedSecretsInOtherCarriersNeverShow(t *testing.T) {
	t.Parallel()
	callHeaders := fmt.Sprintf(`{ "X-Auth-Token": "%s", "Api-Key": "%s", "PRIVATE-TOKEN": "%s", "X-Goog-Api-Key": "%s" }`, secret, secret, secret, secret)
	probeHeaders := fmt.Sprintf(`{ Authorization: "Bearer %s" }`, secret)
	plantAndLook(t, callHeaders, probeHeaders, "u:"+secret+"@", "?api_key="+secret+"&access_token="+secret+"&password="+secret,
		func(h http.Header) string { return h.Get("X-Auth-Token") })
}

// A credential written literally under a header of any name (issue 38,
// low: only known names were masked): a name that holds sig, session or
// credential, a value after an authentication scheme no rule knew
// (Digest), a random-looking value under a name that says nothing.
func TestPlantedSecretsInAnyHeaderNeverShow(t *testing.T) {
	t.Parallel()
	callHeaders := fmt.Sprintf(`{ "X-Custom-Sig": "%s", "X-Partner": "Digest %s", "X-Shop-Session": "%s", "X-Anything": "%s", Accept: "application/json" }`, secret, secret, secret, secret)
	probeHeaders := fmt.Sprintf(`{ "X-Probe-Credential": "%s", "X-Other": "%s" }`, secret, secret)
	plantAndLook(t, callHeaders, probeHeaders, "", "", func(h http.Header) string { return h.Get("X-Custom-Sig") + h.Get("X-Anything") })
}

const secret = "planted-secret-7f3a9c"

// plantAndLook runs a workflow whose write carries the planted secret in the
// given places, drives it through a 401 and an unknown outcome, and looks
// for the secret everywhere keep writes.
func plantAndLook(t *testing.T, headers, probeHeaders, userinfo, query string, received func(http.Header) string) {
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.Status(401), testsink.TimeoutAfter)
	sink.QueueProbe(500, 500, 500, 500)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[policy]\nreconcile_attempts = 1\nreconcile_backoff = \"10ms\"\n"+sink.AllowTOML()), 0o644)
	withCreds := strings.Replace(sink.URL, "://", "://"+userinfo, 1)
	src := `export default Keep.workflow({ name: "sec", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    for (const id of ["a", "b"]) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id, title: "Job " + id })
      await ctx.publish("job", { messageId: id, inputId, payload: {} })
    } } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { id: e.messageId } } },
    async mutate(ctx, p) {
      ctx.log("calling with headers", Object.keys(` + headers + `).length)
      await ctx.http.request({ method: "POST", url: "` + withCreds + `/write/" + p.data.id + "` + query + `", json: {}, timeoutMs: 200, headers: ` + headers + `,
        reconcile: { url: "` + withCreds + `/writes/{idempotencyKey}` + query + `", headers: ` + probeHeaders + ` } })
    } }) } })`
	os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644)
	var seen strings.Builder
	add := func(r result) { seen.WriteString(r.out); seen.WriteString(r.err) }
	r := keep(t, "run", "--data", data, "--config", filepath.Join(dir, "keep.toml"), filepath.Join(dir, "wf.js"))
	add(r)
	if r.code != 3 || !strings.Contains(r.out, "401") {
		t.Fatalf("exit %d: %s %s", r.code, r.out, r.err)
	}
	// A person fixes access and tries again; this time the outcome is unknown.
	var blocked string
	if i := strings.Index(r.out, "keep resolve "); i >= 0 {
		blocked = strings.Fields(r.out[i:])[2]
	}
	add(keep(t, "resolve", "--data", data, "--config", filepath.Join(dir, "keep.toml"), blocked, "--try-again"))
	r = keep(t, "run", "--data", data, "--config", filepath.Join(dir, "keep.toml"), filepath.Join(dir, "wf.js"))
	add(r)
	if r.code != 3 || !strings.Contains(r.out, "outcome unknown") {
		t.Fatalf("exit %d: %s %s", r.code, r.out, r.err)
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"inputs", "sec"}, {"inputs", "sec", "--json"}, {"outputs", "sec"}, {"outputs", "sec", "--json"},
		{"runs", "sec"}, {"runs", "sec", "--json"}} {
		add(keep(t, append(args, "--data", data)...))
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, "keep.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id FROM runs`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		add(keep(t, "show", "run", "--data", data, id))
		add(keep(t, "show", "run", "--data", data, id, "--json"))
	}
	if strings.Contains(seen.String(), secret) {
		i := strings.Index(seen.String(), secret)
		t.Fatalf("the planted secret appears in keep's output: …%s…", seen.String()[max(0, i-200):i+30])
	}
	if !strings.Contains(seen.String(), "[redacted]") {
		t.Fatal("no redaction marker anywhere: the test did not see the calls")
	}
	// Every column of every table, except the ledger's params.
	tables, _ := db.Query(`SELECT name FROM sqlite_master WHERE type='table'`)
	var names []string
	for tables.Next() {
		var n string
		tables.Scan(&n)
		names = append(names, n)
	}
	tables.Close()
	for _, table := range names {
		cols, _ := db.Query(`SELECT name FROM pragma_table_info(?)`, table)
		var cn []string
		for cols.Next() {
			var c string
			cols.Scan(&c)
			// The ledger keeps the call as sent (reconcile repeats the probe);
			// the script is the user's own text.
			if !(table == "mutations" && c == "params") && !(table == "versions" && c == "script") {
				cn = append(cn, c)
			}
		}
		cols.Close()
		for _, c := range cn {
			var n int
			if err := db.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %q WHERE CAST(%q AS TEXT) LIKE ?`, table, c), "%"+secret+"%").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				t.Errorf("the planted secret is stored in %s.%s", table, c)
			}
		}
	}
	// The sink did receive the credential: the call itself is not redacted.
	if len(sink.Headers) == 0 || !strings.Contains(received(sink.Headers[0]), secret) {
		t.Fatal("the real call lost its Authorization header")
	}
}
