package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/store"
)

// postRaw posts body to path as keep's CLI would, safe to call from many
// goroutines: the status and the body as answered.
func (r *rig) postRaw(path string, body any) (int, string, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", r.srv.URL+path, bytes.NewReader(b))
	secret, err := daemon.ReadAPISecret(r.k.DataDir)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), err
}

// errorMessage is the message of the API's error object ("" none).
func errorMessage(obj map[string]any) string {
	e, _ := obj["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// sinkSaw fails the test unless the sink saw n writes, when says after what.
func (r *rig) sinkSaw(n int, when string) {
	r.t.Helper()
	if ws := r.sink.Writes(); len(ws) != n {
		r.t.Errorf("%s the sink saw %d writes, want %d", when, len(ws), n)
	}
}

// postOrder posts order n of ordersScript's order.placed under id and
// fails the test unless the API takes it (201).
func (r *rig) postOrder(id string, n int) {
	r.t.Helper()
	code, obj, _ := r.call("POST", "/api/v1/workflows/orders/topics/order.placed/events", map[string]any{"id": id, "title": "Order " + id, "payload": map[string]any{"order": n}}, nil)
	if code != http.StatusCreated {
		r.t.Fatalf("post order %s: %d %v", id, code, obj)
	}
}

// inboxWith is a files root whose inbox holds NAME.json, {}, for each name.
func inboxWith(t *testing.T, names ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "inbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(root, "inbox", n+".json"), []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// inputCount is how many inputs orders has, as stored.
func (r *rig) inputCount() int {
	r.t.Helper()
	var n int
	if err := r.k.Store.View(r.t.Context(), func(tx store.Tx) error {
		ins, err := tx.InputList("orders")
		n = len(ins)
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// TestAnEventPostedAtOnceManyTimesIsOneInput (no side effect twice): the
// same id posted by eight senders at once is one input, one 201, and one
// write at the sink.
func TestAnEventPostedAtOnceManyTimesIsOneInput(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	const path = "/api/v1/workflows/orders/topics/order.placed/events"
	var wg sync.WaitGroup
	codes := make([]int, 8)
	bodies := make([]string, 8)
	errs := make([]error, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], bodies[i], errs[i] = r.postRaw(path, map[string]any{"id": "7", "title": "Order 7", "payload": map[string]any{"order": 7}})
		}()
	}
	wg.Wait()
	created := 0
	for i, c := range codes {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch c {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Errorf("post %d answered %d %s", i, c, bodies[i])
		}
	}
	if created != 1 {
		t.Errorf("%d posts answered 201 Created, want 1: %v", created, codes)
	}
	r.settle()
	if n := r.inputCount(); n != 1 {
		t.Errorf("%d inputs, want 1", n)
	}
	r.sinkSaw(1, "after the posts")
}

// TestAnIDIsOneIDHoweverItIsComposed (issue 38): "é" composed and
// decomposed is one event.
func TestAnIDIsOneIDHoweverItIsComposed(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	const path = "/api/v1/workflows/orders/topics/order.placed/events"
	for i, id := range []string{"caf\u00e9", "cafe\u0301"} {
		code, body, err := r.postRaw(path, map[string]any{"id": id, "title": "Café", "payload": map[string]any{"order": 1}})
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{201, 200}[i]; code != want {
			t.Errorf("post %q answered %d %s, want %d", id, code, body, want)
		}
	}
	if n := r.inputCount(); n != 1 {
		t.Errorf("%d inputs, want 1", n)
	}
}

// TestAnEventPostedToAPausedWorkflowWaitsForItsResume (nothing silently
// lost): the post is taken, nothing runs while paused, and its one write
// happens after resume.
func TestAnEventPostedToAPausedWorkflowWaitsForItsResume(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	if code, obj, _ := r.call("POST", "/api/v1/workflows/orders/pause", nil, nil); code != 200 {
		t.Fatalf("pause: %d %v", code, obj)
	}
	r.postOrder("p1", 1)
	r.settle()
	r.sinkSaw(0, "while paused")
	if code, obj, _ := r.call("POST", "/api/v1/workflows/orders/resume", nil, nil); code != 200 {
		t.Fatalf("resume: %d %v", code, obj)
	}
	r.settle()
	r.sinkSaw(1, "after resume")
}

// TestRefusedEventsWriteNothing (bad input: a clear error, stored state
// unchanged): each refusal names what is wrong, and no input is written.
func TestRefusedEventsWriteNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	for _, c := range []struct {
		name, topic, id, title string
		want                   int
		says                   string
	}{
		{"a topic handlers write", "notes", "1", "t", http.StatusConflict, "not open to the event API"},
		{"no such topic", "nope", "1", "t", http.StatusNotFound, "order.placed"},
		{"a title over its bound", "order.placed", "1", strings.Repeat("x", 501), http.StatusBadRequest, "title"},
		{"a trailing zero-width space", "order.placed", "1\u200b", "t", http.StatusBadRequest, "invisible"},
	} {
		code, obj, _ := r.call("POST", "/api/v1/workflows/orders/topics/"+c.topic+"/events", map[string]any{"id": c.id, "title": c.title}, nil)
		msg := errorMessage(obj)
		if code != c.want || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, code, msg, c.want, c.says)
		}
	}
	if n := r.inputCount(); n != 0 {
		t.Errorf("refused posts left %d inputs", n)
	}
}

// TestAnEventIDIsWithinItsBoundOnceComposed (bad input: a clear error,
// nothing stored): the id's bound holds for the id keep stores, its NFC
// form — U+0958 (3 bytes) composes to two code points (6 bytes), so 166 of
// them sent (498 bytes) would be stored as 996.
func TestAnEventIDIsWithinItsBoundOnceComposed(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	code, obj, _ := r.call("POST", "/api/v1/workflows/orders/topics/order.placed/events", map[string]any{"id": strings.Repeat("\u0958", 166), "title": "t"}, nil)
	if code != http.StatusBadRequest {
		_, _, ins := r.call("GET", "/api/v1/workflows/orders/inputs", nil, nil)
		stored := ""
		if len(ins) == 1 {
			stored, _ = ins[0].(map[string]any)["externalId"].(string)
		}
		t.Errorf("an id of 498 bytes that composes to %d answered %d %v, want 400 naming the id's bound", len(stored), code, obj)
	}
}

// TestPostsWhileADeployClosesTheirTopic (nothing silently lost): events
// posted while a version that closes order.placed to the API is deployed
// are each either refused with a reason or an input of their own; none
// is answered 201 without its input and its event.
func TestPostsWhileADeployClosesTheirTopic(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	closed := strings.ReplaceAll(strings.ReplaceAll(ordersScript, "%SINK%", r.sink.URL), `"order.placed": { from: "api" }`, `"order.placed": {}`)
	closed = strings.Replace(closed, `publishes: ["notes"]`, `publishes: ["notes", "order.placed"]`, 1)
	// Four senders post new ids until the deploy has answered, and once more after.
	var wg sync.WaitGroup
	var mu sync.Mutex
	deployed := make(chan struct{})
	created, refused, posts := 0, 0, 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				done := false
				select {
				case <-deployed:
					done = true
				default:
				}
				code, body, err := r.postRaw("/api/v1/workflows/orders/topics/order.placed/events", map[string]any{"id": fmt.Sprintf("%d-%d", w, i), "title": "Order", "payload": map[string]any{"order": i}})
				mu.Lock()
				posts++
				switch {
				case err != nil:
					t.Error(err)
				case code == http.StatusCreated:
					created++
				case code == http.StatusConflict:
					refused++
				default:
					t.Errorf("post: %d %s", code, body)
				}
				mu.Unlock()
				if done || err != nil {
					return
				}
			}
		}()
	}
	code, body, err := r.postRaw("/api/v1/workflows", map[string]any{"script": closed, "file": "orders.js", "grant": true})
	close(deployed)
	wg.Wait()
	if err != nil || code != 200 {
		t.Fatalf("deploy closing the topic: %d %s %v", code, body, err)
	}
	if got := r.inputCount(); got != created {
		t.Errorf("%d posts answered 201 and %d inputs are stored", created, got)
	}
	t.Logf("%d of %d posts taken before the topic closed, %d refused", created, posts, refused)
}

