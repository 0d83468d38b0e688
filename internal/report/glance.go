package report

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Issue 42, at a glance: a workflow drawn (Graph) and what it did per
// hour (Activity), from the active version's declaration, its script's
// analysis and the store: the picture cannot drift from the code.

const hourMs = int64(time.Hour / time.Millisecond)

// handlerKinds maps the analysis's handler groups ("consumers.c.mutate")
// to the graph's kinds.
var handlerKinds = map[string]string{"producers": "producer", "webhooks": "webhook", "tasks": "task", "consumers": "consumer"}

// Graph draws workflow wf as nodes and edges with their live counts; done
// today counts from midnight UTC of now.
func Graph(ctx context.Context, st store.Store, wf string, now time.Time) (apitype.Graph, error) {
	v, decl, err := activeDeclaration(ctx, st, wf)
	if err != nil {
		return apitype.Graph{}, err
	}
	an, err := analysisOf(v.Script)
	if err != nil {
		return apitype.Graph{}, fmt.Errorf("analyze the script of %s version %s: %w", wf, v.Label(), err)
	}
	day := now.UTC().Truncate(24 * time.Hour)
	b := &graphBuilder{decl: decl, nodes: map[string]*apitype.GraphNode{}, edges: map[apitype.GraphEdge]bool{},
		g: apitype.Graph{Workflow: wf, Version: v.Label(), Day: day.Format("2006-01-02"), Nodes: []apitype.GraphNode{}, Edges: []apitype.GraphEdge{}}}
	b.declared()
	b.calls(an)
	err = st.View(ctx, func(tx store.Tx) error { return b.counts(tx, wf, day.UnixMilli()) })
	for _, id := range b.order {
		b.g.Nodes = append(b.g.Nodes, *b.nodes[id])
	}
	return b.g, err
}

// graphBuilder is Graph's picture as it is drawn: its nodes by id, in the
// order they were first named, and its edges once each.
type graphBuilder struct {
	decl  script.Declaration
	g     apitype.Graph
	nodes map[string]*apitype.GraphNode
	order []string
	edges map[apitype.GraphEdge]bool
}

// node is the node of that kind and name, added in column col the first
// time it is named.
func (b *graphBuilder) node(kind, name string, col int) *apitype.GraphNode {
	id := kind + ":" + name
	if n := b.nodes[id]; n != nil {
		return n
	}
	b.nodes[id] = &apitype.GraphNode{ID: id, Kind: kind, Name: name, Column: col}
	b.order = append(b.order, id)
	return b.nodes[id]
}

func (b *graphBuilder) edge(from, to, kind string) {
	e := apitype.GraphEdge{From: from, To: to, Kind: kind}
	if !b.edges[e] {
		b.edges[e] = true
		b.g.Edges = append(b.g.Edges, e)
	}
}

// declared draws the declaration: what brings work in (the event API's
// topics, producers, webhooks), topics, consumers and tasks, and who
// publishes and reads what, in a stable order.
func (b *graphBuilder) declared() {
	d := b.decl
	for _, t := range d.Topics {
		b.node("topic", t, 1)
		if d.OpenToAPI(t) {
			b.edge(b.node("api", t, 0).ID, "topic:"+t, "")
		}
	}
	for _, n := range sortedNames(d.Producers) {
		p := b.node("producer", n, 0)
		for _, t := range d.Producers[n].Publishes {
			b.edge(p.ID, b.node("topic", t, 1).ID, "")
		}
	}
	for _, n := range sortedNames(d.Webhooks) {
		h := b.node("webhook", n, 0)
		for _, t := range d.Webhooks[n].Publishes {
			b.edge(h.ID, b.node("topic", t, 1).ID, "")
		}
	}
	for _, n := range sortedNames(d.Consumers) {
		c := b.node("consumer", n, 2)
		for _, t := range d.Consumers[n].Subscribe {
			b.edge(b.node("topic", t, 1).ID, c.ID, "")
		}
		for _, t := range d.Consumers[n].Publishes {
			b.edge(c.ID, b.node("topic", t, 1).ID, "")
		}
	}
	for _, n := range sortedNames(d.Tasks) {
		b.node("task", n, 2)
	}
}

