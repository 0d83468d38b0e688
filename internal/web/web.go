// Package web is keep's page for people: workflows at a glance, each
// workflow's inputs and what they caused (ch 17), the blocked-work cards with
// their actions, runs and items. Server-rendered with html/template (every
// value escaped), small hand-written CSS and JS, all embedded in the binary.
//
// It reads and acts only through keep's API (package api's handler, called
// in process): it imports api for the guard and that call, apiclient and
// apitype, never the engine or the store (test/layers holds it to that).
package web

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/apiclient"
	"github.com/keep-run/keep/internal/apitype"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Server serves the pages. What a page shows it reads through the API, and
// what a person does on it is the API's POST (API: keep's API handler in
// this process, as the page), as the CLI does: the page and the CLI get
// the same answers, errors and refusals from one path. The page's guard
// (session, CSRF token) stands in front of the page; the API decides.
type Server struct {
	API   *apiclient.Client
	Guard *api.Guard
	// Changed tells the pages that something changed outside the API (an
	// account connected); the API's own actions say it themselves.
	Changed func(workflow string)
	Now     func() time.Time
	// Problem reports what keep serve cannot get past by itself; shown on
	// every page. Nil for none.
	Problem func() string
	// Accounts lets the page connect accounts; nil: it only lists them.
	Accounts Connector
	pages    map[string]*pageSet
}

// pageSet is one page's templates, parsed once (New). A render borrows a
// copy whose csrf function reads the copy's token, sets the token, runs it
// and gives it back: each copy is cloned and escaped by html/template once,
// on its first use, never per request (issue 44: cloning and escaping the
// set on every render cost about half a megabyte a view). Copies are made
// as concurrent renders need them and kept (at most maxIdle idle).
type pageSet struct {
	base *template.Template
	mu   sync.Mutex
	idle []*pageCopy
}

type pageCopy struct {
	t     *template.Template
	token string
}

const maxIdle = 8

func (p *pageSet) get() (*pageCopy, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	t, err := p.base.Clone()
	if err != nil {
		return nil, err
	}
	c := &pageCopy{t: t}
	t.Funcs(template.FuncMap{"csrf": func() string { return c.token }})
	return c, nil
}

func (p *pageSet) put(c *pageCopy) {
	c.token = ""
	p.mu.Lock()
	if len(p.idle) < maxIdle {
		p.idle = append(p.idle, c)
	}
	p.mu.Unlock()
}

// Connector runs the OAuth flow of "Connect Google" for the page: the
// browser goes to StartGoogle's URL and comes back to redirect with a
// state and a code (package daemon wires the real one).
type Connector interface {
	StartGoogle(ctx context.Context, redirect string) (authURL string, err error)
	FinishGoogle(ctx context.Context, state, code string) (account string, err error)
}

var baseFuncs = template.FuncMap{
	"json": func(v any) string {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	},
	"clock": func(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") },
	// brief renders a JSON result on one line, cropped.
	"brief": brief,
	"csrf":  func() string { return "" },
}

// brief renders a JSON result on one line, cropped. An http response
// reads best as its status and JSON body (or text body).
func brief(raw json.RawMessage) string {
	var resp struct {
		Status  json.RawMessage `json:"status"`
		Headers json.RawMessage `json:"headers"`
		JSON    json.RawMessage `json:"json"`
		Body    json.RawMessage `json:"body"`
	}
	isSet := func(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }
	if len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, &resp) == nil && isSet(resp.Status) && isSet(resp.Headers) {
		var b bytes.Buffer
		b.WriteString(`{`)
		if isSet(resp.JSON) {
			b.WriteString(`"json":`)
			b.Write(resp.JSON)
			b.WriteString(`,`)
		} else if body := ""; json.Unmarshal(resp.Body, &body) == nil && body != "" {
			b.WriteString(`"body":`)
			b.Write(resp.Body)
			b.WriteString(`,`)
		}
		b.WriteString(`"status":`)
		b.Write(resp.Status)
		b.WriteString(`}`)
		raw = b.Bytes()
	}
	s := strings.Join(strings.Fields(string(raw)), " ")
	if r := []rune(s); len(r) > 120 {
		s = string(r[:119]) + "…"
	}
	return s
}

