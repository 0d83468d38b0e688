// Package apiclient is the typed client of keep's HTTP API (package api's
// routes, with the shapes of api/types.go and report's). The CLI reaches
// keep through it and nothing else: a keep serve on the data directory
// over TCP, or, when none runs, the same API served in this process
// (inproc.API) through a transport that calls its handler directly.
// Either way every command has one path.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/apitype"
)

// Client calls one keep API.
type Client struct {
	base  string // http://host:port, without a trailing slash
	http  *http.Client
	auth  string // the Authorization header's value, "" for none
	actor string // X-Keep-Actor: believed only beside the instance secret
}

// Remote is a client of the keep serve at addr (host:port). bearer is the
// instance secret of its data directory, or keep serve's --token ("" for
// reads only); actor names who acts, for the decision log.
func Remote(addr, bearer, actor string) *Client {
	c := &Client{base: "http://" + addr, http: &http.Client{Timeout: 30 * time.Second}, actor: actor}
	if bearer != "" {
		c.auth = "Bearer " + bearer
	}
	return c
}

// InProcess is a client of an API handler of this process: each request is
// handed to h as keep serve's listener would hand it, without a socket.
func InProcess(h http.Handler, actor string) *Client {
	return &Client{base: "http://localhost", http: &http.Client{Transport: handlerTransport{h}}, actor: actor}
}

// handlerTransport answers a request by calling a handler.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	in := r.Clone(r.Context())
	in.Host, in.RequestURI, in.RemoteAddr = r.URL.Host, r.URL.RequestURI(), "in-process"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	w := &answerWriter{header: http.Header{}, buf: answers.Get().(*bytes.Buffer)}
	t.h.ServeHTTP(w, in)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.header, Request: r, ContentLength: int64(w.buf.Len()),
		Body: &answer{Reader: bytes.NewReader(w.buf.Bytes()), buf: w.buf}}, nil
}

// answers are the buffers in-process answers are written to, used again
// once their answer is read (issue 44: growing a new one for each answer
// was a tenth of the workflow page's bytes).
var answers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// answerWriter is the http.ResponseWriter of an in-process request.
type answerWriter struct {
	header http.Header
	status int
	buf    *bytes.Buffer
}

func (w *answerWriter) Header() http.Header { return w.header }

func (w *answerWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.buf.Write(b)
}

// Flush is a no-op: the answer is read when the handler returns.
func (w *answerWriter) Flush() {}

// answer is an in-process answer's body: do reads its bytes where they
// are, without copying them; Close gives the buffer back.
type answer struct {
	*bytes.Reader
	buf *bytes.Buffer
}

func (a *answer) Close() error {
	if a.buf != nil {
		// A very large answer's buffer is left to the collector.
		if a.buf.Cap() <= 1<<20 {
			a.buf.Reset()
			answers.Put(a.buf)
		}
		a.buf = nil
	}
	return nil
}

// readAnswer is the whole body of an answer: an in-process answer's own
// bytes, valid until the body is closed.
func readAnswer(body io.Reader) ([]byte, error) {
	if a, ok := body.(*answer); ok && a.buf != nil {
		return a.buf.Bytes(), nil
	}
	return io.ReadAll(body)
}

// Error is the API's answer to a request it refused: its status and its
// error object (code, message, an invalid script's problems).
type Error struct {
	Status int
	Body   apitype.ErrorBody
}

func (e *Error) Error() string { return e.Body.Message }

// Unreachable means no keep API answered at the address.
type Unreachable struct{ Err error }

func (e *Unreachable) Error() string { return "no keep serve answers: " + e.Err.Error() }
func (e *Unreachable) Unwrap() error { return e.Err }

// call sends one request and decodes the answer into out (nil: ignored).
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	_, err := c.do(ctx, method, path, body, out)
	return err
}

