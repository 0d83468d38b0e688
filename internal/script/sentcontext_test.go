package script

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// An invocation's Tools and Writes go to a worker once: a frame whose own
// are the ones the worker holds leaves them out, and the worker puts them
// back. A frame without them (a prepare has no Writes) changes nothing.
func TestAnInvocationsContextIsSentOnce(t *testing.T) {
	var host, worker sentContext
	// send passes f through both sides as the pipe does; left is what
	// crossed it, got what the worker's invocation is given.
	send := func(f frame) (left, got frame) {
		host.leaveOut(&f)
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if err := worker.fillIn(&got); err != nil {
			t.Fatal(err)
		}
		return f, got
	}
	tools := func() map[string][]string {
		return map[string][]string{"http": {"request"}, "files": {"read", "write"}}
	}
	writes := func() map[string]*kt.ReadsBy {
		return map[string]*kt.ReadsBy{"http.request": {Arg: "method", Default: "GET", Reads: []string{"GET", "HEAD"}}, "files.write": nil}
	}
	// A consumer run: prepare (no writes), then mutate; twice. Each phase
	// builds its maps anew, as the engine does.
	for i := 0; i < 2; i++ {
		left, got := send(frame{T: "invoke", Phase: "prepare", Tools: tools()})
		if !equalJSON(t, got.Tools, tools()) || got.Writes != nil {
			t.Fatalf("prepare %d: tools %v writes %v", i, got.Tools, got.Writes)
		}
		if i > 0 && (left.Tools != nil || !left.SameTools) {
			t.Fatalf("prepare %d: the tools the worker holds were sent again", i)
		}
		left, got = send(frame{T: "invoke", Phase: "mutate", Tools: tools(), Writes: writes()})
		if !equalJSON(t, got.Tools, tools()) || !equalJSON(t, got.Writes, writes()) {
			t.Fatalf("mutate %d: tools %v writes %v", i, got.Tools, got.Writes)
		}
		if left.Tools != nil || !left.SameTools {
			t.Fatalf("mutate %d: the tools the worker holds were sent again", i)
		}
		if i > 0 && (left.Writes != nil || !left.SameWrites) {
			t.Fatalf("mutate %d: the writes the worker holds were sent again", i)
		}
	}
	// Changed, and changed in place after they were sent: the new ones go.
	changed := tools()
	changed["slack"] = []string{"postMessage"}
	if left, got := send(frame{T: "invoke", Tools: changed}); left.SameTools || !equalJSON(t, got.Tools, changed) {
		t.Fatalf("changed tools: %v", got.Tools)
	}
	changed["files"][0] = "list"
	if left, got := send(frame{T: "invoke", Tools: changed}); left.SameTools || !equalJSON(t, got.Tools, changed) {
		t.Fatalf("tools changed in place after they were sent: %v", got.Tools)
	}
	w := writes()
	w["http.request"].Reads = []string{"GET"}
	if left, got := send(frame{T: "invoke", Tools: changed, Writes: w}); left.SameWrites || !equalJSON(t, got.Writes, w) {
		t.Fatalf("changed writes: %v", got.Writes)
	}

	// Empty maps are left out of the frame by its encoding: they must not
	// be taken for what the worker holds (an attack found the worker then
	// kept the last tools, or had none to reuse).
	for _, f := range []frame{{T: "invoke", Tools: map[string][]string{}}, {T: "invoke", Tools: map[string][]string{}, Writes: map[string]*kt.ReadsBy{}}} {
		if left, got := send(f); left.SameTools || left.SameWrites || len(got.Tools) != 0 || len(got.Writes) != 0 {
			t.Fatalf("empty tools and writes came to the worker as %v, %v (left out as held: %v, %v)", got.Tools, got.Writes, left.SameTools, left.SameWrites)
		}
	}
	if left, got := send(frame{T: "invoke", Tools: changed, Writes: w}); !left.SameTools || !left.SameWrites || !equalJSON(t, got.Tools, changed) || !equalJSON(t, got.Writes, w) {
		t.Fatalf("after empty ones, what the worker held: %v, %v", got.Tools, got.Writes)
	}

	var fresh sentContext
	f := frame{T: "invoke", SameTools: true}
	if err := fresh.fillIn(&f); err == nil || !strings.Contains(err.Error(), "never sent") {
		t.Fatalf("a worker told to reuse tools it never got: %v", err)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}

// Through a real worker: the script sees the connectors of each
// invocation, whether the frame carried them or left them out.
func TestAWorkerGivesEachInvocationItsOwnTools(t *testing.T) {
	p := compile(t, isolationScript(`return { files: typeof ctx.files?.read, slack: typeof ctx.slack?.postMessage }`))
	defer p.Release()
	for i, c := range []struct {
		tools map[string][]string
		want  string
	}{
		{map[string][]string{"files": {"read"}}, `{"files":"function","slack":"undefined"}`},
		{map[string][]string{"files": {"read"}}, `{"files":"function","slack":"undefined"}`},
		{map[string][]string{}, `{"files":"undefined","slack":"undefined"}`},
		{map[string][]string{}, `{"files":"undefined","slack":"undefined"}`},
		{nil, `{"files":"undefined","slack":"undefined"}`},
		{map[string][]string{"slack": {"postMessage"}}, `{"files":"undefined","slack":"function"}`},
		{map[string][]string{"slack": {"postMessage"}}, `{"files":"undefined","slack":"function"}`},
		{map[string][]string{"files": {"read"}, "slack": {"postMessage"}}, `{"files":"function","slack":"function"}`},
	} {
		o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
			Tools: c.tools, Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 32 << 20},
			Host: func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`null`), nil }})
		if err != nil || string(o.Value) != c.want {
			t.Fatalf("invocation %d with tools %v: %v %s, want %s", i, c.tools, err, o.Value, c.want)
		}
	}
}

// A worker whose first invocations have no tools at all serves them, and
// empty write rules make no call a write (an attack found the first
// refused as "never sent", the second taken over with the last rules).
func TestAWorkerServesEmptyToolsAndWriteRules(t *testing.T) {
	p := compile(t, isolationScript(`return { n: Object.keys(ctx).length }`))
	defer p.Release()
	for i := 0; i < 3; i++ {
		if _, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
			Tools: map[string][]string{}, Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 32 << 20},
			Host: func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`null`), nil }}); err != nil {
			t.Fatalf("invocation %d with no tools: %v", i, err)
		}
	}
	c := compile(t, `export default Keep.workflow({
  name: "w", topics: { "in": {} },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { return {} },
    async mutate(ctx, p) { const r = await ctx.http.request({ method: "POST", url: "http://x/" }); return { r } },
  }) },
})`)
	defer c.Release()
	for i, writes := range []map[string]*kt.ReadsBy{httpWrites, {}, {}, httpWrites} {
		host := func(string, json.RawMessage) (json.RawMessage, error) {
			if len(writes) > 0 {
				return nil, ErrSuspend // a write: keep takes it over
			}
			return json.RawMessage(`"read"`), nil // no write rules: served as a read
		}
		o, err := c.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Args: []json.RawMessage{json.RawMessage(`{}`)},
			Tools: map[string][]string{"http": {"request"}}, Host: host, Limits: consumerLimits, Writes: writes})
		switch {
		case len(writes) > 0 && (err != nil || !o.Suspended):
			t.Fatalf("mutate %d with write rules: %v %+v", i, err, o)
		case len(writes) == 0 && (err != nil || string(o.Value) != `{"r":"read"}`):
			t.Fatalf("mutate %d with no write rules: %v %s (suspended %v)", i, err, o.Value, o.Suspended)
		}
	}
}