// New parses the templates once. handler is keep's API handler (without
// keep serve's guard), served to the page in process (api.ForPage): every
// page reads through its GET routes and every button is one of its POST
// routes (apiclient.InProcess), so the page and the CLI show and do the
// same from one path. The decision log names the page "web page" ("web
// page (signed in)" behind a token).
func New(g *api.Guard, handler http.Handler, changed func(string)) *Server {
	who := "web page"
	if g.Token != "" {
		who = "web page (signed in)"
	}
	s := &Server{API: apiclient.InProcess(api.ForPage(handler), who), Guard: g, Changed: changed, Now: time.Now, pages: map[string]*pageSet{}}
	for _, page := range []string{"index", "workflow", "run", "item", "login", "topics", "connections", "webhooks"} {
		t := template.Must(template.New("layout").Funcs(baseFuncs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html"))
		s.pages[page] = &pageSet{base: t}
	}
	return s
}

// Handler returns the page routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /w/{wf}", s.workflow)
	mux.HandleFunc("POST /w/{wf}/runs/{id}/resolve", s.resolve)
	mux.HandleFunc("POST /w/{wf}/runs/{id}/approve", s.resolve)
	mux.HandleFunc("POST /w/{wf}/{verb}", s.workflowAction)
	mux.HandleFunc("GET /w/{wf}/topics", s.topics)
	mux.HandleFunc("GET /w/{wf}/webhooks", s.webhooks)
	mux.HandleFunc("POST /w/{wf}/topics/{topic}/skip-pending", s.skipPending)
	mux.HandleFunc("POST /w/{wf}/webhooks/take-held", s.heldAction(true))
	mux.HandleFunc("POST /w/{wf}/webhooks/drop-held", s.heldAction(false))
	mux.HandleFunc("POST /w/{wf}/handlers/{handler}/reset-state", s.resetState)
	mux.HandleFunc("GET /runs/{id}", s.run)
	mux.HandleFunc("GET /items/{ref}", s.item)
	mux.HandleFunc("POST /items/{ref}/{verb}", s.itemAction)
	mux.HandleFunc("POST /w/{wf}/repairs/{id}/{verb}", s.decideRepair)
	mux.HandleFunc("GET /connections", s.connections)
	mux.HandleFunc("POST /connect/google", s.connectGoogle)
	mux.HandleFunc("GET /connect/google/callback", s.connectGoogleDone)
	mux.HandleFunc("GET /login", s.login)
	mux.HandleFunc("POST /login", s.login)
	return mux
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name, title string, data map[string]any) {
	set := s.pages[name]
	c, err := set.get()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer set.put(c)
	c.token = s.Guard.CSRFToken(w, r)
	if data == nil {
		data = map[string]any{}
	}
	data["Title"] = title
	data["Problem"] = s.problem()
	if _, ok := data["Flash"]; !ok {
		data["Flash"] = s.flashOf(r)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := c.t.ExecuteTemplate(w, "layout", data); err != nil {
		fmt.Fprintf(w, "<p>page error: %s</p>", template.HTMLEscapeString(err.Error()))
	}
}

func (s *Server) failPage(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	var apiErr *apiclient.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		status = http.StatusNotFound
	}
	w.WriteHeader(status)
	s.render(w, r, "index", "error", map[string]any{"Flash": err.Error(), "Workflows": nil})
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	ss, err := s.API.Statuses(r.Context())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	ns, err := s.API.Nodes(r.Context())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	// Each workflow's last day as a small chart (issue 42).
	sparks := map[string]template.HTML{}
	for _, st := range ss {
		a, err := s.API.Activity(r.Context(), st.Name, 24)
		if err != nil {
			sparks[st.Name] = template.HTML(template.HTMLEscapeString("no chart: " + err.Error()))
			continue
		}
		sparks[st.Name] = activitySVG(a, true)
	}
	s.render(w, r, "index", "workflows", map[string]any{"Workflows": ss, "Nodes": ns, "Sparks": sparks})
}

// problem is the banner text of keep serve's current problem, if any.
func (s *Server) problem() string {
	if s.Problem == nil {
		return ""
	}
	return s.Problem()
}

type inputRow struct {
	Input   *apitype.Input
	Outputs []*apitype.Output
}

type group struct {
	Source, Type string
	Rows         []inputRow
}

type filter struct {
	Status, Text, Since string
}

func (f filter) Any() bool { return f.Status != "" || f.Text != "" || f.Since != "" }

var periods = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

func (s *Server) workflow(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	ctx := r.Context()
	v, err := s.API.Workflow(ctx, wf)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	cards := v.Blocked
	q := r.URL.Query()
	f := filter{Status: q.Get("status"), Text: strings.TrimSpace(q.Get("q")), Since: q.Get("since")}
	// One page of the newest inputs (issue 44), searched by the API
	// (title, id, key); the status and period filter that page.
	opts := apiclient.ListOptions{Limit: webPage, Cursor: q.Get("cursor"), Search: f.Text}
	var inputs []apitype.Input
	var info apiclient.PageInfo
	if f.Status == "orphaned" {
		var items []apitype.Item
		items, info, err = s.API.ItemsPage(ctx, wf, true, opts)
		for _, it := range items {
			inputs = append(inputs, apitype.Input{ID: it.ID, Key: it.Key, Source: it.Source, Type: it.Type, ExternalID: it.ExternalID, Title: it.Title, Status: it.Status,
				Attempt: it.Attempt, CreatedAt: it.CreatedAt, UpdatedAt: it.UpdatedAt})
		}
	} else {
		inputs, info, err = s.API.InputsPage(ctx, wf, opts)
	}
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	// Their writes: the newest outputs, as many as fit a page of them; an
	// input whose writes are older shows them on its own page.
	outputs, _, err := s.API.OutputsPage(ctx, wf, apiclient.ListOptions{Limit: webPage})
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	// How many orphans, up to a hundred ("100+" beyond).
	orphans, more, err := s.API.ItemsPage(ctx, wf, true, apiclient.ListOptions{Limit: 100})
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	orphanCount := strconv.Itoa(len(orphans))
	if more.Next != "" {
		orphanCount += "+"
	}
	if len(orphans) == 0 {
		orphanCount = ""
	}
	gs, stale := s.groupInputs(inputs, outputs, orphans, f)
	data := map[string]any{"Status": v.Status, "Cards": cards, "Groups": gs, "Filter": f, "Stale": stale, "Orphans": orphanCount,
		"Statuses": []string{"pending", "needs_attention", "failed", "done", "skipped", "orphaned"}, "Periods": []string{"1h", "24h", "7d", "30d"},
		"Paging": paging(r, info, len(inputs), opts.Cursor != "")}
	s.glance(ctx, wf, data)
	if q.Get("runs") == "1" {
		runs, err := s.API.Runs(ctx, wf, 100)
		if err != nil {
			s.failPage(w, r, err)
			return
		}
		data["ShowRuns"], data["Runs"] = true, runs
	}
	s.render(w, r, "workflow", wf, data)
}

// glance adds a workflow's pictures (issue 42) to its page's data: the
// workflow drawn, its last day and week per hour. A picture the API cannot
// answer says why in its place; the rest of the page is still shown.
func (s *Server) glance(ctx context.Context, wf string, data map[string]any) {
	if g, err := s.API.Graph(ctx, wf); err != nil {
		data["GraphError"] = err.Error()
	} else {
		data["Graph"] = graphSVG(g)
	}
	// The day is the week's last 24 hours: one read of the API for both.
	if a, err := s.API.Activity(ctx, wf, 168); err != nil {
		data["DayError"], data["WeekError"] = err.Error(), err.Error()
	} else {
		data["Day"], data["Week"] = activitySVG(lastHours(a, 24), false), activitySVG(a, false)
	}
}

// lastHours is a's last n hours, as the API answers them for n hours.
func lastHours(a apitype.Activity, n int) apitype.Activity {
	if len(a.Hours) > n {
		a.Hours = a.Hours[len(a.Hours)-n:]
		a.From = a.Hours[0].Start
	}
	return a
}

// webPage is how many inputs the workflow's page shows at a time.
const webPage = 50

// pager is the workflow page's paging: the links to the older and the
// newer page ("" for none), and what the page shows of how many.
type pager struct {
	Older, Newer, Newest string
	Shown, Total         int
	Deep                 bool // not the newest page
}

func paging(r *http.Request, info apiclient.PageInfo, shown int, deep bool) pager {
	at := func(cursor string) string {
		q := r.URL.Query()
		q.Del("cursor")
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		return "?" + q.Encode()
	}
	p := pager{Shown: shown, Total: info.Total, Deep: deep, Newest: at("")}
	if info.Next != "" {
		p.Older = at(info.Next)
	}
	if info.Prev != "" {
		p.Newer = at(info.Prev)
	}
	return p
}

// groupInputs sorts the inputs that pass the filter into groups by source
// and type, each with its outputs, and counts the inputs pending for more
// than a week.
func (s *Server) groupInputs(inputs []apitype.Input, outputs []apitype.Output, orphans []apitype.Item, f filter) (gs []group, stale int) {
	if f.Status == "orphaned" {
		// The page is of orphans already (ItemsPage).
		orphans = nil
		for _, in := range inputs {
			orphans = append(orphans, apitype.Item{ID: in.ID})
		}
	}
	byInput := make(map[string][]*apitype.Output, len(outputs))
	for i := range outputs {
		for _, id := range outputs[i].InputIDs {
			byInput[id] = append(byInput[id], &outputs[i])
		}
	}
	orphaned := map[string]bool{}
	for _, o := range orphans {
		orphaned[o.ID] = true
	}
	now := s.Now()
	groups := map[string]*group{}
	var order []string
	for i := range inputs {
		in := &inputs[i]
		created, _ := time.Parse(time.RFC3339Nano, in.CreatedAt)
		if in.Status == "pending" && now.Sub(created) > 7*24*time.Hour {
			stale++
		}
		if f.Status == "orphaned" && !orphaned[in.ID] || f.Status != "" && f.Status != "orphaned" && string(in.Status) != f.Status {
			continue
		}
		if d, ok := periods[f.Since]; ok && now.Sub(created) > d {
			continue
		}
		src, typ := in.Source, in.Type
		if src == "" {
			src, typ = "items", "task"
		}
		k := src + "/" + typ
		if groups[k] == nil {
			groups[k] = &group{Source: src, Type: typ}
			order = append(order, k)
		}
		groups[k].Rows = append(groups[k].Rows, inputRow{Input: in, Outputs: byInput[in.ID]})
	}
	sort.Strings(order)
	for _, k := range order {
		gs = append(gs, *groups[k])
	}
	return gs, stale
}

func (s *Server) back(w http.ResponseWriter, r *http.Request, to, msg string) {
	http.Redirect(w, r, s.flashURL(to, msg), http.StatusSeeOther)
}

// flashURL is to with msg as its flash message, signed: the page shows
// only messages keep itself put in a link, never a text someone else's
// link carries (?flash=Your+session+expired,+log+in+at+evil.example).
func (s *Server) flashURL(to, msg string) string {
	return to + "?flash=" + url.QueryEscape(msg) + "&fs=" + s.Guard.Sign(msg)
}

// flashOf is the request's flash message when keep signed it, else "".
func (s *Server) flashOf(r *http.Request) string {
	q := r.URL.Query()
	if msg := q.Get("flash"); msg != "" && s.Guard.Signed(msg, q.Get("fs")) {
		return msg
	}
	return ""
}

// Each action of the page is one POST of the API (docs/api.md's
// "Actions"): the page maps its form to the route and shows what the API
// answered — its message, or why it refused. A path of the page that maps
// to no route is no page (404).

// resolve is a card's decision on a blocked run: POST /api/v1/runs/{id}/
// approve, or …/resolve with the form's action (the API refuses one it
// does not know, in its words).
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	wf, id := r.PathValue("wf"), r.PathValue("id")
	what := r.PostFormValue("action")
	var rep apitype.RunActionReply
	var err error
	if strings.HasSuffix(r.URL.Path, "/approve") || what == "approve" {
		rep, err = s.API.Approve(r.Context(), id)
	} else {
		rep, err = s.API.Resolve(r.Context(), id, what)
	}
	s.acted(w, r, "/w/"+url.PathEscape(wf), rep.Message, err)
}