// do is call that also returns the answer's headers.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.actor != "" {
		req.Header.Set("X-Keep-Actor", c.actor)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &Unreachable{Err: err}
	}
	defer resp.Body.Close()
	raw, err := readAnswer(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading keep's answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		var e apitype.ErrorReply
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Message == "" {
			return nil, fmt.Errorf("keep answered %s %s with %s and something that is not an error object", method, path, resp.Status)
		}
		return nil, &Error{Status: resp.StatusCode, Body: e.Error}
	}
	if out == nil {
		return resp.Header, nil
	}
	// The API indents its answers, and with them every JSON value they
	// carry as it is (a payload, a result): compacted first, a client reads
	// such a value on one line, as keep stored it. An answer on one line
	// (to keep's own page, api.ForPage) is compact already.
	if bytes.IndexByte(bytes.TrimSpace(raw), '\n') >= 0 {
		var flat bytes.Buffer
		if json.Compact(&flat, raw) == nil {
			raw = flat.Bytes()
		}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("keep answered %s %s with something that is not the expected JSON: %v", method, path, err)
	}
	return resp.Header, nil
}

// Instance is the instance id of the keep serve answering (GET
// /api/v1/instance, no token needed).
func (c *Client) Instance(ctx context.Context) (string, error) {
	var who struct {
		Instance string `json:"instance"`
	}
	err := c.call(ctx, http.MethodGet, apitype.InstancePath, nil, &who)
	return who.Instance, err
}

// Health says whether keep can go on by itself.
func (c *Client) Health(ctx context.Context) (apitype.HealthReply, error) {
	var h apitype.HealthReply
	return h, c.call(ctx, http.MethodGet, "/api/v1/health", nil, &h)
}

// WorkflowView is GET /api/v1/workflows/{wf}: its status and blocked runs.
type WorkflowView struct {
	Status  apitype.Status `json:"status"`
	Blocked []apitype.Card `json:"blocked"`
}

// Workflow reads one workflow's status and cards.
func (c *Client) Workflow(ctx context.Context, wf string) (WorkflowView, error) {
	var v WorkflowView
	return v, c.call(ctx, http.MethodGet, "/api/v1/workflows/"+url.PathEscape(wf), nil, &v)
}

// Reads. Each is one GET of docs/api.md's "Reads", decoded into the
// shapes report and api/types.go define: what the CLI prints and what
// the page reads are the same answers.

// Statuses lists every workflow with its status (GET /api/v1/workflows).
func (c *Client) Statuses(ctx context.Context) ([]apitype.Status, error) {
	var v []apitype.Status
	return v, c.call(ctx, http.MethodGet, "/api/v1/workflows", nil, &v)
}

// Blocked lists the cards of a workflow's blocked runs ("" for every
// workflow's).
func (c *Client) Blocked(ctx context.Context, wf string) ([]apitype.Card, error) {
	path := "/api/v1/blocked"
	if wf != "" {
		path = c.wfPath(wf, "blocked")
	}
	var v []apitype.Card
	return v, c.call(ctx, http.MethodGet, path, nil, &v)
}

// Nodes lists the keep serve nodes sharing the store and what each holds.
func (c *Client) Nodes(ctx context.Context) ([]apitype.NodeView, error) {
	var v []apitype.NodeView
	return v, c.call(ctx, http.MethodGet, "/api/v1/nodes", nil, &v)
}

// Inputs lists every input of a workflow, newest first, page by page
// (InputsPage reads one).
func (c *Client) Inputs(ctx context.Context, wf string) ([]apitype.Input, error) {
	return every(func(o ListOptions) ([]apitype.Input, PageInfo, error) { return c.InputsPage(ctx, wf, o) })
}

// InputsPage reads one page of a workflow's inputs, newest first.
func (c *Client) InputsPage(ctx context.Context, wf string, o ListOptions) ([]apitype.Input, PageInfo, error) {
	return getPage[apitype.Input](ctx, c, c.wfPath(wf, "inputs"), o)
}

// Outputs lists every output of a workflow (one per mutation), newest
// first, page by page.
func (c *Client) Outputs(ctx context.Context, wf string) ([]apitype.Output, error) {
	return every(func(o ListOptions) ([]apitype.Output, PageInfo, error) { return c.OutputsPage(ctx, wf, o) })
}

