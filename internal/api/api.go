// Package api is keep's HTTP JSON API under /api/v1/: the same reads and
// actions as the CLI, with the same field names, errors as
// {"error":{"code","message"}}. It also provides the request guard (token,
// CSRF, security headers) that the web pages share, and the change hub
// behind server-sent events.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/clock"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/intake"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/maintainer"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Server serves the API.
type Server struct {
	Store  store.Store
	Engine *engine.Engine
	// Changed is called after an action changed state (wakes the scheduler, notifies pages).
	Changed func(workflow string)
	Now     func() time.Time
	// Problem reports what keep serve cannot get past by itself (a full
	// disk); "" when all is well. Nil for no scheduler.
	Problem func() string
	// Retention is the policy POST /api/v1/prune applies ([retention]).
	Retention kt.Retention
	// WebhooksURL is where keep serve --webhooks-addr serves the webhooks
	// ("http://ADDR"; "" for nowhere), shown with each webhook.
	WebhooksURL string
}

// MaxBody bounds request bodies (a deployed script included).
const MaxBody = 4 << 20

// Handler returns the /api/v1/ routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/health", s.health)
	mux.HandleFunc("GET /api/v1/workflows", s.listWorkflows)
	mux.HandleFunc("POST /api/v1/workflows", s.deploy)
	mux.HandleFunc("GET /api/v1/workflows/{wf}", s.getWorkflow)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/versions", s.versions)
	mux.HandleFunc("POST /api/v1/workflows/{wf}/{verb}", s.workflowAction)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/inputs", s.inputs)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/outputs", s.outputs)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/runs", s.runs)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/items", s.items)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/blocked", s.blocked)
	mux.HandleFunc("GET /api/v1/blocked", s.blocked)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/schedule", s.schedule)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/grants", s.grants)
	mux.HandleFunc("GET /api/v1/inputs/{ref}", s.getInput)
	mux.HandleFunc("GET /api/v1/connections", s.connections)
	mux.HandleFunc("GET /api/v1/secrets", s.secrets)
	mux.HandleFunc("GET /api/v1/nodes", s.nodes)
	mux.HandleFunc("POST /api/v1/prune", s.prune)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/topics", s.topics)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/graph", s.graph)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/activity", s.activity)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/events", s.events)
	mux.HandleFunc("POST /api/v1/workflows/{wf}/topics/{topic}/skip-pending", s.skipPending)
	mux.HandleFunc("POST /api/v1/workflows/{wf}/topics/{topic}/events", s.publish)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/webhooks", s.webhooks)
	mux.HandleFunc("POST /api/v1/workflows/{wf}/webhooks/take-held", s.heldAction(kt.ActTakeHeld))
	mux.HandleFunc("POST /api/v1/workflows/{wf}/webhooks/drop-held", s.heldAction(kt.ActDropHeld))
	mux.HandleFunc("GET /api/v1/workflows/{wf}/decisions", s.decisions)
	mux.HandleFunc("POST /api/v1/workflows/{wf}/grant", s.grant)
	mux.HandleFunc("POST /api/v1/workflows/{wf}/revoke", s.revoke)
	mux.HandleFunc("GET /api/v1/workflows/{wf}/repairs", s.repairs)
	mux.HandleFunc("POST /api/v1/workflows/{wf}/repairs/{id}/{verb}", s.decideRepair)
	mux.HandleFunc("POST /api/v1/workflows/{wf}/handlers/{handler}/reset-state", s.resetState)
	mux.HandleFunc("GET /api/v1/runs/{id}", s.getRun)
	mux.HandleFunc("GET /api/v1/runs/{id}/trace", s.trace)
	mux.HandleFunc("POST /api/v1/runs/{id}/resolve", s.resolve)
	mux.HandleFunc("POST /api/v1/runs/{id}/approve", s.approve)
	mux.HandleFunc("GET /api/v1/items/{ref}", s.getItem)
	mux.HandleFunc("POST /api/v1/items/{ref}/{verb}", s.itemAction)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		Error(w, http.StatusNotFound, "not_found", fmt.Sprintf("no API route %s %s (see docs/api.md)", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if where := notText(r); where != "" {
			// PostgreSQL refuses such a parameter (SQLSTATE 22021), which
			// was an internal error (500) on any route.
			Error(w, http.StatusBadRequest, "bad_request", where+" is not text (UTF-8 without NUL bytes): keep's names, ids and searches are text")
			return
		}
		def := "api"
		if AuthOf(r) == AuthToken {
			def = "api (token)"
		}
		// The API authenticates and hands the actor and the proof on;
		// control.Control decides who may do what.
		ctx := control.WithProof(transition.WithActor(r.Context(), ActorOf(r, def)), proofOf(AuthOf(r)))
		mux.ServeHTTP(w, r.WithContext(ctx))
	})
}

