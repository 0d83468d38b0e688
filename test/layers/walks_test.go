package layers

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/callgraph"
	"golang.org/x/tools/go/callgraph/cha"
	"golang.org/x/tools/go/callgraph/vta"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"
)

// A walk is what one call of keep reaches: the functions of keep its calls
// can run, found in the program's call graph (issue 41: "a walk through
// the calls of a published event and of a person's decision stay within
// one or two rooms each"). rooms is the exact set of keep's packages the
// walk reaches above the floor, so a walk that starts reaching another
// room fails here, and so does a room it no longer reaches (the table
// stays true).
var walks = []struct {
	what  string
	entry string // package path (after the module) and function, or (*package.Type).Method
	rooms []string
	why   string
	// stops are functions the walk calls but does not enter: another
	// walk of its own (a handler's run is the engine's run of a step).
	stops []string
}{
	{"a published event (the event API)", "internal/intake.Post",
		[]string{"internal/intake", "internal/script", "internal/transition"},
		"intake checks the request and reads which topics the version opens to the API (script's declaration, read once per source); transition's producer writer writes the input, its attempt and its event, and wakes the consumer", nil},
	{"a webhook's delivery (its handler's run aside)", "(*internal/intake.Webhooks).Deliver",
		[]string{"internal/config", "internal/engine", "internal/hookreq", "internal/intake", "internal/metrics", "internal/redact", "internal/script", "internal/testrun", "internal/transition"},
		"intake verifies, dedupes, holds and records it, judging the request with hookreq; the engine lends its reads (the version's program, the workflow's policy with config's defaults, its clocks, the secret opener keep test or keep serve gave it: testrun's, the observer: metrics) and runs the handler (RunWebhook, a walk of its own); transition's producer writer writes what the handler made; redact clips the error a delivery records",
		[]string{"(*internal/engine.Engine).RunWebhook"}},
	{"a person's decision on a blocked run", "internal/control.resolveRun",
		[]string{"internal/control", "internal/transition"},
		"control carries the decision out; transition writes the run, the item and the decision log", nil},
	{"a person's reprocess of an item", "internal/control.reprocessItem",
		[]string{"internal/control", "internal/transition"},
		"control checks it may; transition starts the item's new attempt", nil},
}

// floor is below every room: the vocabulary and the storage seam every
// room writes through. A walk reaching them is not leaving its rooms.
var floor = []string{"internal/keeptype", "internal/store/...", "internal/clock"}

// TestWalksStayInTheirRooms builds keep's call graph (SSA, variable type
// analysis: calls through interfaces and function values are followed to
// what can flow there, so a function a table row holds or a closure a
// transaction runs is part of the walk) and walks it from each entry.
func TestWalksStayInTheirRooms(t *testing.T) {
	cfg := &packages.Config{Dir: "../..", Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles |
		packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports}
	pkgs, err := packages.Load(cfg, module+"internal/...")
	if err != nil {
		t.Fatal(err)
	}
	if n := packages.PrintErrors(pkgs); n > 0 {
		t.Fatalf("%d errors loading keep's packages", n)
	}
	prog, _ := ssautil.Packages(pkgs, ssa.InstantiateGenerics)
	prog.Build()
	fns := ssautil.AllFunctions(prog)
	cg := vta.CallGraph(fns, cha.CallGraph(prog))
	byName := map[string]*ssa.Function{}
	for f := range fns {
		if f.Pkg != nil && f.Parent() == nil {
			// "internal/intake.Post", "(*internal/engine.Engine).Deliver"
			byName[strings.ReplaceAll(f.String(), module, "")] = f
		}
	}
	for _, w := range walks {
		start := byName[w.entry]
		if start == nil {
			t.Errorf("%s: no function %s in keep (the walk's entry moved: name it again)", w.what, w.entry)
			continue
		}
		var stops []*ssa.Function
		for _, name := range w.stops {
			if byName[name] == nil {
				t.Errorf("%s: no function %s in keep to stop at (name it again)", w.what, name)
			}
			stops = append(stops, byName[name])
		}
		rooms, files := walk(prog, cg, start, stops)
		got := slices.Sorted(maps.Keys(rooms))
		t.Logf("%s (%s): %d rooms %v, %d files of them: %s", w.what, w.entry, len(got), got, len(files), strings.Join(files, " "))
		if !slices.Equal(got, w.rooms) {
			t.Errorf("%s from %s reaches the rooms %v, the table says %v (%s): if the walk should reach them, say so in the table with why; else move the call back into its room", w.what, w.entry, got, w.rooms, w.why)
		}
	}
}

// walk returns the keep packages above the floor that start's calls can
// reach, and the files of theirs the walk enters, relative to the repo.
func walk(prog *ssa.Program, cg *callgraph.Graph, start *ssa.Function, stops []*ssa.Function) (map[string]bool, []string) {
	rooms, files := map[string]bool{}, map[string]bool{}
	seen := map[*ssa.Function]bool{start: true}
	stopped := map[*ssa.Function]bool{}
	for _, f := range stops {
		stopped[f] = true
	}
	queue := []*ssa.Function{start}
	push := func(f *ssa.Function) {
		if !seen[f] {
			seen[f] = true
			queue = append(queue, f)
		}
	}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		pkg := f.Pkg
		if o := f.Origin(); o != nil && o.Pkg != nil {
			pkg = o.Pkg
		}
		if pkg == nil || !strings.HasPrefix(pkg.Pkg.Path(), module) {
			continue // outside keep: the standard library, a dependency
		}
		path := strings.TrimPrefix(pkg.Pkg.Path(), module)
		if matchesAny(path, floor) {
			continue // the floor is not a room, and its calls are its own
		}
		rooms[roomOf(path)] = true
		if stopped[f] {
			continue // its room is reached; its insides are another walk
		}
		if pos := prog.Fset.Position(f.Pos()); pos.IsValid() {
			files[pos.Filename] = true
		}
		// A closure runs where it is handed (a transaction's body, a
		// row's function): its calls are the walk's too.
		for _, a := range f.AnonFuncs {
			push(a)
		}
		if n := cg.Nodes[f]; n != nil {
			for _, e := range n.Out {
				if madeElsewhere(e.Callee.Func) {
					continue
				}
				push(e.Callee.Func)
			}
		}
	}
	var rel []string
	for f := range files {
		rel = append(rel, shortFile(f))
	}
	slices.Sort(rel)
	return rooms, rel
}

// madeElsewhere says f is a closure the walk cannot be running: the call
// graph is not context-sensitive, so a function that calls a parameter
// (transition.PublishAll's cause) seems to call every closure any caller
// passes it. A closure exists only once the function that makes it ran,
// and the walk reaches those through their maker (AnonFuncs); only the
// closures package variables hold (made by init: a table's rows) exist
// from the start.
func madeElsewhere(f *ssa.Function) bool {
	if f.Parent() == nil {
		return false
	}
	outer := f.Parent()
	for outer.Parent() != nil {
		outer = outer.Parent()
	}
	return outer.Name() != "init"
}

// roomOf is the room a package belongs to: its first two segments
// (internal/script/wasmjs is the script's room, internal/connector/http
// the connectors').
func roomOf(path string) string {
	if p := strings.SplitN(path, "/", 3); len(p) == 3 {
		return p[0] + "/" + p[1]
	}
	return path
}

// shortFile is a file's path from keep's internal/ on ("internal/x/y.go").
func shortFile(abs string) string {
	if i := strings.LastIndex(abs, "/internal/"); i >= 0 {
		return abs[i+1:]
	}
	return abs
}