// OutputsPage reads one page of a workflow's outputs, newest first.
func (c *Client) OutputsPage(ctx context.Context, wf string, o ListOptions) ([]apitype.Output, PageInfo, error) {
	return getPage[apitype.Output](ctx, c, c.wfPath(wf, "outputs"), o)
}

// Runs lists a workflow's newest runs (limit 0: all of them, page by page).
func (c *Client) Runs(ctx context.Context, wf string, limit int) ([]apitype.Run, error) {
	if limit > 0 && limit <= apitype.MaxPage {
		rs, _, err := c.RunsPage(ctx, wf, ListOptions{Limit: limit})
		return rs, err
	}
	rs, err := every(func(o ListOptions) ([]apitype.Run, PageInfo, error) { return c.RunsPage(ctx, wf, o) })
	if limit > 0 && len(rs) > limit {
		rs = rs[:limit]
	}
	return rs, err
}

// RunsPage reads one page of a workflow's runs, newest first.
func (c *Client) RunsPage(ctx context.Context, wf string, o ListOptions) ([]apitype.Run, PageInfo, error) {
	return getPage[apitype.Run](ctx, c, c.wfPath(wf, "runs"), o)
}

// Items lists every item of a workflow (orphaned: only those a major
// version left behind), page by page.
func (c *Client) Items(ctx context.Context, wf string, orphaned bool) ([]apitype.Item, error) {
	return every(func(o ListOptions) ([]apitype.Item, PageInfo, error) { return c.ItemsPage(ctx, wf, orphaned, o) })
}

// ItemsPage reads one page of a workflow's items, newest first.
func (c *Client) ItemsPage(ctx context.Context, wf string, orphaned bool, o ListOptions) ([]apitype.Item, PageInfo, error) {
	path := c.wfPath(wf, "items")
	if orphaned {
		o.extra = url.Values{"orphaned": {"1"}}
	}
	return getPage[apitype.Item](ctx, c, path, o)
}

// Schedule lists when a workflow's producers and tasks run next.
func (c *Client) Schedule(ctx context.Context, wf string) ([]apitype.Scheduled, error) {
	var v []apitype.Scheduled
	return v, c.call(ctx, http.MethodGet, c.wfPath(wf, "schedule"), nil, &v)
}

// Topics lists a workflow's topics with their counts, and its producers.
func (c *Client) Topics(ctx context.Context, wf string) (apitype.TopicsReply, error) {
	var v apitype.TopicsReply
	return v, c.call(ctx, http.MethodGet, c.wfPath(wf, "topics"), nil, &v)
}

// Graph reads a workflow drawn: its nodes, edges and live counts.
func (c *Client) Graph(ctx context.Context, wf string) (apitype.Graph, error) {
	var v apitype.Graph
	return v, c.call(ctx, http.MethodGet, c.wfPath(wf, "graph"), nil, &v)
}

// Activity reads what a workflow did per hour over the last hours.
func (c *Client) Activity(ctx context.Context, wf string, hours int) (apitype.Activity, error) {
	var v apitype.Activity
	return v, c.call(ctx, http.MethodGet, c.wfPath(wf, "activity")+"?hours="+strconv.Itoa(hours), nil, &v)
}

// Events reads one page of a workflow's events ("" topic or status: any).
func (c *Client) Events(ctx context.Context, wf string, eq apitype.EventQuery) (apitype.EventPage, error) {
	q := url.Values{"limit": {strconv.Itoa(eq.Limit)}}
	if eq.Topic != "" {
		q.Set("topic", eq.Topic)
	}
	if eq.Status != "" {
		q.Set("status", eq.Status)
	}
	if eq.After != 0 {
		q.Set("after", strconv.FormatInt(eq.After, 10))
	}
	var v apitype.EventPage
	return v, c.call(ctx, http.MethodGet, c.wfPath(wf, "events")+"?"+q.Encode(), nil, &v)
}

