// Package webhooks sends a real keep serve (the binary) the requests
// GitHub, Stripe and Slack send, signed as they sign them, and checks what
// a sender and a person see: the answer's status, the writes at a real
// sink, the inputs, and `keep webhooks` (issue 26 #1).
package webhooks

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

var keepBin string

func TestMain(m *testing.M) {
	testbin.Main(m, &keepBin)
}

// script declares one webhook per sender, each publishing to its topic,
// and one consumer per topic that writes the event to the sink. A token
// webhook names a secret never set; one more fails when told to.
const script = `export default Keep.workflow({
  name: "hooks",
  topics: { "gh.push": {}, "stripe.event": {}, "slack.event": {}, "ops.alert": {}, "slow.job": {} },
  webhooks: {
    github: {
      publishes: ["gh.push"],
      verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_SECRET" } },
      dedupe: { header: "X-GitHub-Delivery" },
      handler: async (ctx, req) => {
        if (req.json.fail) throw new Error("told to fail")
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: "gh-" + req.headers["x-github-delivery"], title: "push to " + req.json.ref })
        await ctx.publish("gh.push", { inputId, payload: { ref: req.json.ref, event: req.headers["x-github-event"], via: req.query.via || null, method: req.method } })
      },
    },
    stripe: {
      publishes: ["stripe.event"],
      verify: { stripe: { secret: "STRIPE_SECRET" } },
      dedupe: { json: "id" },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.id, title: "Stripe " + req.json.type })
        await ctx.publish("stripe.event", { inputId, payload: { id: req.json.id, type: req.json.type } })
      },
    },
    slack: {
      publishes: ["slack.event"],
      verify: { slack: { secret: "SLACK_SECRET" } },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.event_id, title: "Slack " + req.json.event.text })
        await ctx.publish("slack.event", { inputId, payload: { text: req.json.event.text, raw: req.body.length } })
      },
    },
    ops: {
      publishes: ["ops.alert"],
      verify: { token: { header: "X-Ops-Token", secret: "OPS_TOKEN" } },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.id, title: "alert " + req.json.id })
        await ctx.publish("ops.alert", { inputId, payload: req.json })
      },
    },
    slow: {
      publishes: ["slow.job"],
      verify: { token: { header: "X-Token", secret: "GITHUB_SECRET" } },
      dedupe: { json: "id" },
      handler: async (ctx, req) => {
        await ctx.http.request({ method: "GET", url: "%SINK%/slow" })
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.id, title: "slow " + req.json.id })
        await ctx.publish("slow.job", { inputId, payload: req.json })
      },
    },
  },
  consumers: {
%CONSUMERS%
  },
})`

const consumer = `    %NAME%: Keep.consumer({
      subscribe: ["%TOPIC%"],
      async prepare(ctx) {
        const [e] = await ctx.peek("%TOPIC%")
        if (!e) return { reservations: [] }
        return { reservations: [{ topic: "%TOPIC%", ids: [e.messageId] }], data: { id: e.messageId, payload: e.payload } }
      },
      async mutate(ctx, p) {
        await ctx.http.request({ method: "POST", url: "%SINK%/write/%TOPIC%", json: p.data })
      },
    }),`

var secrets = map[string]string{"GITHUB_SECRET": "gh-s3cret-value", "STRIPE_SECRET": "whsec_stripe-value", "SLACK_SECRET": "slack-signing-value"}

type keep struct {
	t     *testing.T
	dir   string
	store string // --store, "" for keep.db in the data directory
	sink  *testsink.Sink
	cmd   *exec.Cmd
	logs  *bytes.Buffer
	hooks string // http://ADDR of --webhooks-addr
	api   string // http://ADDR of --addr
	// reading is told when the slow handler's read arrives; release lets it go.
	reading, release chan struct{}
	released         bool
}

func (k *keep) unblock() {
	if !k.released {
		k.released = true
		close(k.release)
	}
}