// TestAPayloadAtItsBoundIsTakenAndOneOverIsRefused: a payload of exactly
// 1 MiB is posted; one byte more, or a body past the API's 4 MiB (a huge
// title), is refused with its bound named and nothing written.
func TestAPayloadAtItsBoundIsTakenAndOneOverIsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	const path = "/api/v1/workflows/orders/topics/order.placed/events"
	pad := func(n int) string { // {"order":1,"pad":"xx…"} of n bytes
		return `{"order":1,"pad":"` + strings.Repeat("x", n-len(`{"order":1,"pad":""}`)) + `"}`
	}
	for _, c := range []struct {
		name, body string
		want       int
		says       string
	}{
		{"at the bound", `{"id":"a","title":"A","payload":` + pad(1<<20) + `}`, http.StatusCreated, ""},
		{"one byte over", `{"id":"b","title":"B","payload":` + pad(1<<20+1) + `}`, http.StatusBadRequest, "bound of 1 MiB"},
		{"a 5 MB title", `{"id":"c","title":"` + strings.Repeat("t", 5<<20) + `"}`, http.StatusBadRequest, "1 MiB"},
	} {
		code, obj, _ := r.call("POST", path, c.body, nil)
		msg := errorMessage(obj)
		if code != c.want || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %.300s, want %d saying %q", c.name, code, msg, c.want, c.says)
		}
	}
	if n := r.inputCount(); n != 1 {
		t.Errorf("%d inputs, want 1 (the one at the bound)", n)
	}
}