// Repairs lists the Maintainer's repairs of a workflow.
func (c *Client) Repairs(ctx context.Context, wf string) ([]apitype.Repair, error) {
	var v []apitype.Repair
	return v, c.call(ctx, http.MethodGet, c.wfPath(wf, "repairs"), nil, &v)
}

// Grants says what a workflow was granted and what a grant without items
// would allow now.
func (c *Client) Grants(ctx context.Context, wf string) (apitype.GrantsReply, error) {
	var v apitype.GrantsReply
	return v, c.call(ctx, http.MethodGet, c.wfPath(wf, "grants"), nil, &v)
}

// Run reads one run in full.
func (c *Client) Run(ctx context.Context, id string) (apitype.RunDetail, error) {
	var v apitype.RunDetail
	return v, c.call(ctx, http.MethodGet, "/api/v1/runs/"+url.PathEscape(id), nil, &v)
}

// Input reads an input (by id or key) and the writes it caused.
func (c *Client) Input(ctx context.Context, ref string) (apitype.InputDetail, error) {
	var v apitype.InputDetail
	return v, c.call(ctx, http.MethodGet, "/api/v1/inputs/"+url.PathEscape(ref), nil, &v)
}

// Item reads an item (by id or key; wf names the workflow when the key is
// in several, "" otherwise) and its attempts.
func (c *Client) Item(ctx context.Context, ref, wf string) (apitype.ItemDetail, error) {
	var v apitype.ItemDetail
	return v, c.call(ctx, http.MethodGet, "/api/v1/items/"+url.PathEscape(ref)+"?workflow="+url.QueryEscape(wf), nil, &v)
}

// Connections lists the connected accounts, never their credentials.
func (c *Client) Connections(ctx context.Context) ([]apitype.Connection, error) {
	var v []apitype.Connection
	return v, c.call(ctx, http.MethodGet, "/api/v1/connections", nil, &v)
}

// Secrets lists the named secrets' names and when each was set.
func (c *Client) Secrets(ctx context.Context) ([]apitype.Secret, error) {
	var v []apitype.Secret
	return v, c.call(ctx, http.MethodGet, "/api/v1/secrets", nil, &v)
}

// Deploy deploys a script (POST /api/v1/workflows).
func (c *Client) Deploy(ctx context.Context, req apitype.DeployRequest) (apitype.DeployReply, error) {
	var r apitype.DeployReply
	return r, c.call(ctx, http.MethodPost, "/api/v1/workflows", req, &r)
}

// Resolve takes a decision on a blocked run: try-again, didnt-happen,
// skip or reprocess.
func (c *Client) Resolve(ctx context.Context, run, action string) (apitype.RunActionReply, error) {
	var r apitype.RunActionReply
	return r, c.call(ctx, http.MethodPost, "/api/v1/runs/"+url.PathEscape(run)+"/resolve", apitype.ResolveRequest{Action: action}, &r)
}

// Approve approves the write a run waits for.
func (c *Client) Approve(ctx context.Context, run string) (apitype.RunActionReply, error) {
	var r apitype.RunActionReply
	return r, c.call(ctx, http.MethodPost, "/api/v1/runs/"+url.PathEscape(run)+"/approve", nil, &r)
}

// WorkflowAction is pause, resume or run-now.
func (c *Client) WorkflowAction(ctx context.Context, wf, verb string) (apitype.WorkflowActionReply, error) {
	var r apitype.WorkflowActionReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, verb), nil, &r)
}

// Grant grants a workflow items (none: what its active version uses).
func (c *Client) Grant(ctx context.Context, wf string, items []string) (apitype.WorkflowActionReply, error) {
	var body any
	if len(items) > 0 {
		body = apitype.GrantRequest{Items: items}
	}
	var r apitype.WorkflowActionReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, "grant"), body, &r)
}

