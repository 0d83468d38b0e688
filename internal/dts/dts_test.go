package dts

import (
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
)

func builtinInfos(t *testing.T) []connector.Info {
	t.Helper()
	set, err := builtin.Build(&connector.Host{Config: config.Config{}, Guard: netguard.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return connector.Describe(set.Registry(t.TempDir()))
}

// ctxBlock is the declaration of one phase's ctx in a keep.d.ts.
func ctxBlock(t *testing.T, text string, p kt.CtxPhase) string {
	t.Helper()
	start := strings.Index(text, "  interface "+ctxName(p)+" extends BaseCtx {\n")
	if start < 0 {
		t.Fatalf("no %s in keep.d.ts", ctxName(p))
	}
	end := strings.Index(text[start:], "\n  }\n")
	return text[start : start+end]
}

// Each phase's ctx offers a connector method exactly when keeptype's table
// lets the phase make a call of its kind, and a write gives mutate no
// result (next gets it); where tsc cannot run, this still checks the
// declarations against the table. (tsc over them: internal/cli.)
func TestEachPhaseOffersWhatTheTableAllows(t *testing.T) {
	infos := builtinInfos(t)
	text := Render(infos, Options{})
	for _, p := range kt.CtxPhases {
		block := ctxBlock(t, text, p)
		for _, c := range infos {
			for _, m := range c.Methods {
				if len(m.KindArgs) > 0 {
					continue // below
				}
				sig := "\n      " + m.Name + "(args"
				offered := strings.Contains(block, "    "+c.Name+": {") && strings.Contains(block[strings.Index(block, "    "+c.Name+": {"):], sig)
				if allowed := kt.CtxAllows(p, kt.CtxCall(m.Kind)); offered != allowed {
					t.Errorf("%s: ctx.%s.%s (%s) offered %v, the table allows it %v", ctxName(p), c.Name, m.Name, m.Kind, offered, allowed)
				}
			}
		}
		if got, want := strings.Contains(block, "peek("), kt.CtxAllows(p, kt.CallEvents); got != want {
			t.Errorf("%s has peek: %v, want %v", ctxName(p), got, want)
		}
		if got, want := strings.Contains(block, "registerInput("), kt.CtxAllows(p, kt.CallRegisterInput); got != want {
			t.Errorf("%s has registerInput: %v, want %v", ctxName(p), got, want)
		}
		if got, want := strings.Contains(block, "publish("), kt.CtxAllows(p, kt.CallPublish); got != want {
			t.Errorf("%s has publish: %v, want %v", ctxName(p), got, want)
		}
		if got, want := strings.Contains(block, "withItem("), kt.CtxAllows(p, kt.CallWithItem); got != want {
			t.Errorf("%s has withItem: %v, want %v", ctxName(p), got, want)
		}
	}
	mutate, item, prepare := ctxBlock(t, text, kt.CtxMutate), ctxBlock(t, text, kt.CtxItem), ctxBlock(t, text, kt.CtxPrepare)
	if !strings.Contains(mutate, "write(args: connector.files.WriteArgs): Promise<void>;") || !strings.Contains(item, "write(args: connector.files.WriteArgs): Promise<connector.files.WriteResult>;") {
		t.Error("a write in mutate must give no result, and one in an item its result")
	}
	// http.request: its kind depends on the call (KindArgs).
	if !strings.Contains(prepare, `request(args: connector.http.RequestArgs & ({ method?: "GET"`) || strings.Contains(prepare, `"POST"`) {
		t.Errorf("prepare's http.request must take only reads:\n%s", prepare)
	}
	if strings.Count(mutate, "request(args:") != 2 || !strings.Contains(mutate, `kind: "byId" })): Promise<connector.http.RequestResult>;`) {
		t.Errorf("mutate's http.request must take a read by id (with its result) and a write (without):\n%s", mutate)
	}
	if strings.Contains(ctxBlock(t, text, kt.CtxNext), "http") {
		t.Error("next may call no connector")
	}
}

// A repair's declarations name only the connectors its script calls; the
// sources stay every connector's.
func TestRenderForNamesOnlyTheToolsGiven(t *testing.T) {
	infos := builtinInfos(t)
	text := RenderFor(infos, []string{"files"}, Options{})
	if !strings.Contains(text, "namespace files {") || strings.Contains(text, "namespace gmail {") || strings.Contains(text, "    gmail: {") {
		t.Fatalf("RenderFor(files) declares other connectors' methods:\n%s", text)
	}
	if !strings.Contains(text, `{ source: "gmail"; type: "email" | "thread" }`) {
		t.Fatal("RenderFor left out another connector's sources")
	}
	if len(text) >= len(Render(infos, Options{})) {
		t.Fatal("RenderFor is no shorter than Render")
	}
}
