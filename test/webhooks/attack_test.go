package webhooks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/hooks"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testbin"
)

// attackScript has one GitHub-style webhook whose handler takes the
// input's id from the body (as docs/scripts.md says to), and does what a
// hostile or broken script would when the body asks: throw, loop, peek,
// write. Its consumer writes each event to the sink once, a write keep can
// check after a crash.
const attackScript = `export default Keep.workflow({
  name: "atk",
  topics: { t: {} },
  webhooks: {
    gh: {
      publishes: ["t"],
      verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_SECRET" } },
      dedupe: { header: "X-GitHub-Delivery" },
      handler: async (ctx, req) => {
        const mode = req.json && req.json.mode
        if (mode === "throw") throw new Error("told to throw")
        if (mode === "loop") { while (true) {} }
        if (mode === "peek") await ctx.peek("t")
        // The method comes from the body, so keep validate (which refuses a
        // write it can read in a webhook's handler) lets it through: the
        // host's check at the call is what is tried here.
        if (mode === "write") await ctx.http.request({ method: req.json.verb, url: "%SINK%/write/from-the-handler", json: {} })
        const id = req.json ? String(req.json.id) : "raw-" + req.body.length
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id, title: "delivery " + id })
        await ctx.publish("t", { inputId, payload: { id, parsed: req.json !== null, length: req.body.length } })
      },
    },
  },
  consumers: {
    w: Keep.consumer({
      subscribe: ["t"],
      async prepare(ctx) {
        const [e] = await ctx.peek("t")
        if (!e) return { reservations: [] }
        return { reservations: [{ topic: "t", ids: [e.messageId] }], data: e.payload }
      },
      // With a reconcile: a kill -9 may land while a write is out, and
      // keep then checks the sink itself instead of waiting for a person
      // (TestKill9AmongDeliveriesLosesAndDoublesNothing waits for every write).
      async mutate(ctx, p) {
        await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } })
      },
    }),
  },
})`

func attackSetup(t *testing.T, store string) *keep {
	t.Helper()
	return setupWith(t, store, "webhook_max_body = \"64KiB\"\nhandler_timeout = \"10s\"", func(k *keep) string {
		return strings.ReplaceAll(attackScript, "%SINK%", k.sink.URL)
	})
}

