// Package browser drives Debian's Chromium (through chromedp) against a real
// `keep serve`: a person opens a workflow's inputs and outputs page, reads the
// blocked-work card, clicks its buttons, and sees the result.
//
// Screenshots go to $KEEP_SCREENSHOTS (default: test-artifacts/browser in
// the repository).
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

var keepBin string

func TestMain(m *testing.M) {
	testbin.Main(m, &keepBin)
}

func chromium(t *testing.T) string {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; .ci/run installs it with apt-get install -y chromium")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium)")
	return ""
}

func shots(t *testing.T) string {
	dir := os.Getenv("KEEP_SCREENSHOTS")
	if dir == "" {
		dir = "../../test-artifacts/browser"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func flow(name, sinkURL, extra string) string {
	return `export default Keep.workflow({
  name: "` + name + `", ` + extra + `
  topics: { "order": {} },
  producers: { p: { publishes: ["order"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1042", title: "Order 1042 from alice@example.com" })
    await ctx.publish("order", { messageId: "1042", inputId, payload: { id: 1042 } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["order"],
    async prepare(ctx) { const [e] = await ctx.peek("order"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "order", ids: [e.messageId] }], data: e.payload, ui: { title: "Confirm order " + e.payload.id } } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "` + sinkURL + `/orders/" + p.data.id + "/confirm", json: { order: p.data.id }, timeoutMs: 300 }) },
  }) },
})`
}

type person struct {
	serve *exec.Cmd
	logs  *strings.Builder
	t     *testing.T
	ctx   context.Context
	base  string
	dir   string
}

func (p *person) shot(name string) {
	buf, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(p.dir, name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

func (p *person) text(sel string) string {
	// innerText through JavaScript: the page swaps its content on live
	// updates, so a node found a moment ago may be gone.
	s, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {innerText: ''}).innerText", sel)))
	return s
}

// waitFor polls the live page (it updates itself by server-sent events).
func (p *person) waitFor(what string, cond func() bool) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.shot("timeout")
	p.serve.Process.Signal(syscall.SIGQUIT) // a goroutine dump, to see what keep was doing
	time.Sleep(time.Second)
	p.t.Fatalf("the page never showed %s; keep serve said:\n%s", what, p.logs)
}

// click presses a button the way a person does; the live page may swap its
// content at any moment, so it looks the button up at the time of the click.
func (p *person) click(sel string) {
	p.waitFor("the button "+sel, func() bool {
		ok, _ := chromedp.Run(p.ctx, chromedp.Evaluate[bool](fmt.Sprintf("(function(){var b=document.querySelector(%q); if(!b) return false; b.click(); return true})()", sel)))
		return ok
	})
	time.Sleep(300 * time.Millisecond) // the form posts and the page reloads
}

// splitWords lists the words of the elements sel finds that the page
// breaks across two lines.
func (p *person) splitWords(sel string) string {
	s, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](fmt.Sprintf(`(function(){
  const split = [];
  for (const el of document.querySelectorAll(%q)) {
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.data.matchAll(/\S+/g)) {
        const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        if (new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size > 1) split.push(m[0]);
      }
    }
  }
  return split.join(", ");
})()`, sel)))
	return s
}