// workflowAction is a workflow's Pause, Resume, Run now, Grant or Revoke.
func (s *Server) workflowAction(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	if err := r.ParseForm(); err != nil {
		s.back(w, r, "/w/"+url.PathEscape(wf), "the form could not be read: "+err.Error())
		return
	}
	// The page names no list of actions: the API's answer decides
	// (control's one table), an unknown verb gets the refusal the CLI
	// gets. Grant and Revoke are asked apart only because they carry the
	// form's items.
	var rep apitype.WorkflowActionReply
	var err error
	switch verb := r.PathValue("verb"); verb {
	case "grant":
		// The card's Grant names the grant its run was refused; the
		// workflow's Grant names none (what the version uses).
		rep, err = s.API.Grant(r.Context(), wf, r.PostForm["item"])
	case "revoke":
		rep, err = s.API.Revoke(r.Context(), wf, r.PostForm["item"])
	default:
		rep, err = s.API.WorkflowAction(r.Context(), wf, verb)
	}
	s.acted(w, r, "/w/"+url.PathEscape(wf), rep.Message, err)
}

// topics is chapter 06's view of a workflow's topics and events, with the
// controls to skip a topic's pending events and to reset a producer.
func (s *Server) topics(w http.ResponseWriter, r *http.Request) {
	s.renderTopics(w, r, nil)
}