// setup deploys the script (granted what it uses) and sets the secrets.
func setup(t *testing.T) *keep {
	t.Helper()
	return setupWith(t, "", `webhook_max_body = "8KiB"`, func(k *keep) string {
		// The slow webhook's handler reads /slow, held here until the test
		// releases it: keep serve is then between receipt and commit.
		k.sink.OnRead = func(path string) {
			if path == "/slow" {
				k.reading <- struct{}{}
				<-k.release
			}
		}
		var cons []string
		for i, topic := range []string{"gh.push", "stripe.event", "slack.event", "ops.alert", "slow.job"} {
			c := strings.NewReplacer("%NAME%", fmt.Sprint("write", i), "%TOPIC%", topic, "%SINK%", k.sink.URL).Replace(consumer)
			cons = append(cons, c)
		}
		return strings.ReplaceAll(strings.Replace(script, "%CONSUMERS%", strings.Join(cons, "\n"), 1), "%SINK%", k.sink.URL)
	})
}

// setupWith deploys the script src makes (given the sink) on the store
// ("" for SQLite in the data directory) under keep.toml's [policy] lines
// policy, and sets the secrets.
func setupWith(t *testing.T, store, policy string, src func(*keep) string) *keep {
	t.Helper()
	k := &keep{t: t, dir: t.TempDir(), store: store, sink: testsink.New(), reading: make(chan struct{}, 8), release: make(chan struct{})}
	t.Cleanup(func() { k.unblock(); k.sink.Close() })
	k.write("wf.js", src(k))
	k.write("keep.toml", "[policy]\n"+policy+"\n"+k.sink.AllowTOML())
	if out, err := k.keep("", "validate", k.path("wf.js")); err != nil {
		t.Fatalf("keep validate: %v\n%s", err, out)
	}
	if out, err := k.keep("", "deploy", "--grant", k.path("wf.js")); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	for name, value := range secrets {
		if out, err := k.keep(value, "secret", "set", name); err != nil {
			t.Fatalf("keep secret set %s: %v\n%s", name, err, out)
		}
	}
	return k
}

func (k *keep) path(name string) string { return filepath.Join(k.dir, name) }

// global is the flags every command of the binary is given.
func (k *keep) global() []string {
	args := []string{"--data", k.path("data"), "--config", k.path("keep.toml")}
	if k.store != "" {
		args = append(args, "--store", k.store)
	}
	return args
}

func (k *keep) write(name, text string) {
	if err := os.WriteFile(k.path(name), []byte(text), 0o644); err != nil {
		k.t.Fatal(err)
	}
}