func (p *person) has(sel string) bool {
	n, _ := chromedp.Run(p.ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	return n > 0
}

func TestPersonResolvesBlockedWork(t *testing.T) {
	exe := chromium(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	skipSink, approveSink, didntSink := testsink.New(), testsink.New(), testsink.New()
	defer skipSink.Close()
	defer approveSink.Close()
	defer didntSink.Close()
	skipSink.Queue(testsink.TimeoutAfter)
	didntSink.Queue(testsink.TimeoutBefore)
	for name, src := range map[string]string{
		"skip-me":    flow("skip-me", skipSink.URL, ""),
		"approve-me": flow("approve-me", approveSink.URL, `requireApproval: ["http.request"],`),
		"didnt-me":   flow("didnt-me", didntSink.URL, ""),
		// A topic nobody consumes yet: its events wait, pending, for the Topics view.
		"queue": `export default Keep.workflow({ name: "queue", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "7", title: "Job 7 for carol" })
    await ctx.publish("job", { messageId: "job-7", inputId, payload: { job: 7, owner: "carol" } })
    return { seen: 1 } } } } })`,
		// A webhook, for its page: a table of ten columns.
		"hooks": `export default Keep.workflow({ name: "hooks", topics: { "push": {} },
  webhooks: { github: { publishes: ["push"], verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_WEBHOOK_SECRET" } },
    dedupe: { header: "X-GitHub-Delivery" }, handler: async (ctx, req) => {} } } })`,
	} {
		f := filepath.Join(dir, name+".js")
		os.WriteFile(f, []byte(src), 0o644)
		if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", data, f).CombinedOutput(); err != nil {
			t.Fatalf("deploy %s: %v %s", name, err, out)
		}
	}
	// The sinks are on 127.0.0.1: keep.toml allows them (keep refuses loopback otherwise).
	p := servePerson(t, exe, dir, data, skipSink.Host(), approveSink.Host(), didntSink.Host())
	ctx, logs := p.ctx, p.logs

	// The overview: three workflows, each waiting for a person.
	if _, err := chromedp.Run(ctx, chromedp.Navigate(p.base+"/")); err != nil {
		t.Fatalf("open %s: %v\n%s", p.base, err, logs)
	}
	p.waitFor("three workflows needing a person", func() bool {
		_, _ = chromedp.Run(ctx, chromedp.Reload())
		return strings.Count(p.text("body"), "blocked") >= 3
	})
	p.shot("1-overview")

	// Skip: the card names the tool, the target and why the outcome is unknown.
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/skip-me"))
	p.waitFor("the blocked card", func() bool { return p.has(".card .tool") })
	if tool, target, reason := p.text(".card .tool"), p.text(".card .target"), p.text(".card .reason"); tool != "http.request" ||
		!strings.Contains(target, skipSink.URL+"/orders/1042/confirm") || !strings.Contains(reason, "outcome unknown") || !strings.Contains(reason, "no reconcile") {
		t.Fatalf("card: tool %q target %q reason %q", tool, target, reason)
	}
	if p.has(`.card button[value="try-again"]`) {
		t.Fatal("Try again is offered for a write keep cannot check")
	}
	// What the run is about (prepare's ui.title) is on its card and in the run list.
	if title := p.text(".card .title"); title != "Confirm order 1042" {
		t.Fatalf("card title %q, want prepare's ui.title", title)
	}
	p.shot("2-skip-card")
	p.click(`.card button[value="skip"]`)
	p.waitFor("the input as skipped and the workflow running again", func() bool {
		return !p.has(".card") && strings.Contains(p.text("tr[data-input] .status"), "skipped") && !strings.Contains(p.text("h1"), "blocked")
	})
	p.shot("3-skipped")
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/skip-me?runs=1"))
	p.waitFor("the run list with what each run is about", func() bool { return p.has("td.title") && strings.Contains(p.text("body"), "Confirm order 1042") })
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/skip-me"))
	if n := len(skipSink.Writes()); n != 1 || skipSink.Requests() != 1 {
		t.Fatalf("skip: %d writes, %d requests at the sink", n, skipSink.Requests())
	}

	// Approve: the card previews the real call; approving sends it once.
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/approve-me"))
	p.waitFor("the approval card", func() bool { return p.has(`.card button[value="approve"]`) })
	if !strings.Contains(p.text(".card"), `"order": 1042`) || !strings.Contains(p.text(".card .target"), "/orders/1042/confirm") {
		t.Fatalf("approval card: %s", p.text(".card"))
	}
	p.shot("4-approval-card")
	p.click(`.card button[value="approve"]`)
	p.waitFor("the input as done", func() bool {
		return !p.has(".card") && strings.Contains(p.text("tr[data-input] .status"), "done")
	})
	p.shot("5-approved")
	if n := len(approveSink.Writes()); n != 1 {
		t.Fatalf("approve: %d writes at the sink", n)
	}

	// It didn't happen: the person checked; keep sends the write again.
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/didnt-me"))
	p.waitFor("the blocked card", func() bool { return p.has(`.card button[value="didnt-happen"]`) })
	p.shot("6-didnt-happen-card")
	p.click(`.card button[value="didnt-happen"]`)
	p.waitFor("the input as done", func() bool {
		return !p.has(".card") && strings.Contains(p.text("tr[data-input] .status"), "done")
	})
	p.shot("7-sent-again")
	if n := len(didntSink.Writes()); n != 1 || didntSink.Requests() != 2 {
		t.Fatalf("didnt-happen: %d writes, %d requests", n, didntSink.Requests())
	}

	// Topics and events (ch 06's view): counts by state, each event with its
	// payload and the input that caused it; Skip pending is confirmed on a
	// second screen, carried out, and shown in the decision log.
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/queue"))
	p.click(`a.topics-link`)
	p.waitFor("the topic with one pending event", func() bool { return p.text(`tr[data-topic="job"] .pending`) == "1" })
	if ev := p.text("tr[data-event]"); !strings.Contains(ev, `"owner":"carol"`) || !strings.Contains(ev, "Job 7 for carol") || !strings.Contains(ev, "pending") {
		t.Fatalf("the event row: %q", ev)
	}
	p.shot("8-topics")
	p.click(`tr[data-topic="job"] button[value="skip-pending"]`)
	p.waitFor("the confirmation", func() bool { return p.has(".card.confirm") })
	if p.text(`tr[data-topic="job"] .skipped`) != "0" {
		t.Fatal("the first press skipped events before the confirmation")
	}
	p.shot("9-confirm")
	p.click(`.card.confirm button[value="confirm"]`)
	p.waitFor("the event skipped and the decision logged", func() bool {
		return p.text(`tr[data-topic="job"] .skipped`) == "1" && strings.Contains(p.text("table.decisions"), "skip-pending") &&
			strings.Contains(p.text("table.decisions"), "1 pending events skipped")
	})
	p.shot("10-skipped-pending")

	// A wide table's headings break between words, never inside one
	// ("WEBH OOK", "DUPLI CATE" could not be read at a glance).
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/hooks/webhooks"))
	p.waitFor("the webhooks page", func() bool { return p.has(`tr[data-webhook="github"]`) })
	if split := p.splitWords("th"); split != "" {
		p.shot("webhooks-split-headings")
		t.Fatalf("headings broken inside a word on the webhooks page: %s", split)
	}

	// The run page and a phone-sized screen.
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/didnt-me?runs=1"))
	p.waitFor("the runs", func() bool { return p.has(`a[href^="/runs/"]`) })
	p.click(`a[href^="/runs/"]`)
	p.waitFor("the run page", func() bool { return strings.Contains(p.text("body"), "Phases and calls") })
	p.shot("11-run")
	chromedp.Run(ctx, chromedp.EmulateViewport(390, 844))
	chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/skip-me"))
	p.waitFor("the phone layout", func() bool { return p.has("tr[data-input]") })
	p.shot("12-phone")
}
