// Package http is the connector for any HTTP API. GET and HEAD are reads;
// every other method is a mutation whose identity is method+url, sent with
// an Idempotency-Key header derived from the mutation's identity. An optional
// reconcile probe (a request the script describes) finds out whether an
// uncertain write happened.
package http

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/redact"
)

// MaxBodyBytes bounds a response body handed to a script.
const MaxBodyBytes = 8 << 20

// New returns the http connector. Every connection it opens passes guard
// (netguard: no loopback, private or metadata address unless keep.toml
// allows the host); a nil guard allows nothing internal.
func New(guard *netguard.Guard) *connector.Connector {
	noRedirect := func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse }
	base := nethttp.DefaultTransport.(*nethttp.Transport)
	c := &client{
		// Redirects of a mutation would re-send it elsewhere; keep reports them instead.
		reads:  &nethttp.Client{CheckRedirect: noRedirect, Transport: guard.Transport(base)},
		writes: &nethttp.Client{CheckRedirect: noRedirect, Transport: guard.TransportConns(writeTransport(true), countBytes)},
		fresh:  &nethttp.Client{CheckRedirect: noRedirect, Transport: guard.TransportConns(writeTransport(false), countBytes)},
	}
	return &connector.Connector{
		Name: "http",
		Doc: "Any HTTP API. Redirects are not followed; responses are capped at 8 MiB. " +
			"Addresses of this machine and its private networks (loopback, private, link-local, cloud metadata) are refused unless keep.toml allows the host: `[connectors.http] allow = [\"127.0.0.1:8090\"]`. " +
			"Credentials stay in keep, not in the script: `keep secret set NAME --host api.example.com`, then name it in a header, e.g. " +
			"`headers: { Authorization: \"Bearer {secret:NAME}\" }` (or in the URL's query: `?key={secret:NAME}`); keep fills it in at the call, only for a workflow granted `secret:NAME` and only toward the secret's hosts, and masks it wherever a call is shown.",
		Sources: map[string][]string{"http": {"request", "webhook", "record"}},
		Methods: map[string]*connector.Method{
			"request": {
				Name: "request",
				KindOf: func(a map[string]any) connector.Kind {
					if !readsBy.IsRead(a) {
						return connector.KindMutate
					}
					// The script says a GET reads one thing by its id
					// (ch 06: mutate may read by id, never list or search).
					if str(a["kind"]) == "byId" {
						return connector.KindReadByID
					}
					return connector.KindRead
				},
				ReadsBy:        &readsBy,
				Identity:       []string{"method", "url"},
				Validate:       validate,
				Do:             c.request,
				Reconcile:      c.reconcile,
				ReconcileWhen:  func(a map[string]any) bool { _, ok := a["reconcile"].(map[string]any); return ok },
				ComparePayload: compare,
				Target:         func(a map[string]any) string { return methodOf(a) + " " + redactURL(str(a["url"])) },
				Doc:            requestDoc,
			},
		},
	}
}

// The methods http.request takes (validate), in either case, as
// TypeScript types: GET and HEAD read, the others write (KindOf).
const (
	readMethods  = `"GET" | "HEAD" | "get" | "head"`
	writeMethods = `"POST" | "PUT" | "PATCH" | "DELETE" | "post" | "put" | "patch" | "delete"`
)

// ResultTS is what http.request returns, as a TypeScript type (custom
// connectors return it too).
const ResultTS = "{ status: number; headers: Record<string, string>; body: string; json: any; reconciled?: boolean; via?: string }"