// calls draws the connector methods each handler can reach, with where
// they go: a call of a handler's mutate is its write (an arrow of kind
// "write"), a call of any other phase a read ("read"). A method only read
// is drawn too, its arrows marked as reads.
func (b *graphBuilder) calls(an *script.Analysis) {
	// A method's targets are where its writes go; a method only read
	// shows where its reads go.
	targets := map[string]map[string]bool{}
	writes := map[string]map[string]bool{}
	for _, c := range an.Calls {
		cn := b.node("connector", c.Tool+"."+c.Method, 3)
		if targets[cn.ID] == nil {
			targets[cn.ID], writes[cn.ID] = map[string]bool{}, map[string]bool{}
		}
		t := callTarget(c)
		if t != "" {
			targets[cn.ID][t] = true
		}
		for _, h := range c.Handlers {
			parts := strings.SplitN(h, ".", 3)
			kind, ok := handlerKinds[parts[0]]
			if !ok || len(parts) < 2 {
				continue
			}
			col := 2
			if kind == "producer" || kind == "webhook" {
				col = 0
			}
			how := "read"
			if len(parts) == 3 && parts[2] == "mutate" {
				how = "write"
				if t != "" {
					writes[cn.ID][t] = true
				}
			}
			b.edge(b.node(kind, parts[1], col).ID, cn.ID, how)
		}
	}
	for id, ts := range targets {
		if len(writes[id]) > 0 {
			ts = writes[id]
		}
		b.nodes[id].Targets = slices.Sorted(maps.Keys(ts))
	}
}

// counts gives the nodes their live counts from the store: events waiting,
// what was done today (from dayMs), what came in, who is blocked.
func (b *graphBuilder) counts(tx store.Tx, wf string, dayMs int64) error {
	if err := b.topicCounts(tx, wf); err != nil {
		return err
	}
	tally, err := tx.Tally(wf, dayMs, dayMs+24*hourMs)
	if err != nil {
		return err
	}
	b.doneToday(tally)
	if err := b.intake(tx, wf, dayMs); err != nil {
		return err
	}
	return b.blocked(tx, wf)
}

// topicCounts: a topic's pending and reserved events; a consumer's are
// those of the topics it reads.
func (b *graphBuilder) topicCounts(tx store.Tx, wf string) error {
	counts, err := tx.TopicCounts(wf)
	if err != nil {
		return err
	}
	for _, c := range counts {
		if n := b.nodes["topic:"+c.Topic]; n != nil {
			n.Pending, n.Reserved = c.Pending, c.Reserved
		}
	}
	for t, cs := range consumersOf(b.decl) {
		for _, c := range cs {
			if n, tn := b.nodes["consumer:"+c], b.nodes["topic:"+t]; n != nil && tn != nil {
				n.Pending += tn.Pending
				n.Reserved += tn.Reserved
			}
		}
	}
	return nil
}

// doneToday: a handler's committed runs, a topic's consumer's, a connector
// method's applied writes; its writes in flight are its pending.
func (b *graphBuilder) doneToday(tally store.HourTally) {
	kinds := map[string]string{}
	for _, h := range handlerKindsOf(b.decl) {
		kinds[h[1]] = h[0]
	}
	consumers := consumersOf(b.decl)
	for _, r := range tally.Runs {
		if r.Status != kt.StatusCommitted {
			continue
		}
		if n := b.nodes[kinds[r.Handler]+":"+r.Handler]; n != nil {
			n.DoneToday += r.N
		}
		for t, cs := range consumers {
			if len(cs) > 0 && cs[0] == r.Handler && b.nodes["topic:"+t] != nil {
				b.nodes["topic:"+t].DoneToday += r.N
			}
		}
	}
	for _, w := range tally.Writes {
		n := b.nodes["connector:"+w.Tool+"."+w.Method]
		if n == nil {
			continue
		}
		switch w.Status {
		case kt.MutationApplied:
			n.DoneToday += w.N
		case kt.MutationInFlight:
			n.Pending += w.N
		}
	}
}