// signed is a delivery to atk/gh signed as GitHub signs (secret: the
// right one unless told), with its delivery id.
func (k *keep) signed(body []byte, delivery, secret string) answer {
	return k.post("/hooks/atk/gh", body, map[string]string{"X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + hexMAC(secret, string(body))})
}

// writesTo counts the sink's writes to one path.
func (k *keep) writesTo(path string) int {
	n := 0
	for _, w := range k.sink.Writes() {
		if w.Path == path {
			n++
		}
	}
	return n
}

// TestAHostileSenderIsBoundedByTheListener: the webhooks address faces
// the internet, so no sender holds more of keep than its bounds. Headers
// over 64 KiB are refused (431) before any handler; a flood of senders
// that trickle their bodies holds at most hooks.MaxInFlight deliveries,
// and the next sender is told at once to retry (503, its body not read);
// once they are gone, a signed delivery is accepted.
func TestAHostileSenderIsBoundedByTheListener(t *testing.T) {
	k := attackSetup(t, "")
	k.serve()
	big := map[string]string{"X-Padding": strings.Repeat("p", 100<<10), "X-GitHub-Delivery": "h-1"}
	if a := k.post("/hooks/atk/gh", []byte(`{"id":"h"}`), big); a.err != nil || a.code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KiB of headers: %d %q (%v), want 431", a.code, a.body, a.err)
	}

	// Slow senders: each sends its headers and half its body, then waits.
	// One more comes before each probe, until a probe is turned away: the
	// slow ones hold every place (a probe under way holds one of them
	// while a slow one comes, which is then turned away itself).
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	host := strings.TrimPrefix(k.hooks, "http://")
	var busy answer
	testbin.WaitFor(t, "a sender beyond the slow ones to be told keep is busy", func() bool {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("slow sender %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /hooks/atk/gh HTTP/1.1\r\nHost: %s\r\nContent-Length: 2000\r\nX-GitHub-Delivery: slow-%d\r\nX-Hub-Signature-256: sha256=00\r\n\r\n%s", host, len(conns), strings.Repeat("x", 1000))
		busy = k.signed([]byte(`{"id":"while-busy"}`), "busy-1", secrets["GITHUB_SECRET"])
		return busy.code == http.StatusServiceUnavailable
	}, k.logs)
	if len(conns) < hooks.MaxInFlight {
		t.Fatalf("turned away with %d slow senders, fewer than the bound of %d: %s", len(conns), hooks.MaxInFlight, busy.body)
	}
	if !strings.Contains(busy.body, "send it again") || strings.Contains(busy.body, `"ok":true`) {
		t.Fatalf("the busy answer: %d %s", busy.code, busy.body)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	testbin.WaitFor(t, "the delivery to be accepted once the slow senders are gone", func() bool {
		a := k.signed([]byte(`{"id":"while-busy"}`), "busy-1", secrets["GITHUB_SECRET"])
		return a.code == http.StatusOK
	}, k.logs)
	testbin.WaitFor(t, "the consumer to write it", func() bool { return k.writesTo("/write/while-busy") == 1 }, k.logs)
}

// TestADeeplyNestedBodyIsNotParsedForTheHandler: a signed JSON body nested
// deeper than keep parses for a handler (kt.MaxPayloadDepth, 150 levels)
// reaches the handler as text with req.json null — not as a value the
// handler could not pass on, nor a stack overflow blamed on the script,
// failing every retry.
func TestADeeplyNestedBodyIsNotParsedForTheHandler(t *testing.T) {
	k := attackSetup(t, "")
	k.serve()
	deep := []byte(`{"x":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`)
	k.expect(k.signed(deep, "deep-1", secrets["GITHUB_SECRET"]), http.StatusOK, `"status":"accepted"`)
	path := fmt.Sprintf("/write/raw-%d", len(deep))
	testbin.WaitFor(t, "the consumer to write the deep delivery", func() bool { return k.writesTo(path) == 1 }, k.logs)
	for _, w := range k.sink.Writes() {
		if w.Path == path && !strings.Contains(string(w.Body), `"parsed":false`) {
			t.Fatalf("the handler saw the deep body parsed: %s", w.Body)
		}
	}
	// Nested as deep as a handler takes, it is parsed.
	ok := []byte(`{"id":"nested","x":` + strings.Repeat("[", kt.MaxPayloadDepth-1) + strings.Repeat("]", kt.MaxPayloadDepth-1) + `}`)
	k.expect(k.signed(ok, "deep-2", secrets["GITHUB_SECRET"]), http.StatusOK, `"status":"accepted"`)
	testbin.WaitFor(t, "the consumer to write the nested delivery", func() bool { return k.writesTo("/write/nested") == 1 }, k.logs)
}

// TestForgedRepeatedAndHostileDeliveries: what a sender without the secret,
// a replaying one, a racing one and a hostile handler get, and that each
// leaves the store as it was (held; kept as a regression test).
func TestForgedRepeatedAndHostileDeliveries(t *testing.T) {
	k := attackSetup(t, "")
	k.serve()
	gh := secrets["GITHUB_SECRET"]
	body := []byte(`{"id":"o-1"}`)
	sig := "sha256=" + hexMAC(gh, string(body))
	forged := []struct {
		name    string
		headers map[string]string
		body    []byte
		says    string
	}{
		{"another secret", map[string]string{"X-Hub-Signature-256": "sha256=" + hexMAC("guess", string(body))}, body, "does not match the body"},
		{"truncated", map[string]string{"X-Hub-Signature-256": sig[:len(sig)-2]}, body, "does not match the body"},
		{"prefix only", map[string]string{"X-Hub-Signature-256": "sha256="}, body, "does not match the body"},
		{"no prefix", map[string]string{"X-Hub-Signature-256": strings.TrimPrefix(sig, "sha256=")}, body, "header does not start with"},
		{"another body", map[string]string{"X-Hub-Signature-256": sig}, []byte(`{"id":"o-2"}`), "does not match the body"},
		{"missing", map[string]string{}, body, "no X-Hub-Signature-256 header"},
	}
	for _, f := range forged {
		f.headers["X-GitHub-Delivery"] = "forged"
		a := k.post("/hooks/atk/gh", f.body, f.headers)
		if a.code != http.StatusUnauthorized || !strings.Contains(a.body, f.says) {
			t.Errorf("%s: %d %s, want 401 saying %q", f.name, a.code, a.body, f.says)
		}
	}
	// A repeated header: the first value is the one checked.
	if a := k.rawPost("/hooks/atk/gh", body, "X-GitHub-Delivery: dup", "X-Hub-Signature-256: sha256=00", "X-Hub-Signature-256: "+sig); a.code != http.StatusUnauthorized {
		t.Errorf("a bad signature before a good one: %d %s, want 401", a.code, a.body)
	}
	// A webhook the active version does not declare is held (issue 40:
	// its sender may be set up before the deploy), an unknown workflow is
	// not found; what tells them apart is that the workflow exists.
	a1, a2 := k.post("/hooks/atk/nope", body, nil), k.post("/hooks/nope/gh", body, nil)
	if a1.code != http.StatusAccepted || a2.code != http.StatusNotFound {
		t.Errorf("undeclared webhook %d %s, unknown workflow %d %s: want 202 held, 404", a1.code, a1.body, a2.code, a2.body)
	}

	// One signed delivery sent by 20 senders at once: one accepted.
	statuses := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := k.signed(body, "d-1", gh)
			var r struct{ Status string }
			_ = json.Unmarshal([]byte(a.body), &r)
			mu.Lock()
			statuses[fmt.Sprint(a.code, " ", r.Status)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses["200 accepted"] != 1 || statuses["200 duplicate"] != 19 {
		t.Fatalf("20 senders of one delivery: %v, want 1 accepted and 19 duplicates", statuses)
	}
	// The same signed body under a new delivery id (GitHub signs the body,
	// not the id): a delivery of its own, but the same input and event.
	k.expect(k.signed(body, "d-2", gh), http.StatusOK, `"inputs":0`)
	// Chunked, as a sender that streams its body.
	k.expect(k.rawPost("/hooks/atk/gh", []byte(`{"id":"chunked"}`), "Transfer-Encoding: chunked", "X-GitHub-Delivery: c-1", "X-Hub-Signature-256: sha256="+hexMAC(gh, `{"id":"chunked"}`)), http.StatusOK, `"status":"accepted"`)

	// Hostile handlers: each is failed (500) and stores nothing.
	for _, mode := range []string{"throw", "loop", "peek", "write"} {
		b := []byte(fmt.Sprintf(`{"id":"h-%s","mode":%q,"verb":"POST"}`, mode, mode))
		a := k.signed(b, "h-"+mode, gh)
		if a.code != http.StatusInternalServerError || !strings.Contains(a.body, `"status":"failed"`) {
			t.Errorf("a handler told to %s: %d %s, want 500 failed", mode, a.code, a.body)
		}
		if mode == "write" && !strings.Contains(a.body, "a webhook's handler only reads") {
			t.Errorf("a handler that writes failed for another reason: %s", a.body)
		}
	}
	if n := k.writesTo("/write/from-the-handler"); n != 0 {
		t.Errorf("a webhook's handler wrote %d times", n)
	}
	// The secret changed: the old one no longer verifies, the new one does.
	if out, err := k.keep("rotated-secret", "secret", "set", "GITHUB_SECRET"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	rotated := []byte(`{"id":"after-rotation"}`)
	k.expect(k.signed(rotated, "r-1", gh), http.StatusUnauthorized, "does not match the body")
	k.expect(k.signed(rotated, "r-2", "rotated-secret"), http.StatusOK, `"status":"accepted"`)

	testbin.WaitFor(t, "the consumer to write o-1, chunked and after-rotation", func() bool {
		return k.writesTo("/write/o-1") >= 1 && k.writesTo("/write/chunked") >= 1 && k.writesTo("/write/after-rotation") >= 1
	}, k.logs)
	if n := k.inputsOf("atk"); n != 3 {
		t.Errorf("%d inputs, want 3 (o-1, chunked, after-rotation)", n)
	}
	for _, w := range k.sink.Writes() {
		if w.Path != "/write/o-1" && w.Path != "/write/chunked" && w.Path != "/write/after-rotation" {
			t.Errorf("a write the deliveries did not ask for: %s %s", w.Path, w.Body)
		}
	}
	if n := k.writesTo("/write/o-1"); n != 1 {
		t.Errorf("o-1 written %d times, want once", n)
	}
}

// rawPost sends a request with its header lines as given (repeated
// headers, Transfer-Encoding: chunked) on a connection of its own.
func (k *keep) rawPost(path string, body []byte, lines ...string) answer {
	host := strings.TrimPrefix(k.hooks, "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		return answer{err: err}
	}
	defer c.Close()
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", path, host)
	chunked := false
	for _, l := range lines {
		chunked = chunked || strings.EqualFold(l, "Transfer-Encoding: chunked")
		req.WriteString(l + "\r\n")
	}
	if chunked {
		req.WriteString("\r\n")
		for i := 0; i < len(body); i += 5 {
			part := body[i:min(i+5, len(body))]
			fmt.Fprintf(&req, "%x\r\n%s\r\n", len(part), part)
		}
		req.WriteString("0\r\n\r\n")
	} else {
		fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n%s", len(body), body)
	}
	if _, err := c.Write(req.Bytes()); err != nil {
		return answer{err: err}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return answer{code: resp.StatusCode, body: b.String()}
}

// TestARefusedFloodErasesNoFailedDelivery: anyone can send refused
// deliveries, and keep forgets all but the newest 1,000 of a webhook's
// that were not accepted; a flood of them must not push out the record of
// a failed delivery (the operator's one notice that a sender's event was
// not taken), nor its count.
func TestARefusedFloodErasesNoFailedDelivery(t *testing.T) {
	k := attackSetup(t, "")
	k.serve()
	k.expect(k.signed([]byte(`{"id":"f-1","mode":"throw"}`), "f-1", secrets["GITHUB_SECRET"]), http.StatusInternalServerError, "told to throw")
	for i := 0; i < 1010; i++ {
		if a := k.post("/hooks/atk/gh", []byte(`{"id":"x"}`), map[string]string{"X-GitHub-Delivery": "flood", "X-Hub-Signature-256": "sha256=00"}); a.code != http.StatusUnauthorized {
			t.Fatalf("refused delivery %d: %d %s", i, a.code, a.body)
		}
	}
	got := k.viewOf("atk").counts("gh")
	if got["failed"] != 1 || got["refused"] != 1000 {
		t.Fatalf("after 1,010 refused deliveries: counts %v, want failed 1 (kept) and refused 1000 (the newest)", got)
	}
}

// TestKill9AmongDeliveriesLosesAndDoublesNothing: keep serve killed with
// SIGKILL while 30 senders deliver at once. Every sender that got a 2xx
// before the kill finds its delivery kept (its retry is a duplicate);
// every other's retry is accepted; each delivery is one input and one
// write at the sink.
func TestKill9AmongDeliveriesLosesAndDoublesNothing(t *testing.T) {
	k := attackSetup(t, "")
	k.serve()
	const n = 30
	body := func(i int) []byte { return []byte(fmt.Sprintf(`{"id":"k-%d"}`, i)) }
	first := make([]answer, n)
	var wg sync.WaitGroup
	var once sync.Once
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first[i] = k.signed(body(i), fmt.Sprint("kd-", i), secrets["GITHUB_SECRET"])
			if first[i].code == http.StatusOK {
				// The first answer: the others are under way.
				once.Do(func() { _ = k.cmd.Process.Kill() })
			}
		}()
	}
	wg.Wait()
	once.Do(func() { _ = k.cmd.Process.Kill() })
	_ = k.cmd.Wait()
	k.serve()
	statuses := map[string]int{}
	for i := 0; i < n; i++ {
		a := k.signed(body(i), fmt.Sprint("kd-", i), secrets["GITHUB_SECRET"])
		var r struct{ Status string }
		_ = json.Unmarshal([]byte(a.body), &r)
		statuses[r.Status]++
		if a.code != http.StatusOK {
			t.Fatalf("the retry of delivery %d: %d %s", i, a.code, a.body)
		}
		if first[i].code == http.StatusOK && r.Status != "duplicate" {
			t.Errorf("delivery %d was answered 200 before the kill, and its retry is %s: the 2xx was not durable", i, r.Status)
		}
	}
	testbin.WaitFor(t, "the consumer to write every delivery", func() bool {
		for i := 0; i < n; i++ {
			if k.writesTo(fmt.Sprintf("/write/k-%d", i)) == 0 {
				return false
			}
		}
		return true
	}, k.logs)
	for i := 0; i < n; i++ {
		if w := k.writesTo(fmt.Sprintf("/write/k-%d", i)); w != 1 {
			t.Errorf("delivery %d written %d times", i, w)
		}
	}
	if ins := k.inputsOf("atk"); ins != n {
		t.Errorf("%d inputs after the kill and the retries, want %d (answers before the kill: %v; retries: %v)", ins, n, first, statuses)
	}
	t.Logf("retries after the kill: %v", statuses)
}

// TestAConnectionFloodTakesAtMostMaxConns: silent connections to the
// webhooks address, more than hooks.MaxConns, hold at most that many of
// keep serve's file descriptors (which its store and connectors need too);
// once they are gone, a signed delivery is accepted.
func TestAConnectionFloodTakesAtMostMaxConns(t *testing.T) {
	k := attackSetup(t, "")
	k.serve()
	fdDir := fmt.Sprintf("/proc/%d/fd", k.cmd.Process.Pid)
	fds := func() int {
		ents, err := os.ReadDir(fdDir)
		if err != nil {
			t.Skipf("this system does not show a process's descriptors in %s: %v", fdDir, err)
		}
		return len(ents)
	}
	host := strings.TrimPrefix(k.hooks, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < hooks.MaxConns+200; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	// Its own descriptors (the store, the listeners, the sandbox's pipes)
	// are a few dozen.
	testbin.WaitFor(t, "keep serve to take the connections it takes", func() bool { return fds() >= hooks.MaxConns }, k.logs)
	if n := fds(); n > hooks.MaxConns+100 {
		t.Fatalf("%d silent connections: keep serve holds %d descriptors, more than the bound of %d connections and its own", len(conns), n, hooks.MaxConns)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	testbin.WaitFor(t, "a delivery to be accepted once they are gone", func() bool {
		return k.signed([]byte(`{"id":"after-flood"}`), "af-1", secrets["GITHUB_SECRET"]).code == http.StatusOK
	}, k.logs)
}