// requestDoc is http.request as docs/scripts.md shows it.
var requestDoc = connector.MethodDoc{
	Summary: "Sends one HTTP request. A write carries the header `Idempotency-Key: keep-…`, the same for every attempt of the same write, so a server that honours it applies the write once.",
	Kind:    "GET and HEAD are list/search reads (producers, prepare, tasks), or reads by id with `kind: \"byId\"` (also allowed in mutate); POST, PUT, PATCH and DELETE are writes (mutate, or an item's handler)",
	Params: []connector.Param{
		{Name: "url", Type: "string", Required: true, Doc: "an absolute http(s) URL"},
		{Name: "method", Type: "string", TS: readMethods + " | " + writeMethods, Doc: "GET (default), HEAD, POST, PUT, PATCH or DELETE"},
		{Name: "headers", Type: "object of strings", TS: "Record<string, string>", Doc: "request headers"},
		{Name: "json", Type: "any", TS: "unknown", Doc: "a body sent as JSON (sets `Content-Type: application/json`)"},
		{Name: "body", Type: "string", Doc: "a raw body (not with `json`)"},
		{Name: "timeoutMs", Type: "number", Doc: "the call's time limit, 1 to 600000 ms (default: the policy's `tool_timeout`)"},
		{Name: "reconcile", Type: "{ method?, url, headers? }", TS: "{ method?: " + readMethods + "; url: string; headers?: Record<string, string> }", Doc: "a probe that finds the write afterwards; `{idempotencyKey}` in its url is replaced by the write's key. Without it an uncertain write goes to a person"},
		{Name: "subkey", Type: "string", Doc: "tells apart two writes of one run to the same method and url"},
		{Name: "kind", Type: "\"byId\"", TS: `"byId"`, Doc: "marks a GET or HEAD as a read of one thing by its id, which `mutate` may make (list and search reads it may not)"},
	},
	Result: "`{ status, headers, body, json }`: `headers` in lower case (no `set-cookie`), `body` the text, `json` the parsed body or `null`. " +
		"A reconciled write returns the probe's answer with `reconciled: true` and `via` (the probe's method and url).",
	ResultTS: ResultTS,
	KindArgs: map[connector.Kind]string{
		connector.KindRead:     "{ method?: " + readMethods + "; kind?: undefined }",
		connector.KindReadByID: "{ method?: " + readMethods + `; kind: "byId" }`,
		connector.KindMutate:   "{ method: " + writeMethods + " }",
	},
	Reconcile: "only with a `reconcile` probe: 2xx means it happened, 404 or 410 that it did not (believed once a second probe agrees after the settle time), anything else that keep cannot tell yet.",
	Errors: "reads: 401/403 permission, 408/429/5xx and network errors transient (retried), 404/410 returned as they are, other 4xx logic. " +
		"Writes: 2xx applied; a 307/308 redirect or 4xx a logic error (404/409/410/412 precondition, 401/403 permission, 408/429 transient) and certainly not applied; " +
		"a 301/302/303 redirect (Post/Redirect/Get: often applied), a 5xx, or no complete answer after the request went out, an unknown outcome that reconcile settles (or a person, without a probe); " +
		"a connection refused before anything was sent is transient.",
}

// client holds three clients. Reads use Go's defaults. Writes reuse
// connections (writes), but keep alone decides whether a failed write goes
// again (send): Go's transport re-sends a request that failed on a reused
// connection when it looks idempotent — and a request with an
// Idempotency-Key header does — even after the request was written; the
// torture test caught that as a duplicate write. A write with a body has
// no GetBody, which Go's transport never re-sends; a write without a body
// it would, so such a write, and keep's one re-send, open a connection of
// their own (fresh) that no other request shares.
type client struct{ reads, writes, fresh *nethttp.Client }

// writeIdle is how long a write connection may wait, idle, for the next
// write: under the keep-alive timeouts of common servers (2 s and more),
// so that keep drops an idle connection before the server closes it; a
// server that closes it first makes a write fail (see send).
const writeIdle = time.Second

// writeTransport is HTTP/1.1 only (HTTP/2 has its own retries), with or
// without keep-alive.
func writeTransport(keepAlive bool) *nethttp.Transport {
	return &nethttp.Transport{
		Proxy: nethttp.ProxyFromEnvironment, DisableKeepAlives: !keepAlive, ForceAttemptHTTP2: false,
		TLSNextProto:        map[string]func(string, *tls.Conn) nethttp.RoundTripper{},
		TLSHandshakeTimeout: 10 * time.Second, MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: writeIdle,
	}
}

func str(v any) string { s, _ := v.(string); return s }

// readsBy: a GET or a HEAD reads, every other method writes.
var readsBy = kt.ReadsBy{Arg: "method", Default: "GET", Reads: []string{"GET", "HEAD"}}

func methodOf(a map[string]any) string { return readsBy.Value(a) }