// intake: each webhook's deliveries today (by status), held now and its
// last; each API topic's posts today.
func (b *graphBuilder) intake(tx store.Tx, wf string, dayMs int64) error {
	hooks := sortedNames(b.decl.Webhooks)
	in, err := tx.Intake(wf, hooks, script.FromAPI, dayMs)
	if err != nil {
		return err
	}
	of := func(id string) *apitype.GraphIntake {
		n := b.nodes[id]
		if n == nil {
			return nil
		}
		if n.Intake == nil {
			n.Intake = &apitype.GraphIntake{}
		}
		return n.Intake
	}
	for _, h := range hooks {
		x := of("webhook:" + h)
		if at, ok := in.Last[h]; ok {
			x.LastReceived = Time(at)
		}
	}
	for _, d := range in.Deliveries {
		if x := of("webhook:" + d.Webhook); x != nil {
			x.Received += d.N
			*deliveryCount(x, d.Status) += d.N
		}
	}
	for _, d := range in.Held {
		if x := of("webhook:" + d.Webhook); x != nil {
			x.Held += d.N
		}
	}
	for _, t := range b.decl.Topics {
		if b.decl.OpenToAPI(t) {
			of("api:" + t)
		}
	}
	for _, p := range in.Posts {
		if x := of("api:" + p.Topic); x != nil {
			x.Received += p.N
			x.Accepted += p.N
		}
	}
	return nil
}

// deliveryCount is the count of x that deliveries of status s add to (a
// status of its own for each but held, counted as held now instead).
func deliveryCount(x *apitype.GraphIntake, s kt.DeliveryStatus) *int {
	switch s {
	case kt.DeliveryAccepted:
		return &x.Accepted
	case kt.DeliveryDuplicate:
		return &x.Duplicate
	case kt.DeliveryRefused:
		return &x.Refused
	case kt.DeliveryFailed:
		return &x.Failed
	}
	return new(int)
}

