// Package custom builds the connectors people declare in keep.toml over
// an HTTP API ([connectors.custom.NAME]): each method is a request the
// http connector sends, so a custom write has the same ledger, identity,
// Idempotency-Key header, reconcile probe, redaction and error classes as
// a built-in one, plus the statuses the declaration maps itself.
package custom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	khttp "github.com/keep-run/keep/internal/connector/http"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/redact"
)

var placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// New builds the connector name of the declaration c. Its requests go
// through the http connector with guard ([connectors.http] allow applies
// to custom connectors too: their base_url is checked like any URL).
func New(name string, c Custom, guard *netguard.Guard) *connector.Connector {
	req := khttp.New(guard).Methods["request"]
	out := &connector.Connector{Name: name, Doc: c.Doc + " (declared in keep.toml over " + c.BaseURL + ")", Methods: map[string]*connector.Method{}, Sources: map[string][]string{}}
	for _, src := range c.Sources {
		s, t, _ := strings.Cut(src, "/")
		out.Sources[s] = append(out.Sources[s], t)
	}
	for mname, m := range c.Methods {
		out.Methods[mname] = method(name, mname, c, m, req)
	}
	return out
}

func method(cname, mname string, c Custom, m CustomMethod, req *connector.Method) *connector.Method {
	full := cname + "." + mname
	write := m.Kind == "write"
	verb := strings.ToUpper(m.Method)
	if verb == "" {
		verb = "GET"
		if write {
			verb = "POST"
		}
	}
	d := &decl{c: c, m: m, verb: verb, full: full, write: write}
	meth := &connector.Method{Name: mname, Kind: connector.KindRead, Identity: m.Identity, Validate: d.validate,
		Do: func(ctx context.Context, call connector.Call) connector.Result {
			args, err := d.request(call.Args)
			if errors.Is(err, errUnsetVar) {
				// A person's setting, not the script's bug: nothing was sent.
				return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassPermission, "%s: %v", full, err)}
			}
			if err != nil {
				return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassLogic, "%s: %v", full, err)}
			}
			r := req.Do(ctx, connector.Call{Args: args, IdempotencyKey: call.IdempotencyKey, Secret: call.Secret})
			return d.remap(r)
		},
		Target: func(a map[string]any) string { u, _ := d.url(m.Path, a); return verb + " " + u },
		Doc:    d.doc(),
	}
	if m.Kind == "readById" {
		meth.Kind = connector.KindReadByID
	}
	if write {
		meth.Kind = connector.KindMutate
		meth.ComparePayload = func(old, new map[string]any) connector.Comparison {
			a, _ := json.Marshal(old)
			b, _ := json.Marshal(new)
			if string(a) == string(b) {
				return connector.Equivalent
			}
			return connector.Significant
		}
		if m.Reconcile != nil {
			meth.Reconcile = func(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
				args, err := d.request(call.Args)
				if err != nil {
					return connector.ReconcileRetry, nil, err
				}
				probe, err := d.url(m.Reconcile["path"], call.Args)
				if err != nil {
					return connector.ReconcileRetry, nil, err
				}
				pm := strings.ToUpper(m.Reconcile["method"])
				if pm == "" {
					pm = "GET"
				}
				// The http connector puts the key in {idempotencyKey} itself.
				args["reconcile"] = map[string]any{"method": pm, "url": probe, "headers": args["headers"]}
				return req.Reconcile(ctx, connector.Call{Args: args, IdempotencyKey: call.IdempotencyKey, Secret: call.Secret})
			}
		}
	}
	return meth
}

type decl struct {
	c     Custom
	m     CustomMethod
	verb  string
	full  string
	write bool
}

func (d *decl) validate(a map[string]any) error {
	for _, r := range d.m.Required {
		if v, ok := a[r]; !ok || v == nil || v == "" {
			return fmt.Errorf("%s needs %s (%s)", d.full, r, d.m.Params[r])
		}
	}
	var unknown []string
	for k := range a {
		if _, ok := d.m.Params[k]; !ok && k != "subkey" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("%s has no parameter %s (keep.toml declares: %s)", d.full, strings.Join(unknown, ", "), strings.Join(names(d.m.Params), ", "))
	}
	for _, p := range placeholder.FindAllStringSubmatch(d.m.Path, -1) {
		v, ok := a[p[1]]
		if !ok {
			return fmt.Errorf("%s needs %s: its path %s uses it", d.full, p[1], d.m.Path)
		}
		if p[1] != "idempotencyKey" {
			if _, err := segment(p[1], v); err != nil {
				return fmt.Errorf("%s: %v (its path is %s)", d.full, err, d.m.Path)
			}
		}
	}
	return nil
}

// segment is a parameter's value as one segment of a path: percent-encoded,
// and never one that would move the request elsewhere on the server
// ("..", ".", a "/" or "\" that some servers decode, an empty segment).
func segment(name string, v any) (string, error) {
	s := fmt.Sprint(v)
	switch {
	case s == "" || s == "." || s == "..":
		return "", fmt.Errorf("%s is %q, which is not a path segment", name, s)
	case strings.ContainsAny(s, "/\\"):
		return "", fmt.Errorf("%s %q holds a slash; a path parameter fills one segment of the path", name, s)
	}
	return url.PathEscape(s), nil
}

