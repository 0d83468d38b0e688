package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/keep-run/keep/internal/testbin"
)

// TestPersonPagesThroughInputs (issue 44): a workflow with 75 inputs
// shows the newest 50; "older →" shows the 25 before them, "← newer" goes
// back, and the search box finds an input by its title among all of them.
func TestPersonPagesThroughInputs(t *testing.T) {
	exe := chromium(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	f := filepath.Join(dir, "paged.js")
	os.WriteFile(f, []byte(`export default Keep.workflow({ name: "paged", topics: { "order": {} },
  producers: { p: { publishes: ["order"], schedule: { interval: "1h" }, handler: async (ctx) => {
    for (let i = 1; i <= 75; i++) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: String(i), title: "Order " + i })
      await ctx.publish("order", { messageId: String(i), inputId, payload: { i } })
    }
  } } } })`), 0o644)
	if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", data, f).CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v %s", err, out)
	}
	addr := testbin.FreePort(t)
	serve := exec.Command(keepBin, "serve", "--data", data, "--addr", addr)
	logs := &strings.Builder{}
	serve.Stdout, serve.Stderr = logs, logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { serve.Process.Kill(); serve.Wait() }()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.WindowSize(1100, 1000), chromedp.UserDataDir(filepath.Join(dir, "chrome")))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	p := &person{serve: serve, logs: logs, t: t, ctx: ctx, base: "http://" + addr, dir: shots(t)}
	rows := func() int {
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("tr[data-input]").length`))
		return n
	}
	if _, err := chromedp.Run(ctx, chromedp.Navigate(p.base+"/w/paged")); err != nil {
		t.Fatalf("open: %v\n%s", err, logs)
	}
	p.waitFor("the newest 50 of 75 inputs", func() bool {
		_, _ = chromedp.Run(ctx, chromedp.Reload())
		return rows() == 50 && strings.Contains(p.text(".paging"), "the newest 50 of 75")
	})
	if first := p.text("tr[data-input] td a"); first != "Order 75" || p.has(".paging .page-newer") {
		t.Fatalf("the first row is %q (want the newest, Order 75), a newer link: %v", first, p.has(".paging .page-newer"))
	}
	p.shot("paging-1-newest")
	p.click(".paging .page-older")
	p.waitFor("the 25 older inputs", func() bool {
		return rows() == 25 && strings.Contains(p.text("tbody"), "Order 1\n") && !strings.Contains(p.text("tbody"), "Order 75") && !p.has(".paging .page-older")
	})
	p.shot("paging-2-older")
	p.click(".paging .page-newer")
	p.waitFor("the newest 50 again", func() bool { return rows() == 50 && p.text("tr[data-input] td a") == "Order 75" })
	// The search box: "order 7" is Order 7 and 70 to 75, wherever they are.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(function(){var f=document.querySelector("form.filters"); f.q.value="order 7"; f.submit(); return true})()`)); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the seven orders whose title has order 7", func() bool {
		return rows() == 7 && strings.Contains(p.text("tbody"), "Order 7\n") && strings.Contains(p.text("tbody"), "Order 75")
	})
	p.shot("paging-3-search")
}
