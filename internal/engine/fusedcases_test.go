package engine_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// fusedCase builds hookScript with prepare's return and mutate's body
// replaced; %SINK% is the sink.
func fusedCase(ret, mutate string) string {
	src := hookScript("", "")
	src = strings.Replace(src, `return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }`, ret, 1)
	src = strings.Replace(src, `await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300 })`, mutate, 1)
	return src
}

const (
	okRet     = `return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }`
	readWrite = `await ctx.http.request({ method: "GET", url: "%SINK%/read", kind: "byId" }); await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300 })`
	writeOnly = `await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300 })`
)

// What a user sees of the consumer's first run in each case: its status,
// phase and message (the blocked run, if any), the reads and writes at the
// sink, and the phases its trace names, in order. The expectations are what
// keep did before mutate ran in prepare's invocation (16e8f95^).
func TestFusedPrepareAndMutateWhatAUserSees(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, ret, mutate string
		want              []string // substrings of the summary
		reads, writes     int
		noMutateTrace     bool
	}{
		{"ids as numbers", `return { reservations: [{ topic: "job", ids: [1] }], data: e.payload }`, readWrite, []string{"failed:logic", "must be a messageId string"}, 0, 0, true},
		{"unknown id", `return { reservations: [{ topic: "job", ids: ["nope"] }], data: e.payload }`, readWrite, []string{"failed:logic", "does not exist"}, 0, 0, true},
		{"unsubscribed topic", `return { reservations: [{ topic: "other", ids: [e.messageId] }], data: e.payload }`, readWrite, []string{"failed:logic", `topic "other"`}, 0, 0, true},
		{"oversized value", `return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { id: "a", pad: "x".repeat(2000000) } }`, readWrite, []string{"failed:logic", "more than the limit"}, 0, 0, true},
		{"capitalised key", `return { Reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }`, readWrite, []string{"none open"}, 0, 0, true},
		{"duplicate id", `return { reservations: [{ topic: "job", ids: [e.messageId, e.messageId] }], data: e.payload }`, readWrite, []string{"none open"}, 1, 1, false},
		{"mutate throws", okRet, `throw new Error("boom")`, []string{"failed:logic", "mutate threw", "boom", "mutating"}, 0, 0, false},
		{"mutate writes nothing", okRet, `ctx.log("nothing")`, []string{"none open"}, 0, 0, false},
		{"mutate reads and writes", okRet, readWrite, []string{"none open"}, 1, 1, false},
		{"mutate writes twice", okRet, writeOnly + `; ` + strings.Replace(writeOnly, `/write/"`, `/write2/"`, 1), []string{"failed:logic", "second mutation", "mutating"}, 0, 0, false},
		{"mutate writes then throws", okRet, writeOnly + `; throw new Error("after")`, []string{"failed:logic", "mutate threw", "nothing was sent"}, 0, 0, false},
		{"mutate logs a lot", okRet, `for (let i = 0; i < 200; i++) ctx.log("l" + i); ` + writeOnly, []string{"none open"}, 0, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, roomyPolicy)
			var reads atomic.Int32
			e.sink.OnRead = func(string) { reads.Add(1) }
			wf := e.deployUnchecked(fusedCase(c.ret, c.mutate))
			e.settle()
			summary := "none open"
			var phases []string
			for _, r := range e.runs(wf) {
				if r.Handler != "c" {
					continue
				}
				d, err := report.ShowRun(e.ctx(), e.k.Store, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if len(phases) == 0 {
					for _, l := range d.Trace {
						if len(phases) == 0 || phases[len(phases)-1] != l.Phase {
							phases = append(phases, l.Phase)
						}
					}
				}
			}
			if r, err := openRun(e, wf); err == nil {
				summary = fmt.Sprintf("%s in %s: %s", r.Status, r.Phase, r.ErrorMessage)
			}
			t.Logf("%s | reads %d writes %d | trace phases %v", summary, reads.Load(), len(e.sink.Writes()), phases)
			for _, w := range c.want {
				if !strings.Contains(summary, w) {
					t.Errorf("summary %q, want %q in it", summary, w)
				}
			}
			if c.reads >= 0 && int(reads.Load()) != c.reads {
				t.Errorf("%d reads at the sink, want %d", reads.Load(), c.reads)
			}
			if c.writes >= 0 && len(e.sink.Writes()) != c.writes {
				t.Errorf("%d writes at the sink, want %d", len(e.sink.Writes()), c.writes)
			}
			if c.noMutateTrace {
				for _, p := range phases {
					if strings.Contains(p, "mutat") {
						t.Errorf("trace phases %v name mutate for a prepare whose value did not go on", phases)
					}
				}
			}
		})
	}
}

func openRun(e *env, wf string) (r kt.Run, err error) {
	err = e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		r, err = tx.RunOpen(wf)
		return err
	})
	return r, err
}