// Revoke takes grants back.
func (c *Client) Revoke(ctx context.Context, wf string, items []string) (apitype.WorkflowActionReply, error) {
	var r apitype.WorkflowActionReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, "revoke"), apitype.GrantRequest{Items: items}, &r)
}

// TakeHeld asks keep to take a workflow's held webhook deliveries now
// (ids nil: all); DropHeld drops them.
func (c *Client) TakeHeld(ctx context.Context, wf string, ids []int64) (apitype.WorkflowActionReply, error) {
	var r apitype.WorkflowActionReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, "webhooks/take-held"), apitype.HeldRequest{Deliveries: ids}, &r)
}

func (c *Client) DropHeld(ctx context.Context, wf string, ids []int64) (apitype.WorkflowActionReply, error) {
	var r apitype.WorkflowActionReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, "webhooks/drop-held"), apitype.HeldRequest{Deliveries: ids}, &r)
}

// Prune prunes finished work's history by keep's retention policy
// ([retention]); dryRun only says what would go.
func (c *Client) Prune(ctx context.Context, dryRun bool) (apitype.PruneReply, error) {
	var r apitype.PruneReply
	path := "/api/v1/prune"
	if dryRun {
		path += "?dryRun=1"
	}
	return r, c.call(ctx, http.MethodPost, path, nil, &r)
}

// SkipPending skips a topic's pending events.
func (c *Client) SkipPending(ctx context.Context, wf, topic string) (apitype.WorkflowActionReply, error) {
	var r apitype.WorkflowActionReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, "topics/"+url.PathEscape(topic)+"/skip-pending"), nil, &r)
}

// Webhooks reads a workflow's webhooks and their newest deliveries.
func (c *Client) Webhooks(ctx context.Context, wf string, limit int) (apitype.WebhooksReply, error) {
	var r apitype.WebhooksReply
	return r, c.call(ctx, http.MethodGet, c.wfPath(wf, "webhooks")+"?limit="+strconv.Itoa(limit), nil, &r)
}

// Decisions is a workflow's decision log, newest first, at most limit.
func (c *Client) Decisions(ctx context.Context, wf string, limit int) ([]apitype.Decision, error) {
	var v []apitype.Decision
	return v, c.call(ctx, http.MethodGet, c.wfPath(wf, "decisions")+"?limit="+strconv.Itoa(limit), nil, &v)
}

// Publish posts one event to a topic the workflow opens to the event API.
func (c *Client) Publish(ctx context.Context, wf, topic string, req apitype.PublishRequest) (apitype.PublishReply, error) {
	var r apitype.PublishReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, "topics/"+url.PathEscape(topic)+"/events"), req, &r)
}

// ResetState forgets a producer's stored state.
func (c *Client) ResetState(ctx context.Context, wf, handler string) (apitype.WorkflowActionReply, error) {
	var r apitype.WorkflowActionReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, "handlers/"+url.PathEscape(handler)+"/reset-state"), nil, &r)
}

// DecideRepair approves (verb "approve") or rejects ("reject") a repair
// the Maintainer held.
func (c *Client) DecideRepair(ctx context.Context, wf, id, verb string) (apitype.WorkflowActionReply, error) {
	var r apitype.WorkflowActionReply
	return r, c.call(ctx, http.MethodPost, c.wfPath(wf, "repairs/"+url.PathEscape(id)+"/"+url.PathEscape(verb)), nil, &r)
}

// ItemAction skips or reprocesses an item (verb "skip", "reprocess");
// wf names the workflow when the key is in several ("" otherwise).
func (c *Client) ItemAction(ctx context.Context, ref, verb, wf string) (apitype.ItemActionReply, error) {
	var r apitype.ItemActionReply
	return r, c.call(ctx, http.MethodPost, "/api/v1/items/"+url.PathEscape(ref)+"/"+url.PathEscape(verb)+"?workflow="+url.QueryEscape(wf), nil, &r)
}

func (c *Client) wfPath(wf, rest string) string {
	return "/api/v1/workflows/" + url.PathEscape(wf) + "/" + rest
}
