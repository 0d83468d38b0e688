package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/testsink"
)

// Issue 42: the workflow drawn and its activity, read through the API as
// the page and the CLI read them, give the right numbers for a known
// store; the card of an uncertain write puts the safe choice first and
// says what each risks.
func TestTheWorkflowDrawnItsActivityAndTheSafeChoiceFirst(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.sink.Queue(testsink.TimeoutAfter) // the write applies; its answer never comes
	body := map[string]any{"script": strings.ReplaceAll(consumerWorkflow, "%SINK%", r.sink.URL), "file": "orders.js", "grant": true}
	if code, obj, _ := r.call("POST", "/api/v1/workflows", body, nil); code != 200 {
		t.Fatalf("deploy: %d %v", code, obj)
	}
	r.settle()
	blocked := r.openRun("orders")

	// A known past: hours before this one, written as keep writes them.
	hour := time.Now().UTC().Truncate(time.Hour).UnixMilli()
	const h = int64(time.Hour / time.Millisecond)
	if err := r.k.Store.Update(context.Background(), func(tx store.Tx) error {
		for i, at := range []int64{hour - 5*h + 60000, hour - 5*h + 120000} {
			if err := tx.InputPut(kt.Input{ID: fmt.Sprintf("past-%d", i), Workflow: "orders", Key: fmt.Sprintf("system:schedule:past-%d", i), Kind: kt.KindInput,
				Source: "system", Type: "schedule", ExternalID: fmt.Sprint(i), Title: "past", CreatedAt: at, UpdatedAt: at}); err != nil {
				return err
			}
		}
		if err := tx.RunPut(kt.Run{ID: "past-ok", Workflow: "orders", Version: blocked.Version, Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseCommitted,
			Status: kt.StatusCommitted, CreatedAt: hour - 5*h + 180000, UpdatedAt: hour - 5*h + 181000, FinishedAt: hour - 5*h + 181000}); err != nil {
			return err
		}
		if err := tx.MutationPut(kt.Mutation{ID: "past-w", Workflow: "orders", RunID: "past-ok", Handler: "c", Tool: "http", Method: "request", IdentityKey: "past-w",
			IdempotencyKey: "past-w", Status: kt.MutationApplied, CreatedAt: hour - 5*h + 180500, UpdatedAt: hour - 5*h + 180600}); err != nil {
			return err
		}
		if err := tx.RunPut(kt.Run{ID: "past-failed", Workflow: "orders", Version: blocked.Version, Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhasePreparing,
			Status: kt.StatusFailedLogic, CreatedAt: hour - 3*h + 1000, UpdatedAt: hour - 3*h + 2000}); err != nil {
			return err
		}
		// Blocked for 30 minutes seven hours ago, until a person skipped it.
		if err := tx.RunPut(kt.Run{ID: "past-blocked", Workflow: "orders", Version: blocked.Version, Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating,
			Status: kt.StatusSkipped, CreatedAt: hour - 7*h + 10*60000, UpdatedAt: hour - 7*h + 40*60000, FinishedAt: hour - 7*h + 40*60000}); err != nil {
			return err
		}
		// The wait as keep records it when a person acts (engine.noteWait).
		if err := tx.BlockedSpanAdd("orders", store.BlockedSpan{RunID: "past-blocked", Handler: "c", From: hour - 7*h + 10*60000, To: hour - 7*h + 40*60000}); err != nil {
			return err
		}
		return tx.DecisionAdd(kt.Decision{Workflow: "orders", RunID: "past-blocked", Action: "skip", By: "alice", Detail: "skipped", At: hour - 7*h + 40*60000})
	}); err != nil {
		t.Fatal(err)
	}
	// past-failed is still open in the store: it is an old failure, not the
	// block (RunOpen is the oldest open run); close it as a retry would.
	if err := r.k.Store.Update(context.Background(), func(tx store.Tx) error {
		run, err := tx.RunGet("past-failed")
		if err != nil {
			return err
		}
		run.Status = kt.StatusRetried
		return tx.RunPut(run)
	}); err != nil {
		t.Fatal(err)
	}

	code, act, _ := r.call("GET", "/api/v1/workflows/orders/activity?hours=24", nil, nil)
	if code != 200 {
		t.Fatalf("activity: %d %v", code, act)
	}
	byStart := map[string]map[string]any{}
	total := map[string]float64{}
	hours := act["hours"].([]any)
	for _, x := range hours {
		m := x.(map[string]any)
		byStart[m["start"].(string)] = m
		for _, k := range []string{"inputs", "writes", "failures", "blockedMinutes"} {
			total[k] += m[k].(float64)
		}
	}
	at := func(ms int64) map[string]any { return byStart[time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)] }
	if len(hours) != 24 {
		t.Fatalf("%d hours, want 24", len(hours))
	}
	if m := at(hour - 5*h); m == nil || m["inputs"] != 2.0 || m["writes"] != 1.0 || m["failures"] != 0.0 {
		t.Fatalf("five hours ago: %v, want 2 inputs and 1 write", m)
	}
	if m := at(hour - 3*h); m == nil || m["failures"] != 1.0 || m["inputs"] != 0.0 {
		t.Fatalf("three hours ago: %v, want 1 failure", m)
	}
	if m := at(hour - 7*h); m == nil || m["blockedMinutes"] != 30.0 {
		t.Fatalf("seven hours ago: %v, want 30 minutes blocked", m)
	}
	// The live run: one input now, its write uncertain (not applied).
	if total["inputs"] != 3 || total["writes"] != 1 || total["failures"] != 1 {
		t.Fatalf("totals %v, want 3 inputs, 1 write, 1 failure", total)
	}
	if code, obj, _ := r.call("GET", "/api/v1/workflows/orders/activity?hours=0", nil, nil); code != 400 || !strings.Contains(fmt.Sprint(obj), "168 for a week") {
		t.Fatalf("hours=0: %d %v, want a refusal saying what to use", code, obj)
	}

	code, g, _ := r.call("GET", "/api/v1/workflows/orders/graph", nil, nil)
	if code != 200 {
		t.Fatalf("graph: %d %v", code, g)
	}
	nodes := map[string]map[string]any{}
	for _, x := range g["nodes"].([]any) {
		m := x.(map[string]any)
		nodes[m["id"].(string)] = m
	}
	want := map[string][4]float64{ // pending, reserved, blocked, done today
		"producer:p":             {0, 0, 0, 1},
		"topic:order":            {0, 1, 0, 0},
		"consumer:c":             {0, 1, 1, 0},
		"connector:http.request": {0, 0, 1, 0},
	}
	if hour-5*h >= time.Now().UTC().Truncate(24*time.Hour).UnixMilli() { // the past run committed today
		want["consumer:c"] = [4]float64{0, 1, 1, 1}
		want["topic:order"] = [4]float64{0, 1, 0, 1}
		want["connector:http.request"] = [4]float64{0, 0, 1, 1}
	}
	for id, w := range want {
		n := nodes[id]
		got := [4]float64{}
		if n != nil {
			got = [4]float64{n["pending"].(float64), n["reserved"].(float64), n["blocked"].(float64), n["doneToday"].(float64)}
		}
		if got != w {
			t.Errorf("node %s: pending, reserved, blocked, done today = %v, want %v (%v)", id, got, w, n)
		}
	}
	if n := nodes["consumer:c"]; n == nil || n["blockedRun"] != blocked.ID {
		t.Errorf("the blocked consumer links to run %v, want %s", n["blockedRun"], blocked.ID)
	}
	edges := map[string]bool{}
	for _, x := range g["edges"].([]any) {
		m := x.(map[string]any)
		e := m["from"].(string) + " → " + m["to"].(string)
		if k, _ := m["kind"].(string); k != "" {
			e += " (" + k + ")"
		}
		edges[e] = true
	}
	// The consumer's call is in its mutate: its write.
	for _, e := range []string{"producer:p → topic:order", "topic:order → consumer:c", "consumer:c → connector:http.request (write)"} {
		if !edges[e] {
			t.Errorf("no edge %s in %v", e, edges)
		}
	}
	if len(edges) != 3 {
		t.Errorf("edges %v, want 3", edges)
	}

	// The card: the write may have applied. Skipping risks a missing
	// write; sending again (It didn't happen, Reprocess) risks it twice.
	_, _, cards := r.call("GET", "/api/v1/workflows/orders/blocked", nil, nil)
	if len(cards) != 1 {
		t.Fatalf("cards: %v", cards)
	}
	var order, risks []string
	for _, x := range cards[0].(map[string]any)["choices"].([]any) {
		m := x.(map[string]any)
		order, risks = append(order, m["action"].(string)), append(risks, m["risk"].(string))
	}
	if strings.Join(order, ",") != "skip,didnt-happen,reprocess" || strings.Join(risks, ",") != "missing,twice,twice" {
		t.Fatalf("choices %v risking %v, want skip (missing) before didnt-happen and reprocess (twice)", order, risks)
	}
	if acts := fmt.Sprint(cards[0].(map[string]any)["actions"]); acts != "[skip didnt-happen reprocess]" {
		t.Fatalf("actions %s, want the choices' order", acts)
	}

	// The page draws it: the graph with the blocked node linked to its
	// card, the charts, and the card's safe choice first.
	resp, err := http.Get(r.srv.URL + "/w/orders")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	html := string(page)
	for _, s := range []string{`data-node="consumer:c" data-pending="0" data-reserved="1" data-blocked="1"`, `href="/w/orders#card-` + blocked.ID + `"`, `id="card-` + blocked.ID + `"`,
		`data-series="inputs" data-total="3"`, `data-series="blocked" data-total="`} {
		if !strings.Contains(html, s) {
			t.Errorf("the workflow's page lacks %s", s)
		}
	}
	first := strings.Index(html, `class="choice risk-`)
	if first < 0 || !strings.HasPrefix(html[first:], `class="choice risk-missing"`) || !strings.Contains(html[first:first+600], `class="primary risk-missing" name="do" value="skip"`) {
		t.Errorf("the card's first choice is not Skip, highlighted: %.600s", html[max(first, 0):])
	}
	if i := strings.Index(html, `value="reprocess">Reprocess the item</button>`); i < 0 || !strings.Contains(html[i:i+300], "happen twice") {
		t.Errorf("Reprocess's line does not say it may write twice")
	}
}