// blocked marks the handler of the workflow's open run when a person must
// act (kt.WhoActs), and the connector method of its write.
func (b *graphBuilder) blocked(tx store.Tx, wf string) error {
	r, err := tx.RunOpen(wf)
	if errors.Is(err, kt.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	m, merr := tx.MutationByRun(r.ID)
	hasMut := merr == nil
	if merr != nil && !errors.Is(merr, kt.ErrNotFound) {
		return merr
	}
	if kt.WhoActs(r, m, hasMut) != kt.APerson {
		return nil
	}
	if n := b.nodes[string(r.HandlerType)+":"+r.Handler]; n != nil {
		n.Blocked, n.BlockedRun = n.Blocked+1, r.ID
	}
	if hasMut {
		if n := b.nodes["connector:"+m.Tool+"."+m.Method]; n != nil {
			n.Blocked, n.BlockedRun = n.Blocked+1, r.ID
		}
	}
	return nil
}

// analyses keeps the analysis of the scripts drawn, by their source's
// hash (at most maxAnalyses; then they are read again): the live page
// draws a workflow on every change without parsing its script each time.
var analyses = struct {
	sync.Mutex
	m map[[32]byte]*script.Analysis
}{m: map[[32]byte]*script.Analysis{}}

const maxAnalyses = 64

func analysisOf(source string) (*script.Analysis, error) {
	key := sha256.Sum256([]byte(source))
	analyses.Lock()
	a := analyses.m[key]
	analyses.Unlock()
	if a != nil {
		return a, nil
	}
	a, err := script.Analyze(source)
	if err != nil {
		return nil, err
	}
	analyses.Lock()
	if len(analyses.m) >= maxAnalyses {
		clear(analyses.m)
	}
	analyses.m[key] = a
	analyses.Unlock()
	return a, nil
}

// callTarget is where a call goes as the script writes it: its url's, to's
// or path's literal value or constant start; "" when computed.
func callTarget(c script.Call) string {
	for _, k := range []string{"url", "to", "path", "spreadsheetId"} {
		if s, ok := c.Args[k].(string); ok && s != "" {
			return s
		}
		if s := c.Prefixes[k]; s != "" {
			return s + "…"
		}
	}
	return ""
}

func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// consumersOf is who reads each topic.
func consumersOf(d script.Declaration) map[string][]string {
	_, _, consumers := topology(d)
	return consumers
}

// handlerKindsOf lists each declared handler as {kind, name}.
func handlerKindsOf(d script.Declaration) [][2]string {
	var out [][2]string
	for _, n := range sortedNames(d.Producers) {
		out = append(out, [2]string{"producer", n})
	}
	for _, n := range sortedNames(d.Consumers) {
		out = append(out, [2]string{"consumer", n})
	}
	for _, n := range sortedNames(d.Tasks) {
		out = append(out, [2]string{"task", n})
	}
	return out
}

// Activity is what workflow wf did per hour in the hours before now (the
// current hour included): inputs registered, writes applied, runs failed,
// minutes blocked.
func Activity(ctx context.Context, st store.Store, wf string, hours int, now time.Time) (apitype.Activity, error) {
	if hours < 1 || hours > 24*31 {
		return apitype.Activity{}, &kt.ActionError{Msg: fmt.Sprintf("hours %d: use 1 to %d (24 for a day, 168 for a week)", hours, 24*31), Code: kt.CodeBadInput}
	}
	end := now.UnixMilli()/hourMs*hourMs + hourMs
	start := end - int64(hours)*hourMs
	var t store.HourTally
	err := st.View(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(wf); err != nil {
			return noWorkflow(wf, err)
		}
		var err error
		t, err = tx.Tally(wf, start, end)
		return err
	})
	if err != nil {
		return apitype.Activity{}, err
	}
	a := apitype.Activity{Workflow: wf, From: Time(start), To: Time(end), Hours: make([]apitype.ActivityHour, hours)}
	for i := range a.Hours {
		a.Hours[i].Start = Time(start + int64(i)*hourMs)
	}
	at := func(hour int64) *apitype.ActivityHour {
		if hour < start || hour >= end {
			return nil
		}
		return &a.Hours[(hour-start)/hourMs]
	}
	for _, x := range t.Inputs {
		if h := at(x.Hour); h != nil {
			h.Inputs += x.N
		}
	}
	for _, x := range t.Writes {
		if h := at(x.Hour); h != nil && x.Status == kt.MutationApplied {
			h.Writes += x.N
		}
	}
	for _, x := range t.Runs {
		if h := at(x.Hour); h != nil && failedRun(x.Status) {
			h.Failures += x.N
		}
	}
	nowMs := now.UnixMilli()
	for _, b := range t.Blocked {
		to := b.To
		if to == 0 || to > nowMs {
			to = nowMs
		}
		for hour := b.From / hourMs * hourMs; hour < to; hour += hourMs {
			h := at(hour)
			if h == nil {
				continue
			}
			ms := min(to, hour+hourMs) - max(b.From, hour)
			h.BlockedMinutes += int(ms / 60000)
		}
	}
	return a, nil
}

// failedRun says a run ended in a failure (a retried run failed first).
func failedRun(s kt.Status) bool {
	switch s {
	case kt.StatusFailedLogic, kt.StatusFailedInternal, kt.StatusCrashed, kt.StatusRetried:
		return true
	}
	return false
}
