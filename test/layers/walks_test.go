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
}{
	{"a published event (the event API)", "internal/intake.Post",
		[]string{"internal/engine", "internal/intake", "internal/script", "internal/transition"},
		"intake checks the request and reads the topic's declaration (script, remembered per source); the producer writer (engine) writes the input and its event through transition"},
	{"a person's decision on a blocked run", "internal/control.resolveRun",
		[]string{"internal/control", "internal/transition"},
		"control carries the decision out; transition writes the run, the item and the decision log"},
	{"a person's reprocess of an item", "internal/control.reprocessItem",
		[]string{"internal/control", "internal/transition"},
		"control checks it may; transition starts the item's new attempt"},
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
		rooms, files := walk(prog, cg, start)
		got := slices.Sorted(maps.Keys(rooms))
		t.Logf("%s (%s): %d rooms %v, %d files of them: %s", w.what, w.entry, len(got), got, len(files), strings.Join(files, " "))
		if !slices.Equal(got, w.rooms) {
			t.Errorf("%s from %s reaches the rooms %v, the table says %v (%s): if the walk should reach them, say so in the table with why; else move the call back into its room", w.what, w.entry, got, w.rooms, w.why)
		}
	}
}

// walk returns the keep packages above the floor that start's calls can
// reach, and the files of theirs the walk enters, relative to the repo.
func walk(prog *ssa.Program, cg *callgraph.Graph, start *ssa.Function) (map[string]bool, []string) {
	rooms, files := map[string]bool{}, map[string]bool{}
	seen := map[*ssa.Function]bool{start: true}
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