// notText names the first part of a request's path or query that is not
// text, or "".
func notText(r *http.Request) string {
	if !isText(r.URL.Path) {
		return "the path " + strconv.Quote(r.URL.Path)
	}
	for k, vs := range r.URL.Query() {
		if !isText(k) {
			return "the query's key " + strconv.Quote(k)
		}
		for _, v := range vs {
			if !isText(v) {
				return "the query's " + k + " " + strconv.Quote(v)
			}
		}
	}
	return ""
}

// proofOf is how a request authenticated, as control.Control reads it.
func proofOf(a Auth) control.Proof {
	switch a {
	case AuthSecret:
		return control.ProofSecret
	case AuthToken:
		return control.ProofToken
	case AuthPage:
		return control.ProofPage
	}
	// A session (the page's cookie) proves nothing to the API: a page
	// changes state through its own forms, with their CSRF token, and the
	// page passes it on in process (ForPage).
	return control.ProofNone
}

// ActorOf names the person behind a request for the decision log: the
// X-Keep-Actor header (the CLI's --by) when the request carries the
// instance secret — its sender can read the data directory, so it is a
// person at keep's own terminal — or comes from keep's own page in this
// process (which names itself "web page"), else def. A header alone names
// nobody: a script once signed its decisions with any name it liked.
func ActorOf(r *http.Request, def string) string {
	if a := AuthOf(r); a != AuthSecret && a != AuthPage {
		return def
	}
	who := strings.TrimSpace(r.Header.Get("X-Keep-Actor"))
	if who == "" || len(who) > 100 || strings.ContainsFunc(who, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return def
	}
	return who
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return clock.Now()
}

func (s *Server) changed(wf string) {
	if s.Changed != nil {
		s.Changed(wf)
	}
}

// health answers whether keep serve is making progress: {ok, problem}.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	problem := ""
	if s.Problem != nil {
		problem = s.Problem()
	}
	JSON(w, http.StatusOK, apitype.HealthReply{OK: problem == "", Problem: problem})
}

// JSON writes v as the JSON answer.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Error writes {"error":{"code","message"}}.
func Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apitype.ErrorReply{Error: apitype.ErrorBody{Code: code, Message: msg}})
}