// TestAPayloadDeeperThanAHandlerMayReturnIsRefused (issue 41, ak2's
// finding): the event API took payloads nested 1,000 levels deep while a
// handler may return values only 200 deep, so a consumer that passes the
// payload on through prepare failed, every run, as a logic error. A
// payload is bounded below the handlers' bound (keeptype's
// MaxPayloadDepth): one at it goes through prepare to the sink; one level
// deeper is refused naming the payload, its depth and the bound, and
// nothing is stored.
func TestAPayloadDeeperThanAHandlerMayReturnIsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	const path = "/api/v1/workflows/orders/topics/order.placed/events"
	deep := func(order, depth int) string { // {"order":N,"deep":[[…]]}, depth levels in all
		return fmt.Sprintf(`{"order":%d,"deep":%s%s}`, order, strings.Repeat("[", depth-1), strings.Repeat("]", depth-1))
	}
	code, obj, _ := r.call("POST", path, `{"id":"at","title":"at the bound","payload":`+deep(1, 150)+`}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("a payload 150 levels deep: %d %v", code, obj)
	}
	r.settle()
	r.sinkSaw(1, "a payload at the bound passed through prepare:")
	for _, depth := range []int{151, 201, 1000} {
		code, obj, _ := r.call("POST", path, fmt.Sprintf(`{"id":"d%d","title":"too deep","payload":%s}`, depth, deep(2, depth)), nil)
		want := fmt.Sprintf("the payload nests %d levels deep, over keep's bound of 150 levels", depth)
		if msg := errorMessage(obj); code != http.StatusBadRequest || !strings.Contains(msg, want) {
			t.Errorf("a payload %d levels deep: %d %q, want 400 saying %q", depth, code, msg, want)
		}
	}
	if n := r.inputCount(); n != 1 {
		t.Errorf("%d inputs, want 1 (the one at the bound)", n)
	}
	r.settle()
	r.sinkSaw(1, "after the refused posts")
}