// webhooks shows a workflow's webhooks (URL, verification, the secret's
// name) and their last deliveries, as GET …/webhooks answers them.
func (s *Server) webhooks(w http.ResponseWriter, r *http.Request) {
	wf := r.PathValue("wf")
	v, err := s.API.Webhooks(r.Context(), wf, 50)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, "webhooks", wf+": webhooks", map[string]any{"Workflow": wf, "Served": v.Served, "Webhooks": v.Webhooks, "Deliveries": v.Deliveries, "Held": v.Held})
}

// confirmation is the second step of a control: what it will do, and the
// button that does it.
type confirmation struct {
	Question, Detail, Action, Button string
	// SkipPending: the control is a topic's skip-pending, whose risk
	// (the API's TopicsReply.SkipPending) the button's line says.
	SkipPending bool
}

func (s *Server) renderTopics(w http.ResponseWriter, r *http.Request, c *confirmation) {
	wf, q := r.PathValue("wf"), r.URL.Query()
	tp, err := s.API.Topics(r.Context(), wf)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
	page, err := s.API.Events(r.Context(), wf, apitype.EventQuery{Topic: q.Get("topic"), Status: q.Get("status"), After: after, Limit: webPage})
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	ds, err := s.API.Decisions(r.Context(), wf, 20)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	data := map[string]any{"Workflow": wf, "Topics": tp.Topics, "Producers": tp.Producers, "Page": page,
		"Topic": q.Get("topic"), "State": q.Get("status"), "States": apitype.EventStates, "Confirm": c, "Decisions": ds, "SkipPending": tp.SkipPending}
	if c != nil && c.SkipPending {
		data["ConfirmChoice"] = tp.SkipPending
	}
	s.render(w, r, "topics", wf+": topics", data)
}