// fail maps keep's errors to HTTP statuses.
func fail(w http.ResponseWriter, err error) {
	var ae *kt.ActionError
	var ve *engine.ValidationError
	var se *script.SyntaxError
	var na *control.NotAllowedError
	switch {
	case errors.As(err, &na):
		w.Header().Set("WWW-Authenticate", `Bearer realm="keep"`)
		Error(w, http.StatusUnauthorized, "unauthorized", "changing state through keep's API needs proof of who you are ("+string(na.Action)+"): keep's CLI sends the instance secret of the data directory (DATA/"+APISecretName+", sent as Authorization: Bearer <its contents>) — run the keep command beside the data directory, or send keep serve's --token")
	case errors.Is(err, kt.ErrNotFound):
		Error(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, kt.ErrBadInput):
		Error(w, http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, kt.ErrNeedsConsent):
		Error(w, http.StatusConflict, "needs_consent", err.Error())
	case errors.Is(err, kt.ErrConflict) && errors.As(err, &ae):
		Error(w, http.StatusConflict, "not_applicable", ae.Msg)
	case errors.As(err, &ve):
		body := apitype.ErrorBody{Code: "invalid_script", Message: ve.Error(), Problems: ve.Problems}
		JSON(w, http.StatusUnprocessableEntity, apitype.ErrorReply{Error: body})
	case errors.As(err, &se):
		Error(w, http.StatusUnprocessableEntity, "invalid_script", se.Error())
	case kt.IsDamaged(err):
		// keep's stored state failed its check (issue 44): the message
		// names the row and what to restore.
		Error(w, http.StatusInternalServerError, "damaged_storage", err.Error())
	default:
		Error(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	// A person reading the API reads it indented; keep's own page, in
	// process (ForPage), decodes it at once: indenting and compacting
	// again cost it a third of a view's bytes (issue 44).
	if _, page := w.(pageWriter); !page {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// decode reads a JSON body into v; fields v does not have are refused.
func decode(r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBody))
	if err != nil {
		return fmt.Errorf("the request body is too large or unreadable: %v", err)
	}
	dec := json.NewDecoder(bytesReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the request body is not the expected JSON: %v", err)
	}
	return nil
}

func (s *Server) listWorkflows(w http.ResponseWriter, r *http.Request) {
	ss, err := report.Statuses(r.Context(), s.Store, "")
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, nonNil(ss))
}

func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	ss, err := report.Statuses(r.Context(), s.Store, wf)
	if err != nil {
		fail(w, err)
		return
	}
	cards, err := report.Blocked(r.Context(), s.Store, wf)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, map[string]any{"status": ss[0], "blocked": nonNil(cards)})
}

// Version is one deployed version.
type Version struct {
	ID        int64  `json:"id"`
	Version   string `json:"version"`
	File      string `json:"file"`
	Active    bool   `json:"active"`
	CreatedAt string `json:"createdAt"`
}

func (s *Server) versions(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	var out []Version
	err := s.Store.View(r.Context(), func(tx store.Tx) error {
		wrow, err := tx.WorkflowGet(wf)
		if err != nil {
			if errors.Is(err, kt.ErrNotFound) {
				return kt.Missing("there is no workflow %q", wf)
			}
			return err
		}
		vs, err := tx.VersionList(wf)
		for _, v := range vs {
			out = append(out, Version{ID: v.ID, Version: v.Label(), File: v.File, Active: v.ID == wrow.ActiveVersion, CreatedAt: report.Time(v.CreatedAt)})
		}
		return err
	})
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, nonNil(out))
}