func validate(a map[string]any) error {
	u := str(a["url"])
	if u == "" {
		return fmt.Errorf("http.request needs url: { method: \"POST\", url: \"https://...\" }")
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("http.request: url %q is not an absolute http(s) URL", u)
	}
	switch methodOf(a) {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE":
	default:
		return fmt.Errorf("http.request: method %q is not one of GET, HEAD, POST, PUT, PATCH, DELETE", str(a["method"]))
	}
	if h, ok := a["headers"]; ok {
		hm, ok := h.(map[string]any)
		if !ok {
			return fmt.Errorf("http.request: headers must be an object of strings")
		}
		for k, v := range hm {
			if _, ok := v.(string); !ok {
				return fmt.Errorf("http.request: header %q must be a string", k)
			}
		}
	}
	if _, ok := a["body"]; ok {
		if _, isStr := a["body"].(string); !isStr {
			return fmt.Errorf("http.request: body must be a string; pass objects as json: {...}")
		}
		if _, both := a["json"]; both {
			return fmt.Errorf("http.request: give body or json, not both")
		}
	}
	if r, ok := a["reconcile"]; ok {
		rm, ok := r.(map[string]any)
		if !ok || str(rm["url"]) == "" {
			return fmt.Errorf("http.request: reconcile must be { method: \"GET\", url: \"https://.../{idempotencyKey}\" }")
		}
	}
	if k, ok := a["kind"]; ok {
		if str(k) != "byId" {
			return fmt.Errorf("http.request: kind must be \"byId\" (a GET that reads one thing by its id), got %v", k)
		}
		if m := methodOf(a); m != "GET" && m != "HEAD" {
			return fmt.Errorf("http.request: kind \"byId\" marks a read; a %s is a write", m)
		}
	}
	if t, ok := a["timeoutMs"]; ok {
		if f, ok := t.(float64); !ok || f <= 0 || f > 600000 {
			return fmt.Errorf("http.request: timeoutMs must be a number of milliseconds between 1 and 600000")
		}
	}
	return nil
}

// outgoing is one request as a call makes it: the call's arguments (the
// body, headers, timeout), the method, the URL with its secrets filled
// in, and the idempotency key a write carries ("" for none).
type outgoing struct {
	args    map[string]any
	method  string
	url     string
	idemKey string
}