// skipPending and resetState are confirmed first: the first press shows
// what will happen (c), the second (confirm=yes) does it (act).
func (s *Server) skipPending(w http.ResponseWriter, r *http.Request) {
	wf, topic := r.PathValue("wf"), r.PathValue("topic")
	s.confirmed(w, r, confirmation{Question: fmt.Sprintf("Skip every pending event of topic %s?", topic),
		Detail: "Its consumer will not see them, and their inputs show skipped. Events a run holds stay with it. This is recorded in the decision log.",
		Action: "/w/" + url.PathEscape(wf) + "/topics/" + url.PathEscape(topic) + "/skip-pending", Button: "Skip them", SkipPending: true},
		func() (string, error) {
			rep, err := s.API.SkipPending(r.Context(), wf, topic)
			return rep.Message, err
		})
}

// heldAction takes (take) or drops the held webhook deliveries of a
// workflow: the one the form names (record), or all.
func (s *Server) heldAction(take bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wf := r.PathValue("wf")
		var ids []int64
		if rec := r.FormValue("record"); rec != "" {
			id, err := strconv.ParseInt(rec, 10, 64)
			if err != nil {
				s.acted(w, r, "/w/"+url.PathEscape(wf)+"/webhooks", "", fmt.Errorf("record %q is not a delivery's record", rec))
				return
			}
			ids = []int64{id}
		}
		var rep apitype.WorkflowActionReply
		var err error
		if take {
			rep, err = s.API.TakeHeld(r.Context(), wf, ids)
		} else {
			rep, err = s.API.DropHeld(r.Context(), wf, ids)
		}
		s.acted(w, r, "/w/"+url.PathEscape(wf)+"/webhooks", rep.Message, err)
	}
}

func (s *Server) resetState(w http.ResponseWriter, r *http.Request) {
	wf, h := r.PathValue("wf"), r.PathValue("handler")
	s.confirmed(w, r, confirmation{Question: fmt.Sprintf("Reset the state of %s?", h),
		Detail: "Its next run, at once, starts from scratch; inputs it registers again are the same inputs, and events it publishes again keep their status. This is recorded in the decision log.",
		Action: "/w/" + url.PathEscape(wf) + "/handlers/" + url.PathEscape(h) + "/reset-state", Button: "Reset it"},
		func() (string, error) {
			rep, err := s.API.ResetState(r.Context(), wf, h)
			return rep.Message, err
		})
}