func (s *Server) deploy(w http.ResponseWriter, r *http.Request) {
	if err := s.control().MayAct(r.Context(), kt.ActDeploy); err != nil {
		fail(w, err)
		return
	}
	var req apitype.DeployRequest
	if err := decode(r, &req); err != nil {
		Error(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if req.Script == "" {
		Error(w, http.StatusBadRequest, "bad_request", "script is required: the workflow's JavaScript source")
		return
	}
	if req.Kind != "" && req.Kind != "minor" && req.Kind != "major" {
		Error(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("kind %q: use minor or major", req.Kind))
		return
	}
	if req.Reprocess != "" && req.Kind != "major" {
		Error(w, http.StatusBadRequest, "bad_request", "reprocess goes with kind major")
		return
	}
	if req.File == "" {
		req.File = "workflow.js"
	}

	res, err := control.Deploy(r.Context(), s.Engine, req.File, req.Script, control.DeployOptions{Name: req.Name, Kind: kt.DeployKind(req.Kind), Reprocess: req.Reprocess, AcceptOrphans: req.AcceptOrphans, FilesRoot: req.FilesRoot, Grant: req.Grant, Test: req.Test})
	if err != nil {
		fail(w, err)
		return
	}
	n := res.Reprocessed
	s.changed(res.Workflow)
	var warnings []string
	for _, p := range res.Problems {
		warnings = append(warnings, p.String())
	}
	warnings = append(warnings, res.Warnings...)
	stranded := []apitype.StrandedTopic{}
	for _, x := range res.Stranded {
		stranded = append(stranded, apitype.StrandedTopic{Topic: x.Topic, Pending: x.Pending, Message: x.Message})
	}
	reply(w, apitype.DeployReply{Workflow: res.Workflow, Version: res.Version.Label(), Unchanged: res.Unchanged, Warnings: nonNil(warnings), Reprocessed: n, FilesRoot: res.FilesRoot, Granted: nonNil(res.Granted), Ungranted: nonNil(res.Ungranted), Unused: nonNil(res.Unused), Stranded: stranded})
}

func (s *Server) workflowAction(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	act, err := control.ActionOf(control.OnWorkflow, r.PathValue("verb"))
	if err != nil {
		fail(w, err)
		return
	}
	rep, err := s.control().Do(r.Context(), control.Request{Action: act, Workflow: wf})
	if err != nil {
		fail(w, err)
		return
	}
	s.changed(wf)
	reply(w, apitype.WorkflowActionReply{OK: true, Workflow: wf, Queued: rep.Queued, Message: rep.Message})
}

// inputs answers one page of a workflow's inputs, newest first
// (?limit=&cursor=&q=, see pages.go).
func (s *Server) inputs(w http.ResponseWriter, r *http.Request) {
	paged(w, r, func(p store.Page) ([]apitype.Input, report.Page, error) {
		return report.Inputs(r.Context(), s.Store, r.PathValue("wf"), p)
	})
}

// prune drops the bodies of finished work past the retention horizon
// (engine.Prune), or with ?dryRun=1 says what it would drop.
func (s *Server) prune(w http.ResponseWriter, r *http.Request) {
	if err := s.control().MayAct(r.Context(), kt.ActPrune); err != nil {
		fail(w, err)
		return
	}
	dry := false
	switch v := r.URL.Query().Get("dryRun"); v {
	case "", "0", "false":
	case "1", "true":
		dry = true
	default:
		Error(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("dryRun %q: use 1 or 0", v))
		return
	}
	rep, err := s.Engine.Prune(r.Context(), s.Retention, dry)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, rep)
}

// nodes lists the keep serve nodes sharing the store and what each holds.
func (s *Server) nodes(w http.ResponseWriter, r *http.Request) {
	ns, err := report.Nodes(r.Context(), s.Store, s.now().UnixMilli())
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, ns)
}

func (s *Server) topics(w http.ResponseWriter, r *http.Request) {
	ts, ps, err := report.Topics(r.Context(), s.Store, r.PathValue("wf"))
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, apitype.TopicsReply{Topics: ts, Producers: ps, SkipPending: kt.ChoiceIn(kt.ScopeTopic, kt.Resolution(kt.ActSkipPending), false)})
}

// graph answers the workflow drawn (issue 42): its nodes with their live
// counts and the edges between them.
func (s *Server) graph(w http.ResponseWriter, r *http.Request) {
	g, err := report.Graph(r.Context(), s.Store, r.PathValue("wf"), s.now())
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, g)
}

// activity answers what the workflow did per hour: ?hours= (1 to 744,
// default 24; 168 is a week).
func (s *Server) activity(w http.ResponseWriter, r *http.Request) {
	hours := 24
	if h := r.URL.Query().Get("hours"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil {
			Error(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("hours %q: use a number of hours, 24 for a day or 168 for a week", h))
			return
		}
		hours = n
	}
	a, err := report.Activity(r.Context(), s.Store, r.PathValue("wf"), hours, s.now())
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, a)
}

