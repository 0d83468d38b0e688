package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/apiclient"
	"github.com/keep-run/keep/internal/daemon"
)

// get reads a paged list as a program would: its rows, its Link header's
// cursors by rel, and X-Total-Count ("" when absent).
func (r *rig) get(path string) (int, []map[string]any, map[string]string, string) {
	r.t.Helper()
	req, _ := http.NewRequest("GET", r.srv.URL+path, nil)
	secret, err := daemon.ReadAPISecret(r.k.DataDir)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var rows []map[string]any
	_ = json.Unmarshal(raw, &rows)
	links := map[string]string{}
	for _, m := range regexp.MustCompile(`<([^>]*)>; rel="(\w+)"`).FindAllStringSubmatch(resp.Header.Get("Link"), -1) {
		links[m[2]] = m[1]
	}
	if resp.StatusCode != 200 {
		links["error"] = string(raw)
	}
	return resp.StatusCode, rows, links, resp.Header.Get("X-Total-Count")
}

// deploy deploys a script (its %SINK% the rig's sink), granted, and lets
// keep run until idle.
func (r *rig) deploy(script, file string) {
	r.t.Helper()
	src := strings.ReplaceAll(script, "%SINK%", r.sink.URL)
	if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": file, "grant": true}, nil); code != 200 {
		r.t.Fatalf("deploy %s: %d %v", file, code, obj)
	}
	r.settle()
}