func (s *Server) confirmed(w http.ResponseWriter, r *http.Request, c confirmation, act func() (string, error)) {
	if r.FormValue("confirm") != "yes" {
		s.renderTopics(w, r, &c)
		return
	}
	msg, err := act()
	s.acted(w, r, "/w/"+url.PathEscape(r.PathValue("wf"))+"/topics", msg, err)
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	d, err := s.API.Run(r.Context(), r.PathValue("id"))
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, "run", "run "+d.Run.ID, map[string]any{"Run": d, "Timeline": timelineSVG(d.Trace)})
}

func (s *Server) item(w http.ResponseWriter, r *http.Request) {
	d, err := s.API.Item(r.Context(), r.PathValue("ref"), r.URL.Query().Get("workflow"))
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, "item", d.Item.Title, map[string]any{"Item": d})
}

// itemAction is an item's Skip or Reprocess.
func (s *Server) itemAction(w http.ResponseWriter, r *http.Request) {
	ref, verb := r.PathValue("ref"), r.PathValue("verb")
	// An unknown verb is the API's to refuse, as for a workflow's.
	rep, err := s.API.ItemAction(r.Context(), ref, verb, r.URL.Query().Get("workflow"))
	s.acted(w, r, "/items/"+url.PathEscape(ref), rep.Message, err)
}

// acted sends a person back to the page they acted on, with what the API
// answered: its message, or its refusal's (the same words the CLI prints).
// The API told the pages of the change itself.
func (s *Server) acted(w http.ResponseWriter, r *http.Request, to, msg string, err error) {
	if err != nil {
		msg = err.Error()
	}
	s.back(w, r, to, msg)
}

// SameSitePath returns next when a browser would follow it to a path of this
// site, else "/". Browsers drop tabs and newlines from a URL and read "\" as
// "/", so "/<TAB>/evil.example" and "/\evil.example" both leave the site: any
// control character, white space or backslash is refused before the check.
func SameSitePath(next string) string {
	if next == "" || strings.ContainsFunc(next, func(r rune) bool { return r < 0x21 || r == 0x7f || r == '\\' || unicode.IsSpace(r) }) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return "/"
	}
	return next
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	next := SameSitePath(r.FormValue("next"))
	if r.Method == http.MethodPost {
		if s.Guard.Login(w, r, r.PostFormValue("token")) {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		s.render(w, r, "login", "sign in", map[string]any{"Flash": "That token is not right.", "Next": next})
		return
	}
	s.render(w, r, "login", "sign in", map[string]any{"Next": next})
}

func (s *Server) connections(w http.ResponseWriter, r *http.Request) {
	cs, err := s.API.Connections(r.Context())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, "connections", "connected accounts", map[string]any{"Connections": cs, "CanConnect": s.Accounts != nil})
}

// connectGoogle sends the browser to Google (a POST, so that no other
// site can start it); Google sends it back to connectGoogleDone.
func (s *Server) connectGoogle(w http.ResponseWriter, r *http.Request) {
	if s.Accounts == nil {
		http.Error(w, "this keep cannot connect accounts from the page; run keep connect google", http.StatusNotFound)
		return
	}
	u, err := s.Accounts.StartGoogle(r.Context(), "http://"+r.Host+"/connect/google/callback")
	if err != nil {
		http.Redirect(w, r, s.flashURL("/connections", err.Error()), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

func (s *Server) connectGoogleDone(w http.ResponseWriter, r *http.Request) {
	if s.Accounts == nil {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	msg := ""
	if e := q.Get("error"); e != "" {
		msg = "Google answered " + e + ": nothing was connected"
	} else if acct, err := s.Accounts.FinishGoogle(r.Context(), q.Get("state"), q.Get("code")); err != nil {
		msg = "Google was not connected: " + err.Error()
	} else {
		msg = "Connected Google as " + acct + ". Blocked runs waiting for it: Try again."
		if s.Changed != nil {
			s.Changed("")
		}
	}
	http.Redirect(w, r, s.flashURL("/connections", msg), http.StatusSeeOther)
}

// decideRepair is the card's Approve or Reject of a held repair.
func (s *Server) decideRepair(w http.ResponseWriter, r *http.Request) {
	wf, verb := r.PathValue("wf"), r.PathValue("verb")
	if verb != "approve" && verb != "reject" {
		http.NotFound(w, r)
		return
	}
	rep, err := s.API.DecideRepair(r.Context(), wf, r.PathValue("id"), verb)
	s.acted(w, r, "/w/"+url.PathEscape(wf), rep.Message, err)
}