// events answers one page of events: ?topic=&status=&after=&limit=.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after int64
	limit := 100
	var err error
	if a := q.Get("after"); a != "" {
		if after, err = strconv.ParseInt(a, 10, 64); err != nil || after < 0 {
			Error(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("after %q: use the next of the previous page", a))
			return
		}
	}
	if l := q.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > 1000 {
			Error(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit %q: use a number from 1 to 1000", l))
			return
		}
	}
	page, err := report.Events(r.Context(), s.Store, r.PathValue("wf"), apitype.EventQuery{Topic: q.Get("topic"), Status: q.Get("status"), After: after, Limit: limit})
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, page)
}

func (s *Server) skipPending(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	rep, err := s.control().Do(r.Context(), control.Request{Action: kt.ActSkipPending, Workflow: wf, Topic: r.PathValue("topic")})
	s.actionReply(w, wf, rep.Message, err)
}

// webhooks answers a workflow's webhooks (their URLs, how each is
// verified, its secret's name) and their newest deliveries: ?limit= (1 to
// 1000, default 20).
func (s *Server) webhooks(w http.ResponseWriter, r *http.Request) {
	wf, limit := r.PathValue("wf"), 20
	if l := r.URL.Query().Get("limit"); l != "" {
		var err error
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > 1000 {
			Error(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit %q: use a number from 1 to 1000", l))
			return
		}
	}
	hooks, ds, held, err := report.Webhooks(r.Context(), s.Store, wf, s.WebhooksURL, limit)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, apitype.WebhooksReply{Workflow: wf, Served: s.WebhooksURL != "", Webhooks: hooks, Deliveries: ds, Held: held})
}

// heldAction takes or drops a workflow's held webhook deliveries (issue
// 40): those the body names, or all.
func (s *Server) heldAction(act kt.Action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wf := r.PathValue("wf")
		var req apitype.HeldRequest
		if r.ContentLength != 0 {
			if err := decode(r, &req); err != nil {
				Error(w, http.StatusBadRequest, "bad_request", err.Error())
				return
			}
		}
		rep, err := s.control().Do(r.Context(), control.Request{Action: act, Workflow: wf, Deliveries: req.Deliveries})
		s.actionReply(w, wf, rep.Message, err)
	}
}

// decisions answers a workflow's decision log, newest first: ?limit=
// (1 to 1000, default 20).
func (s *Server) decisions(w http.ResponseWriter, r *http.Request) {
	limit := 20
	if l := r.URL.Query().Get("limit"); l != "" {
		var err error
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > 1000 {
			Error(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit %q: use a number from 1 to 1000", l))
			return
		}
	}
	ds, err := report.Decisions(r.Context(), s.Store, r.PathValue("wf"), limit)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, ds)
}

// publish posts one event to a topic the workflow opens to the event API:
// its input and event in one transaction (control.Control's publish), 201 when
// new, 200 when the id was posted before.
func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	wf, topic := r.PathValue("wf"), r.PathValue("topic")
	var req apitype.PublishRequest
	if err := decode(r, &req); err != nil {
		Error(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("event for topic %s of %s: %v; send {\"id\": \"…\", \"title\": \"…\", \"payload\": {…}} with a payload of at most 1 MiB (see docs/api.md)", topic, wf, err))
		return
	}
	rep, err := s.control().Do(r.Context(), control.Request{Action: kt.ActPublish, Workflow: wf, Topic: topic,
		Event: intake.APIEvent{ID: string(req.ID), Title: req.Title, Payload: req.Payload}})
	if err != nil {
		fail(w, err)
		return
	}
	code := http.StatusCreated
	if rep.Posted.Already {
		code = http.StatusOK
	} else {
		s.changed(wf)
	}
	JSON(w, code, apitype.PublishReply{OK: true, Workflow: wf, Topic: topic, Input: rep.Posted.Input, Event: rep.Posted.Event, Already: rep.Posted.Already, Message: rep.Message})
}

