package browser

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

// Issue 42, at a glance: a person opens the list, a workflow and a run,
// and sees each drawn with the right numbers for a store whose state is
// known — one input registered, its consumer's write sent and its answer
// lost (the run blocked on it), a webhook's deliveries of today, an event
// posted to the API, a past wait for a person of 1 h 45 min — and the
// card's safe choice first. The pictures are kept in docs/images
// (docs/design.md shows them).
var updatePictures = flag.Bool("update", false, "renew the screenshots in docs/images")

func TestPersonSeesTheWorkflowAtAGlance(t *testing.T) {
	exe := chromium(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.TimeoutAfter) // the write applies; its answer never comes
	f := filepath.Join(dir, "glance.js")
	os.WriteFile(f, []byte(glanceFlow(sink.URL)), 0o644)
	if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", data, f).CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v %s", err, out)
	}
	hour, last := seedGlance(t, data)
	p := servePerson(t, exe, dir, data, sink.Host())
	// Through keep serve (the CLI alone would also run the workflow).
	if out, err := exec.Command(keepBin, "publish", "glance", "refund", "--data", data, "--id", "r-7", "--title", "Refund 7", "--json", `{"id":7}`).CombinedOutput(); err != nil {
		t.Fatalf("keep publish: %v %s", err, out)
	}
	ctx := p.ctx
	attr := func(sel, name string) string {
		// An attribute, or textContent (SVG has no innerText).
		s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("(function(){var e=document.querySelector(%q); if (!e) return ''; var n=%q; return n == 'textContent' ? e.textContent : (e.getAttribute(n) || '')})()", sel, name)))
		return s
	}
	// picture keeps what sel shows in docs/images.
	picture := func(sel, name string) {
		t.Helper()
		buf, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("screenshot of %s: %v", sel, err)
		}
		// The pictures in docs/images are renewed only when asked
		// (go test ./test/browser -run Glance -update): a test run
		// leaves the checkout as it found it.
		where := filepath.Join(dir, name+".png")
		if *updatePictures {
			where = filepath.Join("..", "..", "docs", "images", name+".png")
		}
		if err := os.WriteFile(where, buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The workflow drawn: the producer ran once, its event is reserved by
	// the consumer's run, blocked on its write to http.request.
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/glance"))
	p.waitFor("the blocked consumer drawn", func() bool {
		_, _ = chromedp.Run(ctx, chromedp.Reload())
		return attr(`g[data-node="consumer:c"]`, "data-blocked") == "1"
	})
	for _, c := range []struct{ node, pending, reserved, blocked, done string }{
		{"producer:p", "0", "0", "0", "1"},
		{"topic:order", "0", "1", "0", "0"},
		{"topic:refund", "1", "0", "0", "0"},
		{"consumer:c", "1", "1", "1", "0"}, // its topics': order's reserved, refund's pending
		{"connector:http.request", "0", "0", "1", "0"},
	} {
		sel := `g[data-node="` + c.node + `"]`
		got := [4]string{attr(sel, "data-pending"), attr(sel, "data-reserved"), attr(sel, "data-blocked"), attr(sel, "data-done")}
		if got != [4]string{c.pending, c.reserved, c.blocked, c.done} {
			t.Errorf("node %s: pending, reserved, blocked, done today %v, want %v", c.node, got, [4]string{c.pending, c.reserved, c.blocked, c.done})
		}
	}
	// What a person reads in the box, not only its colour.
	if txt := attr(`g[data-node="consumer:c"]`, "textContent"); !strings.Contains(txt, "BLOCKED") || !strings.Contains(txt, "1 reserved") {
		t.Errorf("the blocked consumer reads %q", txt)
	}
	// The webhook's deliveries of today and the API's post, in numbers and words.
	wh := `g[data-node="webhook:gh"]`
	if got := [5]string{attr(wh, "data-received"), attr(wh, "data-held"), attr(wh, "data-refused"), attr(wh, "data-failed"), attr(wh, "data-last")}; got != [5]string{"4", "1", "1", "0", last} {
		t.Errorf("webhook gh: received, held, refused, failed, last %v, want [4 1 1 0 %s]", got, last)
	}
	if txt := attr(wh, "textContent"); !strings.Contains(txt, "4 received today · 1 held") || !strings.Contains(txt, "1 refused · 0 failed today") {
		t.Errorf("the webhook's box reads %q", txt)
	}
	if got, txt := attr(`g[data-node="api:refund"]`, "data-received"), attr(`g[data-node="api:refund"]`, "textContent"); got != "1" || !strings.Contains(txt, "1 posted today") {
		t.Errorf("the event API's box for refund: %s posted, reads %q; want 1", got, txt)
	}
	// Arrows: the work (producer, webhook and API → topics → consumer), the
	// consumer's write solid, the webhook handler's read dashed.
	edges := func(sel string) int {
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
		return n
	}
	if n := edges(`svg.graph > path.edge`); n != 8 {
		t.Errorf("%d arrows drawn, want 8 (p → order, gh → push, the API → refund; order, push, refund → c; c writes, gh reads http.request)", n)
	}
	if edges(`svg.graph > path.edge.write[data-from="consumer:c"][data-to="connector:http.request"]`) != 1 || edges(`svg.graph > path.edge.read[data-from="webhook:gh"][data-to="connector:http.request"]`) != 1 {
		t.Errorf("the consumer's write is not drawn as a write, or the webhook's read as a read")
	}
	if dash := attr(`svg.graph > path.edge.read`, "data-kind"); dash != "read" || !strings.Contains(attr(`svg.graph g.legend`, "textContent"), "reads") {
		t.Errorf("the read arrow (%q) or the legend is missing", dash)
	}
	// Its box opens its card. The page swaps its content when the run
	// changes (a live update), so wait until the card and the box agree
	// before reading them: a node read during a swap reads as nothing.
	p.waitFor("the blocked run's card beside its box", func() bool {
		id := attr(`.card`, "data-run")
		return id != "" && attr(`svg.graph a:has(g[data-node="consumer:c"])`, "href") == "/w/glance#card-"+id && attr(`.card form.choice button`, "value") != ""
	})
	runID := attr(`.card`, "data-run")
	if href := attr(`svg.graph a:has(g[data-node="consumer:c"])`, "href"); runID == "" || href != "/w/glance#card-"+runID {
		t.Errorf("the blocked box links to %q, want the card of run %q", href, runID)
	}
	// Activity: two inputs registered in the last day (the producer's, the
	// API's), no write applied.
	if got := attr(`.activity-day g[data-series="inputs"]`, "data-total"); got != "2" {
		t.Errorf("the day's chart counts %s inputs, want 2", got)
	}
	if got := attr(`.activity-day g[data-series="writes"]`, "data-total"); got != "0" {
		t.Errorf("the day's chart counts %s writes applied, want 0 (the write's outcome is unknown)", got)
	}
	if got := attr(`.activity-week g[data-series="inputs"]`, "data-total"); got != "2" {
		t.Errorf("the week's chart counts %s inputs, want 2 (the producer's and the API's)", got)
	}
	// Time blocked, exact: the past wait from 20 past to 5 past two hours
	// later counts 40, 60 and 5 minutes in its hours.
	for i, want := range []string{"40", "60", "5"} {
		h := time.UnixMilli(hour + int64(i)*3600000).UTC().Format(time.RFC3339Nano)
		if got := attr(`.activity-day rect.bar-blocked[data-hour="`+h+`"]`, "data-n"); got != want {
			t.Errorf("the day's chart: %s minutes blocked in the hour of %s, want %s", got, h, want)
		}
	}
	// The card: Skip (nothing sent) first and highlighted; sending again
	// says it may write twice.
	if first := attr(`.card form.choice button`, "value"); first != "skip" || !strings.Contains(attr(`.card form.choice button`, "class"), "primary") {
		t.Errorf("the card's first, highlighted choice is %q, want skip", first)
	}
	if line := p.text(`.card form.choice:has(button[value="reprocess"])`); !strings.Contains(line, "happen twice") || !strings.Contains(line, "new key") {
		t.Errorf("Reprocess's line reads %q", line)
	}
	picture("section.glance", "glance-workflow")
	picture(".card", "glance-card")

	// The item's page: its Skip and Reprocess in the card's order and
	// colours, each with its risk's line; its write's outcome is unknown,
	// so Reprocess says it may write twice.
	// The order's (the list shows the newest first: the API's refund).
	item, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(function(){var r=Array.from(document.querySelectorAll("table.inputs tbody tr")).find(r => r.textContent.includes("Order 1042")); var a=r && r.querySelector("a"); return a ? a.getAttribute("href") : ""})()`))
	if !strings.HasPrefix(item, "/items/") {
		t.Fatalf("the input links to %q, not to its item's page", item)
	}
	chromedp.Run(ctx, chromedp.Navigate(p.base+item))
	p.waitFor("the item's choices", func() bool { return p.has(`.item-actions form.choice`) })
	style := func(sel, prop string) string {
		s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("(function(){var e=document.querySelector(%q); return e ? getComputedStyle(e)[%q] : ''})()", sel, prop)))
		return s
	}
	if first := attr(`.item-actions form.choice button`, "value"); first != "skip" || !strings.Contains(attr(`.item-actions form.choice button`, "class"), "primary") {
		t.Errorf("the item page's first, highlighted choice is %q, want skip", first)
	}
	if bg := style(`.item-actions button[value="skip"]`, "backgroundColor"); bg != "rgb(154, 91, 0)" {
		t.Errorf("Skip is drawn on %s, want the colour of a missing write's risk (rgb(154, 91, 0))", bg)
	}
	if fg := style(`.item-actions button[value="reprocess"]`, "color"); fg != "rgb(179, 38, 30)" {
		t.Errorf("Reprocess is written in %s, want the colour of a write twice (rgb(179, 38, 30))", fg)
	}
	if line := p.text(`.item-actions form.choice:has(button[value="reprocess"])`); !strings.Contains(line, "happens twice") || !strings.Contains(line, "new key") {
		t.Errorf("the item page's Reprocess line reads %q", line)
	}
	if line := p.text(`.item-actions form.choice:has(button[value="skip"])`); !strings.Contains(line, "may be missing") {
		t.Errorf("the item page's Skip line reads %q", line)
	}

	// The list: a small chart per workflow.
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/"))
	p.waitFor("the list's chart", func() bool { return p.has(`tr[data-workflow="glance"] svg.activity`) })
	if got := attr(`tr[data-workflow="glance"] g[data-series="inputs"]`, "data-total"); got != "2" {
		t.Errorf("the list's chart counts %s inputs, want 2", got)
	}
	picture("table.activity-list", "glance-list")

	// The run's timeline: its phases and its calls on one axis, the write
	// that lost its answer marked.
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/runs/"+runID))
	p.waitFor("the run's timeline", func() bool { return p.has(`svg.timeline`) })
	if !p.has(`svg.timeline g.phase-band[data-phase="mutating"]`) {
		t.Errorf("the timeline has no mutating phase")
	}
	if out := attr(`svg.timeline g.step[data-kind="call"][data-method="http.request"]`, "data-outcome"); !strings.HasPrefix(out, "uncertain") {
		t.Errorf("the write's bar says %q, want uncertain", out)
	}
	if !p.has(`svg.timeline g.step rect.call.failed`) {
		t.Errorf("the uncertain write is not marked")
	}
	picture(".timeline-picture", "glance-run-timeline")
	p.shot("glance-run")
}

// glanceFlow is browser's flow with a webhook (whose handler reads from the
// sink: a read, drawn dashed) and a topic open to the event API.
func glanceFlow(sinkURL string) string {
	return `export default Keep.workflow({
  name: "glance",
  topics: { "order": {}, "push": {}, "refund": { from: "api" } },
  producers: { p: { publishes: ["order"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1042", title: "Order 1042 from alice@example.com" })
    await ctx.publish("order", { messageId: "1042", inputId, payload: { id: 1042 } })
  } } },
  webhooks: { gh: { publishes: ["push"], verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GH_SECRET" } },
    handler: async (ctx, req) => { await ctx.http.request({ method: "GET", url: "` + sinkURL + `/users/" + req.json.user }) } } },
  consumers: { c: Keep.consumer({ subscribe: ["order", "push", "refund"],
    async prepare(ctx) { const [e] = await ctx.peek("order"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "order", ids: [e.messageId] }], data: e.payload, ui: { title: "Confirm order " + e.payload.id } } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "` + sinkURL + `/orders/" + p.data.id + "/confirm", json: { order: p.data.id }, timeoutMs: 300 }) },
  }) },
})`
}

// seedGlance writes, as keep writes them, what the glance test cannot make
// happen at a known time: four deliveries of webhook gh today (accepted
// twice, refused, held) and a run's past wait for a person from 20 past
// the hour five hours ago to 5 past the hour three hours ago. It returns
// that first hour (ms) and the newest delivery's time as the API shows it.
func seedGlance(t *testing.T, data string) (int64, string) {
	st, err := sqlite.Open(filepath.Join(data, "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	hour := now.Truncate(time.Hour).Add(-5 * time.Hour).UnixMilli()
	// Today's: from midnight UTC, or a minute ago.
	at := max(now.Truncate(24*time.Hour).UnixMilli(), now.UnixMilli()-60000)
	err = st.Update(context.Background(), func(tx store.Tx) error {
		for i, s := range []kt.DeliveryStatus{kt.DeliveryAccepted, kt.DeliveryAccepted, kt.DeliveryRefused, kt.DeliveryHeld} {
			d := kt.Delivery{Workflow: "glance", Webhook: "gh", DeliveryID: fmt.Sprint("d", i), Status: s, ReceivedAt: at + int64(i)}
			if s == kt.DeliveryHeld {
				d.HeldFor = "the secret GH_SECRET"
			}
			if err := tx.DeliveryAdd(&d); err != nil {
				return err
			}
		}
		return tx.BlockedSpanAdd("glance", store.BlockedSpan{RunID: "past", Handler: "c", From: hour + 20*60000, To: hour + 2*3600000 + 5*60000})
	})
	if err != nil {
		t.Fatal(err)
	}
	return hour, time.UnixMilli(at + 3).UTC().Format(time.RFC3339Nano)
}

// servePerson starts keep serve on data, its keep.toml allowing the hosts
// given (keep refuses loopback otherwise), and a Chromium to look at it;
// both stop when the test ends.
func servePerson(t *testing.T, exe, dir, data string, allow ...string) *person {
	addr := testbin.FreePort(t)
	cfg := filepath.Join(dir, "keep.toml")
	quoted := make([]string, len(allow))
	for i, h := range allow {
		quoted[i] = fmt.Sprintf("%q", h)
	}
	os.WriteFile(cfg, []byte("[connectors.http]\nallow = ["+strings.Join(quoted, ", ")+"]\n"), 0o644)
	serve := exec.Command(keepBin, "serve", "--data", data, "--config", cfg, "--addr", addr)
	logs := &strings.Builder{}
	serve.Stdout, serve.Stderr = logs, logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Kill(); serve.Wait() })
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(1100, 1000), chromedp.UserDataDir(filepath.Join(dir, "chrome")))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return &person{serve: serve, logs: logs, t: t, ctx: ctx, base: "http://" + addr, dir: shots(t)}
}
