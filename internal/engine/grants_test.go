package engine

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// What keep grant and keep deploy --grant offer is what the script's
// syntax tree names: a host written as a literal or a const (or a const
// that ends the host, followed by a path), a database written as one.
// A host computed at run time is not offered (the call is refused naming
// it), nor is a URL prefix that does not end its host.
func TestUsesNameTheHostsAndDatabasesTheScriptWrites(t *testing.T) {
	src := `const API = "https://api.example.com/v1/";
const HOOK = "http://127.0.0.1:8090/hook";
const DB = "reports";
export default Keep.workflow({ name: "w", topics: {},
  tasks: { t: { run: async (ctx) => {
    await ctx.http.request({ url: API + "orders" });
    await ctx.http.request({ url: ` + "`${API}items/${ctx.now()}`" + `, method: "PUT" });
    await ctx.http.request({ url: HOOK, method: "POST" });
    await ctx.http.request({ url: "https://api.example.com" + ctx.now() });
    await ctx.http.request({ url: "https://other.example/x", method: ctx.now() > 0 ? "GET" : "DELETE" });
    const opts = { url: "https://spread.example/" };
    await ctx.http.request({ ...opts, method: "POST" });
    await ctx.sql.query({ db: DB, sql: "SELECT 1" });
    await ctx.sql.exec({ db: "ledger", sql: "DELETE FROM t" });
    // ctx.http.request({ url: "https://comment.example/", method: "POST" })
  } } } })`
	got := strings.Join(Uses(src), ", ")
	want := "http.request GET api.example.com, http.request POST 127.0.0.1:8090, http.request PUT api.example.com, sql.exec ledger, sql.query reports"
	if got != want {
		t.Fatalf("Uses:\n got %s\nwant %s", got, want)
	}
	if r := strings.Join(Reaches(src), ", "); r != "http.request, sql.exec, sql.query" {
		t.Fatalf("Reaches: %s", r)
	}
	// What a new version no longer reaches is listed; what it still
	// calls, whatever the target, is not.
	gs := []kt.Grant{{Item: "http.request POST anywhere.example"}, {Item: "gmail.send"}, {Item: "sql.exec"}, {Item: "source:files"}, {Item: "*"}}
	if u := strings.Join(Unused(gs, src), ", "); u != "gmail.send, source:files" {
		t.Fatalf("Unused: %s", u)
	}
}