// grant grants a workflow what a person allows it: without a body (or
// without items), what its active version uses and its blocked run was
// refused; with {"items": [...]}, exactly those.
func (s *Server) grant(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	var req apitype.GrantRequest
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			Error(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
	}
	rep, err := s.control().Do(r.Context(), control.Request{Action: kt.ActGrant, Workflow: wf, Items: req.Items})
	s.actionReply(w, wf, rep.Message, err)
}

// revoke takes grants back ({"items": [...]}, each as it was granted).
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	var req apitype.GrantRequest
	if err := decode(r, &req); err != nil {
		Error(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	rep, err := s.control().Do(r.Context(), control.Request{Action: kt.ActRevoke, Workflow: wf, Items: req.Items})
	s.actionReply(w, wf, rep.Message, err)
}

func (s *Server) repairs(w http.ResponseWriter, r *http.Request) {
	v, err := report.Repairs(r.Context(), s.Store, r.PathValue("wf"))
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, v)
}

// decideRepair approves or rejects a repair the Maintainer held.
func (s *Server) decideRepair(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	act, err := control.ActionOf(control.OnRepair, r.PathValue("verb"))
	if err != nil {
		fail(w, err)
		return
	}
	rep, err := s.control().Do(r.Context(), control.Request{Action: act, Workflow: wf, Repair: r.PathValue("id")})
	s.actionReply(w, wf, rep.Message, err)
}

func (s *Server) resetState(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	rep, err := s.control().Do(r.Context(), control.Request{Action: kt.ActResetState, Workflow: wf, Handler: r.PathValue("handler")})
	s.actionReply(w, wf, rep.Message, err)
}

// actionReply answers a workflow's action: what will happen, or why not.
func (s *Server) actionReply(w http.ResponseWriter, wf, msg string, err error) {
	if err != nil {
		fail(w, err)
		return
	}
	s.changed(wf)
	reply(w, apitype.WorkflowActionReply{OK: true, Workflow: wf, Message: msg})
}

// outputs, runs and items answer one page each, newest first
// (?limit=&cursor=, see pages.go).
func (s *Server) outputs(w http.ResponseWriter, r *http.Request) {
	paged(w, r, func(p store.Page) ([]apitype.Output, report.Page, error) {
		return report.Outputs(r.Context(), s.Store, r.PathValue("wf"), p)
	})
}

func (s *Server) runs(w http.ResponseWriter, r *http.Request) {
	paged(w, r, func(p store.Page) ([]apitype.Run, report.Page, error) {
		return report.Runs(r.Context(), s.Store, r.PathValue("wf"), p)
	})
}

func (s *Server) items(w http.ResponseWriter, r *http.Request) {
	orphaned := r.URL.Query().Get("orphaned")
	paged(w, r, func(p store.Page) ([]apitype.Item, report.Page, error) {
		return report.Items(r.Context(), s.Store, r.PathValue("wf"), orphaned == "1" || orphaned == "true", p)
	})
}

// blocked answers the cards of one workflow's blocked runs, or of every
// workflow's (GET /api/v1/blocked).
func (s *Server) blocked(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	if wf != "" {
		if _, err := report.Statuses(r.Context(), s.Store, wf); err != nil {
			fail(w, err)
			return
		}
	}
	v, err := report.Blocked(r.Context(), s.Store, wf)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, nonNil(v))
}

// schedule answers when a workflow's producers and tasks run next.
func (s *Server) schedule(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	if _, err := report.Statuses(r.Context(), s.Store, wf); err != nil {
		fail(w, err)
		return
	}
	v, err := report.Schedule(r.Context(), s.Store, wf)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, nonNil(v))
}