// keep runs a command of the binary on the data directory.
func (k *keep) keep(stdin string, args ...string) (string, error) {
	cmd := exec.Command(keepBin, append(k.global(), args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// serve starts keep serve with a webhooks listener on a port of its own
// (the same port again after a restart: a sender's URL does not change).
func (k *keep) serve(env ...string) {
	k.t.Helper()
	if k.hooks == "" {
		k.hooks, k.api = "http://"+testbin.FreePort(k.t), "http://"+testbin.FreePort(k.t)
	}
	k.logs = &bytes.Buffer{}
	k.cmd = exec.Command(keepBin, append(k.global(), "serve",
		"--addr", strings.TrimPrefix(k.api, "http://"), "--webhooks-addr", strings.TrimPrefix(k.hooks, "http://"))...)
	k.cmd.Stdout, k.cmd.Stderr = k.logs, k.logs
	k.cmd.Env = append(os.Environ(), env...)
	if err := k.cmd.Start(); err != nil {
		k.t.Fatal(err)
	}
	cmd := k.cmd
	k.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	testbin.WaitFor(k.t, "keep serve's webhooks listener", func() bool {
		resp, err := http.Get(k.hooks + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusMethodNotAllowed
	}, k.logs)
}

// answer is what a sender got.
type answer struct {
	code int
	body string
	err  error
}

func (k *keep) post(path string, body []byte, headers map[string]string) answer {
	req, err := http.NewRequest(http.MethodPost, k.hooks+path, bytes.NewReader(body))
	if err != nil {
		k.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for h, v := range headers {
		req.Header.Set(h, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, body: string(b)}
}

func (k *keep) expect(a answer, code int, has string) {
	k.t.Helper()
	if a.err != nil || a.code != code || !strings.Contains(a.body, has) {
		k.t.Fatalf("want %d with %q, got %d %q (%v); keep said:\n%s", code, has, a.code, a.body, a.err, k.logs)
	}
}

func hexMAC(secret string, parts ...string) string {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// github sends a push as GitHub does: X-Hub-Signature-256 = sha256=HMAC of the body.
func (k *keep) github(delivery, ref, secret string) answer {
	body := []byte(fmt.Sprintf(`{"ref": %q, "after": "abc123", "repository": {"full_name": "acme/site"}}`, ref))
	return k.post("/hooks/hooks/github?via=test", body, map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery,
		"X-Hub-Signature-256": "sha256=" + hexMAC(secret, string(body))})
}

// stripe sends an event as Stripe does: Stripe-Signature t=…,v1=HMAC of "t.body".
func (k *keep) stripe(id string, at time.Time, secret string) answer {
	body := []byte(fmt.Sprintf(`{"id": %q, "object": "event", "type": "invoice.paid", "data": {"object": {"id": "in_1"}}}`, id))
	t := fmt.Sprint(at.Unix())
	return k.post("/hooks/hooks/stripe", body, map[string]string{"Stripe-Signature": "t=" + t + ",v1=" + hexMAC(secret, t, ".", string(body)) + ",v0=ignored"})
}

// slack sends an Events API callback as Slack does: X-Slack-Signature v0=HMAC of "v0:ts:body".
func (k *keep) slack(eventID, text string, at time.Time, secret string) answer {
	body := []byte(fmt.Sprintf(`{"type": "event_callback", "event_id": %q, "event": {"type": "message", "text": %q}}`, eventID, text))
	ts := fmt.Sprint(at.Unix())
	return k.post("/hooks/hooks/slack", body, map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v0=" + hexMAC(secret, "v0:", ts, ":", string(body))})
}

// writes counts the sink's writes to one topic's consumer.
func (k *keep) writes(topic string) int {
	n := 0
	for _, w := range k.sink.Writes() {
		if w.Path == "/write/"+topic {
			n++
		}
	}
	return n
}

// view is `keep webhooks hooks --json`, as a person reads it.
type view struct {
	Served   bool `json:"served"`
	Webhooks []struct {
		Name   string         `json:"name"`
		URL    string         `json:"url"`
		Secret string         `json:"secret"`
		Verify string         `json:"verify"`
		Counts map[string]int `json:"counts"`
	} `json:"webhooks"`
	Deliveries []struct {
		Webhook, Delivery, Status, Reason string
	} `json:"deliveries"`
}

func (k *keep) view() view { return k.viewOf("hooks") }

func (k *keep) viewOf(wf string) view {
	k.t.Helper()
	out, err := k.keep("", "webhooks", wf, "--json", "--limit", "100")
	if err != nil {
		k.t.Fatalf("keep webhooks: %v\n%s", err, out)
	}
	var v view
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		k.t.Fatalf("keep webhooks --json: %v\n%s", err, out)
	}
	return v
}

func (v view) counts(name string) map[string]int {
	for _, h := range v.Webhooks {
		if h.Name == name {
			return h.Counts
		}
	}
	return nil
}

// inputs counts the workflow's inputs, as keep inputs shows them.
func (k *keep) inputs() int { return k.inputsOf("hooks") }

func (k *keep) inputsOf(wf string) int {
	k.t.Helper()
	out, err := k.keep("", "inputs", wf, "--json")
	if err != nil {
		k.t.Fatalf("keep inputs: %v\n%s", err, out)
	}
	var ins []json.RawMessage
	if err := json.Unmarshal([]byte(out), &ins); err != nil {
		k.t.Fatalf("keep inputs --json: %v\n%s", err, out)
	}
	return len(ins)
}