func (c *client) build(ctx context.Context, o outgoing) (*nethttp.Request, error) {
	a, idemKey := o.args, o.idemKey
	var body io.Reader
	contentType := ""
	if j, ok := a["json"]; ok {
		b, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		body, contentType = bytes.NewReader(b), "application/json"
	} else if s, ok := a["body"].(string); ok {
		body = strings.NewReader(s)
	}
	req, err := nethttp.NewRequestWithContext(ctx, o.method, o.url, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if h, ok := a["headers"].(map[string]any); ok {
		for k, v := range h {
			req.Header.Set(k, str(v))
		}
	}
	req.Header.Set("User-Agent", connector.UserAgent) // after the script's: it cannot pass for another client
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	return req, nil
}

func timeoutOf(ctx context.Context, a map[string]any) (context.Context, context.CancelFunc) {
	if ms, ok := a["timeoutMs"].(float64); ok && ms > 0 {
		return context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	return context.WithCancel(ctx)
}

func responseValue(resp *nethttp.Response, body []byte) map[string]any {
	headers := map[string]any{}
	for k := range resp.Header {
		if strings.EqualFold(k, "Set-Cookie") {
			continue
		}
		headers[strings.ToLower(k)] = resp.Header.Get(k)
	}
	out := map[string]any{"status": resp.StatusCode, "headers": headers, "body": string(body)}
	var j any
	if len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, &j) == nil {
		out["json"] = j
	} else {
		out["json"] = nil
	}
	return out
}

// do sends one request and reads its answer. sent says whether any byte
// of the request may have reached the server (always, once an answer
// came): an error before that is a definite failure; after it the server
// may have applied the write.
func (c *client) do(ctx context.Context, o outgoing) (resp *nethttp.Response, body []byte, sent bool, err error) {
	ctx, cancel := timeoutOf(ctx, o.args)
	defer cancel()
	if o.method == "GET" || o.method == "HEAD" {
		resp, sent, err = c.send(ctx, c.reads, o)
	} else {
		resp, sent, err = c.write(ctx, o)
	}
	if err != nil {
		return nil, nil, sent, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return resp, nil, true, fmt.Errorf("reading the response body: %w", err)
	}
	if len(body) > MaxBodyBytes {
		return resp, nil, true, fmt.Errorf("the response body is larger than %d bytes", MaxBodyBytes)
	}
	return resp, body, true, nil
}

// write sends a write, on a reused connection when one is idle. When that
// connection turns out dead before a byte of the request went out (its
// server closed it while idle), the write goes once more, on a new
// connection: the server cannot have seen it. Any later failure is
// returned as it is, for the ledger to treat as an unknown outcome.
func (c *client) write(ctx context.Context, o outgoing) (*nethttp.Response, bool, error) {
	hc := c.writes
	if _, hasBody := o.args["json"]; !hasBody && str(o.args["body"]) == "" {
		hc = c.fresh
	}
	resp, sent, reused, err := c.sendTraced(ctx, hc, o)
	if err == nil || sent || !reused || ctx.Err() != nil {
		return resp, sent, err
	}
	resp, sent, _, err = c.sendTraced(ctx, c.fresh, o)
	return resp, sent, err
}

// send sends a read, which may go again whatever happened.
func (c *client) send(ctx context.Context, hc *nethttp.Client, o outgoing) (*nethttp.Response, bool, error) {
	resp, sent, _, err := c.sendTraced(ctx, hc, o)
	return resp, sent, err
}

// sendTraced sends one request and says, from httptrace and the bytes its
// connection sent, whether it may have reached the server and whether it
// went on a reused connection.
func (c *client) sendTraced(ctx context.Context, hc *nethttp.Client, o outgoing) (resp *nethttp.Response, sent, reused bool, err error) {
	at := &attempt{}
	req, err := c.build(httptrace.WithClientTrace(ctx, at.trace()), o)
	if err != nil {
		return nil, false, false, err
	}
	req.GetBody = nil // never re-sent by Go's transport (see client)
	resp, err = hc.Do(req)
	if err != nil {
		sent, reused = at.outcome()
		return nil, sent, reused, err
	}
	return resp, true, at.isReused(), nil
}

// attempt is what httptrace saw of one request: the connection it got
// (reused or new), and whether it started writing the request.
type attempt struct {
	mu     sync.Mutex
	reused bool
	wrote  bool  // httptrace's WroteRequest: the request was (perhaps partly) written
	conn   *wire // the connection, when it is one of the write transports'
	from   int64 // the bytes that connection had sent before this request
}

func (at *attempt) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			at.mu.Lock()
			defer at.mu.Unlock()
			at.reused, at.conn, at.from = info.Reused, nil, 0
			if w := wireOf(info.Conn); w != nil {
				at.conn, at.from = w, w.written()
			}
		},
		WroteRequest: func(httptrace.WroteRequestInfo) { at.mu.Lock(); at.wrote = true; at.mu.Unlock() },
	}
}

func (at *attempt) isReused() bool { at.mu.Lock(); defer at.mu.Unlock(); return at.reused }

// outcome, after a failed request, says whether any byte of it may have
// reached the server, and whether it went on a reused connection. On a
// connection of keep's own it counts the bytes the connection sent since
// it was handed to this request, after closing it for good (the request
// failed: the connection is of no more use), so that no write can slip
// out after the count. Elsewhere it believes httptrace's WroteRequest.
func (at *attempt) outcome() (sent, reused bool) {
	at.mu.Lock()
	defer at.mu.Unlock()
	if at.conn == nil {
		return at.wrote, at.reused
	}
	return at.conn.seal() > at.from, at.reused
}

// wire is a connection that counts the bytes it hands to the kernel.
type wire struct {
	net.Conn
	mu     sync.Mutex
	n      int64
	sealed bool
}

func countBytes(c net.Conn) net.Conn { return &wire{Conn: c} }

func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sealed {
		return 0, net.ErrClosed
	}
	n, err := w.Conn.Write(p)
	w.n += int64(n)
	return n, err
}

// NetConn is the connection wrapped (as tls.Conn's).
func (w *wire) NetConn() net.Conn { return w.Conn }

func (w *wire) written() int64 { w.mu.Lock(); defer w.mu.Unlock(); return w.n }

// seal closes the connection (which ends a write blocked in it), refuses
// every later write, and returns the bytes it sent.
func (w *wire) seal() int64 {
	w.Conn.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sealed = true
	return w.n
}