// grants answers what people granted a workflow and what a grant without
// items would allow now (control.ToGrant): what its active version uses
// that nobody granted, and what its blocked run was refused.
func (s *Server) grants(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	g := apitype.GrantsReply{Workflow: wf, Grants: []string{}}
	err := s.Store.View(r.Context(), func(tx store.Tx) error {
		var err error
		if g.ToGrant, err = control.ToGrant(tx, wf); errors.Is(err, kt.ErrNotFound) {
			return kt.Missing("there is no workflow %q (see keep status)", wf)
		} else if err != nil {
			return err
		}
		gs, err := tx.GrantList(wf)
		for _, x := range gs {
			g.Grants = append(g.Grants, x.Item)
		}
		return err
	})
	if err != nil {
		fail(w, err)
		return
	}
	g.ToGrant = nonNil(g.ToGrant)
	reply(w, g)
}

// getInput answers an input (by id or key source:type:id, in any
// workflow) and the writes it caused.
func (s *Server) getInput(w http.ResponseWriter, r *http.Request) {
	d, err := report.ShowInput(r.Context(), s.Store, r.PathValue("ref"))
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, d)
}

// connections answers the connected accounts, never their credentials.
func (s *Server) connections(w http.ResponseWriter, r *http.Request) {
	v, err := report.Connections(r.Context(), s.Store)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, nonNil(v))
}

// secrets answers the named secrets' names and when each was set, never
// their values.
func (s *Server) secrets(w http.ResponseWriter, r *http.Request) {
	v, err := report.Secrets(r.Context(), s.Store)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, nonNil(v))
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	d, err := report.ShowRun(r.Context(), s.Store, r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, d)
}

func (s *Server) trace(w http.ResponseWriter, r *http.Request) {
	d, err := report.ShowRun(r.Context(), s.Store, r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, map[string]any{"runId": d.Run.ID, "trace": d.Trace, "droppedTraceEntries": d.Dropped})
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	var req apitype.ResolveRequest
	if err := decode(r, &req); err != nil {
		Error(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	act, err := control.ActionOf(control.OnRun, req.Action)
	if err != nil {
		fail(w, err)
		return
	}
	s.act(w, r, act)
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request) { s.act(w, r, kt.ActApprove) }

func (s *Server) act(w http.ResponseWriter, r *http.Request, what kt.Action) {
	id := r.PathValue("id")
	rep, err := s.control().Do(r.Context(), control.Request{Action: what, Run: id})
	if err != nil {
		fail(w, err)
		return
	}
	s.changed(rep.Workflow)
	reply(w, apitype.RunActionReply{OK: true, RunID: id, Workflow: rep.Workflow, Action: string(what), Message: rep.Message})
}

func (s *Server) getItem(w http.ResponseWriter, r *http.Request) {
	d, err := report.ShowItem(r.Context(), s.Store, r.URL.Query().Get("workflow"), r.PathValue("ref"))
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, d)
}

func (s *Server) itemAction(w http.ResponseWriter, r *http.Request) {
	ref, verb, wf := r.PathValue("ref"), r.PathValue("verb"), r.URL.Query().Get("workflow")
	act, err := control.ActionOf(control.OnItem, verb)
	if err != nil {
		fail(w, err)
		return
	}
	rep, err := s.control().Do(r.Context(), control.Request{Action: act, Workflow: wf, Item: ref})
	msg := rep.Message
	if err != nil {
		fail(w, err)
		return
	}
	s.changed(rep.Workflow)
	reply(w, apitype.ItemActionReply{OK: true, Item: ref, Workflow: rep.Workflow, Action: verb, Message: msg})
}

// control is the one place people's actions are carried out (control.Control).
func (s *Server) control() *control.Control {
	return &control.Control{Store: s.Store, Now: s.now,
		DecideRepair: func(ctx context.Context, wf, id string, approve bool, now time.Time) (string, error) {
			return maintainer.Decide(ctx, s.Store, s.Engine, maintainer.RepairDecision{Workflow: wf, Repair: id, Approve: approve, At: now})
		}}
}
