package report

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/control"
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
	g := apitype.Graph{Workflow: wf, Version: v.Label(), Day: day.Format("2006-01-02"), Nodes: []apitype.GraphNode{}, Edges: []apitype.GraphEdge{}}
	nodes := map[string]*apitype.GraphNode{}
	var order []string
	node := func(kind, name string, col int) *apitype.GraphNode {
		id := kind + ":" + name
		if kind == "api" {
			id = "api"
		}
		if n := nodes[id]; n != nil {
			return n
		}
		nodes[id] = &apitype.GraphNode{ID: id, Kind: kind, Name: name, Column: col}
		order = append(order, id)
		return nodes[id]
	}
	edges := map[apitype.GraphEdge]bool{}
	edge := func(from, to string) {
		e := apitype.GraphEdge{From: from, To: to}
		if !edges[e] {
			edges[e] = true
			g.Edges = append(g.Edges, e)
		}
	}
	// What brings work in, in a stable order.
	for _, t := range decl.Topics {
		node("topic", t, 1)
		if decl.OpenToAPI(t) {
			edge(node("api", "the event API", 0).ID, "topic:"+t)
		}
	}
	for _, n := range sortedNames(decl.Producers) {
		p := node("producer", n, 0)
		for _, t := range decl.Producers[n].Publishes {
			edge(p.ID, node("topic", t, 1).ID)
		}
	}
	for _, n := range sortedNames(decl.Webhooks) {
		h := node("webhook", n, 0)
		for _, t := range decl.Webhooks[n].Publishes {
			edge(h.ID, node("topic", t, 1).ID)
		}
	}
	for _, n := range sortedNames(decl.Consumers) {
		c := node("consumer", n, 2)
		for _, t := range decl.Consumers[n].Subscribe {
			edge(node("topic", t, 1).ID, c.ID)
		}
		for _, t := range decl.Consumers[n].Publishes {
			edge(c.ID, node("topic", t, 1).ID)
		}
	}
	for _, n := range sortedNames(decl.Tasks) {
		node("task", n, 2)
	}
	// The connector methods each handler calls, with where they go.
	targets := map[string]map[string]bool{}
	for _, c := range an.Calls {
		m := c.Tool + "." + c.Method
		cn := node("connector", m, 3)
		if targets[cn.ID] == nil {
			targets[cn.ID] = map[string]bool{}
		}
		if t := callTarget(c); t != "" {
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
			edge(node(kind, parts[1], col).ID, cn.ID)
		}
	}
	for id, ts := range targets {
		for t := range ts {
			nodes[id].Targets = append(nodes[id].Targets, t)
		}
		sort.Strings(nodes[id].Targets)
	}
	// The live counts.
	err = st.View(ctx, func(tx store.Tx) error {
		counts, err := tx.TopicCounts(wf)
		if err != nil {
			return err
		}
		for _, c := range counts {
			if n := nodes["topic:"+c.Topic]; n != nil {
				n.Pending, n.Reserved = c.Pending, c.Reserved
			}
		}
		for t, cs := range consumersOf(decl) {
			for _, c := range cs {
				if n, tn := nodes["consumer:"+c], nodes["topic:"+t]; n != nil && tn != nil {
					n.Pending += tn.Pending
					n.Reserved += tn.Reserved
				}
			}
		}
		tally, err := tx.Tally(wf, day.UnixMilli(), day.UnixMilli()+24*hourMs)
		if err != nil {
			return err
		}
		kinds := map[string]string{}
		for _, h := range handlerKindsOf(decl) {
			kinds[h[1]] = h[0]
		}
		for _, r := range tally.Runs {
			if r.Status != kt.StatusCommitted {
				continue
			}
			if n := nodes[kinds[r.Handler]+":"+r.Handler]; n != nil {
				n.DoneToday += r.N
			}
			// A topic's events done today: its consumer's committed runs.
			for t, cs := range consumersOf(decl) {
				if len(cs) > 0 && cs[0] == r.Handler && nodes["topic:"+t] != nil {
					nodes["topic:"+t].DoneToday += r.N
				}
			}
		}
		for _, w := range tally.Writes {
			n := nodes["connector:"+w.Tool+"."+w.Method]
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
		if control.WhoActs(r, m, hasMut) != control.APerson {
			return nil
		}
		if n := nodes[string(r.HandlerType)+":"+r.Handler]; n != nil {
			n.Blocked, n.BlockedRun = n.Blocked+1, r.ID
		}
		if hasMut {
			if n := nodes["connector:"+m.Tool+"."+m.Method]; n != nil {
				n.Blocked, n.BlockedRun = n.Blocked+1, r.ID
			}
		}
		return nil
	})
	for _, id := range order {
		g.Nodes = append(g.Nodes, *nodes[id])
	}
	return g, err
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
		// A run blocked before the range and still blocked in it counts
		// too: the range of its start reaches back a week more.
		t, err = tx.Tally(wf, start-7*24*hourMs, end)
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