// wireOf finds keep's own connection under c (a TLS connection wraps it).
func wireOf(c net.Conn) *wire {
	for c != nil {
		if w, ok := c.(*wire); ok {
			return w
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

// withSecrets returns a copy of a call's arguments with the secrets its
// headers name filled in, for a request to host; the call's own
// arguments, which keep records, keep the placeholders.
func withSecrets(a map[string]any, host string, open connector.SecretFunc) (map[string]any, *kt.Error) {
	h, ok := a["headers"]
	if !ok {
		return a, nil
	}
	filled, err := connector.FillHeaders(h, host, open)
	if err != nil {
		var ke *kt.Error
		if errors.As(err, &ke) {
			return nil, ke
		}
		return nil, kt.Errorf(kt.ClassInternal, "%v", err)
	}
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	out["headers"] = filled
	return out, nil
}

// hostOf is the host a request to u goes to, as grants and secrets name
// it; "" when u's host cannot be read (a secret goes to no such host).
func hostOf(u string) string {
	h, err := kt.HostOfURL(u, true)
	if err != nil {
		return ""
	}
	return h
}

// fillURL fills the secrets a URL names ({secret:NAME} in its query, e.g.
// ?key={secret:maps_key}), each escaped for a query, for the request to
// host, the host of u as written. A URL whose host the filling changed is
// refused: a secret goes in a URL's path or query, never its host, and is
// checked against the host the request really goes to.
func fillURL(u, host string, open connector.SecretFunc) (string, *kt.Error) {
	filled, err := connector.FillSecretsEscaped(u, host, open, url.QueryEscape)
	if err != nil {
		var ke *kt.Error
		if errors.As(err, &ke) {
			return "", ke
		}
		return "", kt.Errorf(kt.ClassInternal, "%v", err)
	}
	if filled != u && hostOf(filled) != host {
		return "", kt.Errorf(kt.ClassLogic, "the url %s names a secret in its host: a secret goes in a URL's path or query, never its host", redactURL(u))
	}
	return filled, nil
}

func (c *client) request(ctx context.Context, call connector.Call) connector.Result {
	// The host the request goes to, read from the URL as the script wrote
	// it: every secret it names is opened for that host (and refused
	// unless scoped to it), and the URL filled must still go there.
	host := hostOf(str(call.Args["url"]))
	a, serr := withSecrets(call.Args, host, call.Secret)
	if serr != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: serr}
	}
	method := methodOf(a)
	// What is shown is the URL as the script wrote it, placeholders and all.
	target := method + " " + redactURL(str(call.Args["url"]))
	u, serr := fillURL(str(a["url"]), host, call.Secret)
	if serr != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: serr}
	}
	read := method == "GET" || method == "HEAD"
	key := ""
	if !read {
		key = call.IdempotencyKey
	}
	resp, body, sent, err := c.do(ctx, outgoing{args: a, method: method, url: u, idemKey: key})
	if r, refused := netguard.Refused(err); refused {
		// Nothing was sent, and trying again cannot help: a person decides
		// whether this address is meant to be reached (the card says how).
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassPermission, "%s was not sent: %v", target, r)}
	}
	if err != nil {
		if read {
			return connector.Result{Err: kt.Errorf(kt.ClassTransient, "%s failed: %v", target, connector.CleanErr(err))}
		}
		if !sent {
			// Not a byte reached the server (refused, DNS, TLS, a dead
			// connection, a time limit before sending): safe to try again later.
			return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassTransient, "%s was not sent: %v", target, connector.CleanErr(err))}
		}
		return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s: the request was sent but no complete answer came back (%v); the server may have applied it", target, connector.CleanErr(err))}
	}
	// A failure carries the response too (Value), for connectors built on
	// this one that map statuses their own way (custom connectors).
	val := responseValue(resp, body)
	st := resp.StatusCode
	if read {
		switch {
		case st < 400 || st == 404 || st == 410:
			return connector.Result{Value: val}
		case st == 401 || st == 403:
			return connector.Result{Value: val, Err: kt.Errorf(kt.ClassPermission, "%s answered %d %s: check the credentials", target, st, nethttp.StatusText(st))}
		case st == 408 || st == 429 || st >= 500:
			return connector.Result{Value: val, Err: transient(target, resp)}
		default:
			return connector.Result{Value: val, Err: kt.Errorf(kt.ClassLogic, "%s answered %d %s: %s", target, st, nethttp.StatusText(st), snippet(body))}
		}
	}
	switch {
	case st < 300:
		return connector.Result{Outcome: connector.OutcomeApplied, Value: val}
	case st == 301 || st == 302 || st == 303:
		// Post/Redirect/Get: a server that applied a POST often answers
		// with a redirect to the result. keep follows no redirect of a
		// write, so it cannot tell: never "certainly not applied".
		return connector.Result{Value: val, Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s answered a redirect %d to %s: after a write this often means it was applied (Post/Redirect/Get); keep follows no redirect of a write, so the outcome is unknown — use the final URL in the script", target, st, resp.Header.Get("Location"))}
	case st < 400:
		// 307 and 308 ask for the same request at another URL: not applied here.
		return connector.Result{Value: val, Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassLogic, "%s answered a redirect %d to %s; keep does not follow redirects of writes: use the final URL", target, st, resp.Header.Get("Location"))}
	case st == 408 || st == 429:
		return connector.Result{Value: val, Outcome: connector.OutcomeFailed, Err: transient(target, resp)}
	case st == 401 || st == 403:
		return connector.Result{Value: val, Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassPermission, "%s answered %d %s: check the credentials or the permissions of the account", target, st, nethttp.StatusText(st))}
	case st == 404 || st == 409 || st == 410 || st == 412:
		return connector.Result{Value: val, Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassPrecondition, "%s answered %d %s: %s", target, st, nethttp.StatusText(st), snippet(body))}
	case st < 500:
		return connector.Result{Value: val, Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassLogic, "%s answered %d %s: %s", target, st, nethttp.StatusText(st), snippet(body))}
	}
	return connector.Result{Value: val, Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s answered %d %s: the server may or may not have applied the write", target, st, nethttp.StatusText(st))}
}

