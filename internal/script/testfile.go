package script

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"
)

// A workflow's test file (keep test) is a script too: `export default
// Keep.test({ workflow, cases })`, evaluated in the same sandbox as a
// workflow (Declare), whose object is plain data. ReadTest returns that
// object; TestLines finds where each of its members is written, so that a
// mistake in it is reported at its line.

// ReadTest evaluates a test file and returns its Keep.test object as JSON.
func ReadTest(file, source string) (json.RawMessage, error) {
	d, err := Declare(file, source)
	if err != nil {
		return nil, err
	}
	if d.TestError != "" {
		return nil, fmt.Errorf("%s: %s; a test is data (objects, arrays, strings, numbers): write the value itself", file, d.TestError)
	}
	if len(d.Test) == 0 || string(d.Test) == "null" {
		return nil, fmt.Errorf("%s does not export a test: end it with export default Keep.test({ workflow: \"./workflow.js\", cases: { ... } })", file)
	}
	return d.Test, nil
}

// TestLines holds the line of each member of a test file's Keep.test
// object, by its path ("cases", "one order", "expect", "writes", "0").
type TestLines struct{ lines map[string]int }

// LinesOfTest reads where the members of a test file's Keep.test object
// are written; a file keep cannot parse has no lines (Of answers 0).
func LinesOfTest(source string) TestLines {
	tl := TestLines{lines: map[string]int{}}
	buf := make([]byte, len(source), len(source)+1)
	copy(buf, source)
	tree, err := js.Parse(parse.NewInputBytes(buf), js.Options{})
	if err != nil {
		return tl
	}
	a := newAnalyzer(buf, tree)
	for _, st := range tree.List {
		ex, ok := st.(*js.ExportStmt)
		if !ok || !ex.Default || ex.Decl == nil {
			continue
		}
		if arg, ok := keepCall(ex.Decl, "test"); ok {
			tl.lines[""] = a.line(ex.Decl)
			tl.walk(a, "", arg)
		}
	}
	return tl
}

func (tl TestLines) walk(a *analyzer, path string, e js.IExpr) {
	for {
		g, ok := e.(*js.GroupExpr)
		if !ok {
			break
		}
		e = g.X
	}
	switch x := e.(type) {
	case *js.ObjectExpr:
		for _, p := range x.List {
			name, ok := propName(p)
			if !ok || p.Spread {
				continue
			}
			k := path + "\x00" + name
			tl.lines[k] = a.propLine(p)
			tl.walk(a, k, p.Value)
		}
	case *js.ArrayExpr:
		for i, el := range x.List {
			if el.Value == nil || el.Spread {
				continue
			}
			k := path + "\x00" + strconv.Itoa(i)
			tl.lines[k] = a.line(el.Value)
			tl.walk(a, k, el.Value)
		}
	}
}

// Of is the line of the member at path, or of the nearest member above it
// that is written (a value built by code has no lines of its own); 0 when
// none is.
func (tl TestLines) Of(path ...string) int {
	for n := len(path); n >= 0; n-- {
		k := ""
		for _, p := range path[:n] {
			k += "\x00" + p
		}
		if l, ok := tl.lines[k]; ok && l > 0 {
			return l
		}
	}
	return 0
}