// TestListsArePagedNewestFirst (issue 44): seven orders posted, each list
// answers a page at a time, newest first, and following its Link header's
// rel="next" reads every row once; rel="prev" goes back. Bad paging is
// refused with what to do.
func TestListsArePagedNewestFirst(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	for i := 1; i <= 7; i++ {
		body := map[string]any{"id": fmt.Sprint(i), "title": fmt.Sprintf("Order %d", i), "payload": map[string]any{"order": i}}
		if code, obj, _ := r.call("POST", "/api/v1/workflows/orders/topics/order.placed/events", body, nil); code != http.StatusCreated {
			t.Fatalf("post %d: %d %v", i, code, obj)
		}
		r.settle() // one run and one write each, in order
	}
	const base = "/api/v1/workflows/orders/"
	for _, c := range []struct {
		list, field string
		want        []string
	}{
		{"inputs", "title", []string{"Order 7", "Order 6", "Order 5", "Order 4", "Order 3", "Order 2", "Order 1"}},
		{"items", "title", []string{"Order 7", "Order 6", "Order 5", "Order 4", "Order 3", "Order 2", "Order 1"}},
		{"outputs", "target", nil},
		{"runs", "id", nil},
	} {
		code, all, _, total := r.get(base + c.list + "?limit=1000")
		if code != 200 || total != fmt.Sprint(len(all)) || len(all) < 7 {
			t.Fatalf("%s: %d, %d rows, X-Total-Count %q", c.list, code, len(all), total)
		}
		var want []string
		for _, row := range all {
			want = append(want, fmt.Sprint(row[c.field]))
		}
		if c.want != nil && strings.Join(want, ",") != strings.Join(c.want, ",") {
			t.Fatalf("%s newest first: %v, want %v", c.list, want, c.want)
		}
		// Three at a time, by the Link header alone.
		var got []string
		var pages []string
		next := base + c.list + "?limit=3"
		for next != "" && len(pages) < 10 {
			code, rows, links, total := r.get(next)
			if code != 200 || total != fmt.Sprint(len(all)) || len(rows) > 3 {
				t.Fatalf("%s page %s: %d, %d rows, total %q, %v", c.list, next, code, len(rows), total, links)
			}
			if len(pages) > 0 && links["prev"] == "" {
				t.Fatalf("%s page %d has no rel=prev", c.list, len(pages)+1)
			}
			for _, row := range rows {
				got = append(got, fmt.Sprint(row[c.field]))
			}
			pages = append(pages, next)
			next = links["next"]
			if next != "" && !strings.HasPrefix(next, base+c.list+"?") {
				t.Fatalf("%s: rel=next %q is not a path of the list", c.list, next)
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s followed page by page: %v, want %v", c.list, got, want)
		}
		// From the last page, rel=prev is the page before it.
		_, _, links, _ := r.get(pages[len(pages)-1])
		_, prev, _, _ := r.get(links["prev"])
		if len(prev) != 3 || fmt.Sprint(prev[0][c.field]) != want[3] {
			t.Fatalf("%s: the page before the last starts with %v, want %s", c.list, prev, want[3])
		}
	}
	// ?limit=0 is every row (what it meant before lists were paged, and what
	// clients written then still send), read in pages of two here: the same
	// rows in the same order as the one big page, with the total, no Link.
	*api.EveryPage = 2
	for _, list := range []string{"inputs", "items", "outputs", "runs"} {
		_, one, _, _ := r.get(base + list + "?limit=1000")
		code, all, links, total := r.get(base + list + "?limit=0")
		if code != 200 || len(links) != 0 || total != fmt.Sprint(len(one)) || fmt.Sprint(all) != fmt.Sprint(one) {
			t.Fatalf("%s?limit=0: %d %v total %q: %d rows, want the %d of ?limit=1000", list, code, links, total, len(all), len(one))
		}
	}
	// A search narrows the inputs and gives no total.
	code, rows, _, total := r.get(base + "inputs?q=" + url.QueryEscape("order 5"))
	if code != 200 || len(rows) != 1 || rows[0]["title"] != "Order 5" || total != "" {
		t.Fatalf("search: %d %v total %q", code, rows, total)
	}
	for bad, says := range map[string]string{"?limit=-1": "use a number from 1 to 1000", "?limit=1001": "use a number from 1 to 1000", "?cursor=zzz": "is not one keep gave", "?cursor=" + "bzEwLg": "is not one keep gave"} {
		code, _, links, _ := r.get(base + "inputs" + bad)
		if code != http.StatusBadRequest || !strings.Contains(links["error"], says) {
			t.Errorf("inputs%s: %d %s, want 400 saying %q", bad, code, links["error"], says)
		}
	}
	// keep's own client follows the cursors: every row, once.
	secret, err := daemon.ReadAPISecret(r.k.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	c := apiclient.Remote(strings.TrimPrefix(r.srv.URL, "http://"), secret, "")
	page, info, err := c.InputsPage(t.Context(), "orders", apiclient.ListOptions{Limit: 2})
	if err != nil || len(page) != 2 || page[0].Title != "Order 7" || info.Next == "" || info.Prev != "" || info.Total != 7 {
		t.Fatalf("the client's first page: %v %+v %v", page, info, err)
	}
	page, info, err = c.InputsPage(t.Context(), "orders", apiclient.ListOptions{Limit: 2, Cursor: info.Next})
	if err != nil || len(page) != 2 || page[0].Title != "Order 5" || info.Prev == "" {
		t.Fatalf("the client's second page: %v %+v %v", page, info, err)
	}
	ins, err := c.Inputs(t.Context(), "orders")
	if err != nil || len(ins) != 7 || ins[6].Title != "Order 1" {
		t.Fatalf("the client's every input: %d %v", len(ins), err)
	}
}

// TestMetricsCountReconciliationByWorkflow (issue 42 item 9): a write that
// timed out after the service applied it is resolved by asking the
// service (reconciliation); /metrics then counts that question, and its
// run and write counts carry the workflow. keep_reconcile_attempts_total
// stayed 0 here: it summed the ledger's background attempts that did not
// settle, and a resolving answer is neither.
func TestMetricsCountReconciliationByWorkflow(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	src := strings.ReplaceAll(`export default Keep.workflow({
  name: "hook",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } }) } }) } })`, "%SINK%", r.sink.URL)
	r.sink.Queue("timeout-after")
	r.deploy(src, "hook.js")
	if n := len(r.sink.Writes()); n != 1 || r.sink.Probes() != 1 {
		t.Fatalf("the sink has %d writes and %d probes, want 1 and 1", n, r.sink.Probes())
	}
	_, _, outs := r.call("GET", "/api/v1/workflows/hook/outputs", nil, nil)
	if len(outs) != 1 || outs[0].(map[string]any)["resolvedBy"] != "reconciliation" {
		t.Fatalf("outputs %v, want one resolved by reconciliation", outs)
	}
	resp, err := http.Get(r.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`keep_reconcile_attempts_total{answer="applied",workflow="hook"} 1`,
		`keep_mutations{state="applied",workflow="hook"} 1`,
		`keep_runs{status="committed",workflow="hook"} `,
		// The producer's run ended before the consumer's began.
		`keep_run_duration_seconds_count{handler_type="producer",status="committed",workflow="hook"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", regexp.MustCompile(`(?m)^keep_(runs|mutations|reconcile)\S*.*$`).FindAllString(string(body), -1))
	}
}