func names(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// url fills a path's {param}s and joins it to base_url; {idempotencyKey}
// stays for the http connector to fill.
func (d *decl) url(path string, a map[string]any) (string, error) {
	var bad error
	p := placeholder.ReplaceAllStringFunc(path, func(m string) string {
		name := m[1 : len(m)-1]
		if name == "idempotencyKey" {
			return m
		}
		v, ok := a[name]
		if !ok {
			bad = fmt.Errorf("the path %s needs %s", path, name)
			return m
		}
		seg, err := segment(name, v)
		if err != nil {
			bad = err
		}
		return seg
	})
	if bad != nil {
		return "", bad
	}
	return strings.TrimRight(d.c.BaseURL, "/") + p, nil
}

// request turns a call into http.request's arguments: the path filled,
// the other params as the query (reads) or a JSON body (writes), the
// declared headers with ${VAR}s from the environment (a {secret:NAME} in
// them the http connector fills at the call, from keep's secrets).
func (d *decl) request(a map[string]any) (map[string]any, error) {
	u, err := d.url(d.m.Path, a)
	if err != nil {
		return nil, err
	}
	inPath := map[string]bool{}
	for _, p := range placeholder.FindAllStringSubmatch(d.m.Path, -1) {
		inPath[p[1]] = true
	}
	rest := map[string]any{}
	for k, v := range a {
		if !inPath[k] && k != "subkey" {
			rest[k] = v
		}
	}
	out := map[string]any{"method": d.verb, "url": u}
	if d.write && len(rest) > 0 {
		out["json"] = rest
	} else if len(rest) > 0 {
		q := url.Values{}
		for _, k := range names(toStrings(rest)) {
			q.Set(k, fmt.Sprint(rest[k]))
		}
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		out["url"] = u + sep + q.Encode()
	}
	headers, err := d.headers()
	if err != nil {
		return nil, err
	}
	out["headers"] = headers
	return out, nil
}

// errUnsetVar is a header's ${VAR} that keep's environment does not set: the
// call is refused before anything is sent (a "Bearer " with no token would
// only come back as a 401 that names nothing).
var errUnsetVar = errors.New("unset variable")

// headers are the declared headers with their ${VAR}s filled in.
func (d *decl) headers() (map[string]any, error) {
	headers := map[string]any{}
	for _, k := range names(d.c.Headers) {
		var missing []string
		headers[k] = os.Expand(d.c.Headers[k], func(name string) string {
			// A header's ${VAR} is a credential: masked wherever it appears.
			val := os.Getenv(name)
			if val == "" {
				missing = append(missing, name)
			}
			redact.Learn(val)
			return val
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: keep.toml's header %s of [connectors.custom.%s] uses ${%s}, which keep's environment does not set: set it where keep runs and restart keep",
				errUnsetVar, k, strings.SplitN(d.full, ".", 2)[0], strings.Join(missing, "}, ${"))
		}
	}
	return headers, nil
}

func toStrings(m map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// remap applies the declaration's status → class map to a failure.
func (d *decl) remap(r connector.Result) connector.Result {
	if r.Err == nil || len(d.m.Errors) == 0 {
		return r
	}
	v, _ := r.Value.(map[string]any)
	status, ok := v["status"].(int)
	if !ok {
		return r
	}
	class, ok := d.m.Errors[fmt.Sprint(status)]
	if !ok {
		return r
	}
	r.Err = kt.Errorf(kt.ErrorClass(class), "%s (keep.toml maps %d to %s)", r.Err.Message, status, class)
	if d.write {
		r.Outcome = connector.OutcomeFailed // the declaration says the write did not happen
	}
	return r
}

func (d *decl) doc() connector.MethodDoc {
	doc := connector.MethodDoc{Summary: d.m.Doc, Result: "the response as `http.request` returns it: `{ status, headers, body, json }`", ResultTS: khttp.ResultTS,
		Errors: "as `http.request`"}
	if doc.Summary == "" {
		doc.Summary = d.verb + " " + d.c.BaseURL + d.m.Path
	}
	req := map[string]bool{}
	for _, r := range d.m.Required {
		req[r] = true
	}
	for _, n := range names(d.m.Params) {
		doc.Params = append(doc.Params, connector.Param{Name: n, Type: "any", TS: "unknown", Required: req[n], Doc: d.m.Params[n]})
	}
	if d.write {
		doc.Params = append(doc.Params, connector.Param{Name: "subkey", Type: "string", Doc: "tells apart two calls of one run to the same target"})
		doc.Summary += ". Sent with `Idempotency-Key: keep-…`, the same for every attempt of the same write."
		if d.m.Reconcile != nil {
			doc.Reconcile = "probes " + strings.ToUpper(d.m.Reconcile["method"]+" ") + d.c.BaseURL + d.m.Reconcile["path"] + ": 2xx means it happened, 404 or 410 that it did not."
		}
	}
	if len(d.m.Errors) > 0 {
		var parts []string
		for _, s := range names(d.m.Errors) {
			parts = append(parts, s+" → "+d.m.Errors[s])
		}
		doc.Errors += "; keep.toml maps " + strings.Join(parts, ", ")
	}
	return doc
}