// transient is a transient error for a status that asks to come back later,
// with the server's Retry-After when it gives one.
func transient(target string, resp *nethttp.Response) *kt.Error {
	e := kt.Errorf(kt.ClassTransient, "%s answered %d %s", target, resp.StatusCode, nethttp.StatusText(resp.StatusCode))
	e.RetryAfter = connector.RetryAfter(resp.Header)
	return e
}

func (c *client) reconcile(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
	probe, _ := call.Args["reconcile"].(map[string]any)
	method := strings.ToUpper(str(probe["method"]))
	if method == "" {
		method = "GET"
	}
	u := strings.ReplaceAll(str(probe["url"]), "{idempotencyKey}", url.PathEscape(call.IdempotencyKey))
	host := hostOf(u)
	args, serr := withSecrets(map[string]any{"headers": probe["headers"]}, host, call.Secret)
	sent := ""
	if serr == nil {
		sent, serr = fillURL(u, host, call.Secret)
	}
	if serr != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("reconcile probe %s %s: %s", method, redactURL(u), serr.Message)
	}
	if t, ok := call.Args["timeoutMs"]; ok {
		args["timeoutMs"] = t
	}
	resp, body, _, err := c.do(ctx, outgoing{args: args, method: method, url: sent})
	if r, refused := netguard.Refused(err); refused {
		return connector.ReconcileRetry, nil, fmt.Errorf("reconcile probe %s %s was not sent: %v", method, redactURL(u), r)
	}
	if err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("reconcile probe %s %s: %v", method, redactURL(u), connector.CleanErr(err))
	}
	switch st := resp.StatusCode; {
	case st >= 200 && st < 300:
		// The write's own answer was lost; what keep knows is the probe's.
		// The result says so (reconciled, via), and it is what replay, next
		// and keep outputs all show from then on (docs/design.md).
		v := responseValue(resp, body)
		v["reconciled"], v["via"] = true, method+" "+redactURL(u)
		return connector.ReconcileApplied, v, nil
	case st == 404 || st == 410:
		return connector.ReconcileFailed, nil, nil
	default:
		return connector.ReconcileRetry, nil, fmt.Errorf("reconcile probe %s %s answered %d", method, redactURL(u), st)
	}
}

func compare(old, new map[string]any) connector.Comparison {
	canon := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if canon(old["json"]) == canon(new["json"]) && str(old["body"]) == str(new["body"]) {
		if canon(old["headers"]) == canon(new["headers"]) {
			return connector.Equivalent
		}
		return connector.Minor
	}
	return connector.Significant
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}

// redactURL masks credentials in a URL shown to people.
func redactURL(u string) string { return redact.URL(u) }
