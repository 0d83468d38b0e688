package layers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Function size (issue 41): a function past 80 lines does several jobs a
// reader must hold at once, and one taking more than 5 parameters hands
// its callers the same values over and over. A few of each are allowed
// (a table of cases, a state machine's switch); more means the code is
// growing rooms it does not name. docs/design.md, "Rooms of the script
// package (issue 41)", says what counts and why.
const (
	maxLines      = 80 // a function's lines, from func to its closing brace
	maxParams     = 5  // its parameters, the receiver not counted
	mostLong      = 3  // functions allowed over maxLines
	mostManyParam = 10 // functions allowed over maxParams
)

// testHelpers are the folders (from the module's root) of code only tests
// run: their size is the size of what they exercise, and is not counted.
var testHelpers = []string{
	"internal/store/storetest",
	"internal/fake",
	"internal/testsink",
	"internal/testbin",
	"internal/testdb",
	"internal/testmail",
	"internal/testotlp",
	"test",
	"third_party",
}

// funcSize is one function declaration's size, where it is.
type funcSize struct {
	at            string // file:line
	name          string
	lines, params int
}

// funcSizes reads every function declaration of the module's non-test Go
// files (test helpers skipped) from its syntax tree.
func funcSizes(t *testing.T, root string) []funcSize {
	t.Helper()
	fset := token.NewFileSet()
	var out []funcSize
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || isTestHelper(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("%s does not parse: %w", rel, err)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start := fset.Position(fd.Pos())
			out = append(out, funcSize{
				at:     fmt.Sprintf("%s:%d", rel, start.Line),
				name:   funcName(fd),
				lines:  fset.Position(fd.End()).Line - start.Line + 1,
				params: fd.Type.Params.NumFields(),
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isTestHelper(rel string) bool {
	for _, h := range testHelpers {
		if rel == h || strings.HasPrefix(rel, h+"/") {
			return true
		}
	}
	return false
}

// funcName is Name, or Type.Name for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

// TestFunctionsStaySmall fails when more than mostLong functions run past
// maxLines lines, or more than mostManyParam take more than maxParams
// parameters, outside tests and their helpers; it lists each, with what
// to do.
func TestFunctionsStaySmall(t *testing.T) {
	sizes := funcSizes(t, "../..")
	if len(sizes) < 1000 {
		t.Fatalf("found %d functions: is the module root right?", len(sizes))
	}
	var long, many []string
	for _, f := range sizes {
		if f.lines > maxLines {
			long = append(long, fmt.Sprintf("%s: %s is %d lines: name its steps", f.at, f.name, f.lines))
		}
		if f.params > maxParams {
			many = append(many, fmt.Sprintf("%s: %s takes %d parameters: pass what travels together as one value", f.at, f.name, f.params))
		}
	}
	report := func(list []string, most int, what, todo string) {
		msg := fmt.Sprintf("%d functions %s (at most %d may):\n  %s", len(list), what, most, strings.Join(list, "\n  "))
		switch {
		case len(list) > most:
			t.Errorf("%s\n%s", msg, todo)
		case len(list) > 0:
			t.Log(msg)
		}
	}
	report(long, mostLong, fmt.Sprintf("are over %d lines", maxLines),
		"Split each into named steps (a function each: a loop's body, a switch's cases), so the function reads as what it does.")
	report(many, mostManyParam, fmt.Sprintf("take more than %d parameters", maxParams),
		"Pass the values that travel together as one (an options struct, a query), or make the function a method of a value holding what its callers share.")
}

// TestFunctionSizesAreReadFromTheTree checks the count itself on a module
// of its own: lines from func to the closing brace whatever the comments
// and strings hold, parameters by name (a, b int is two), the receiver
// not counted, _test.go files and test helpers skipped.
func TestFunctionSizesAreReadFromTheTree(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	long := "func long() {\n" + strings.Repeat("\t_ = 1\n", 79) + "}\n" // 81 lines
	write("internal/x/x.go", "package x\n\n// func fake(a, b, c, d, e, f int) {}\n\n"+long+
		"\nfunc many(a, b, c int, d string, e, f bool) { _ = `\nfunc g(a, b, c, d, e, f int) {}\n` }\n"+
		"\ntype T struct{}\n\nfunc (t *T) five(a, b, c, d, e int) {}\n")
	write("internal/x/x_test.go", "package x\n\nfunc testMany(a, b, c, d, e, f int) {}\n")
	write("internal/fake/y/y.go", "package y\n\n"+long)
	got := map[string]funcSize{}
	for _, f := range funcSizes(t, root) {
		got[f.name] = f
	}
	want := map[string]funcSize{
		"long":   {at: "internal/x/x.go:5", name: "long", lines: 81},
		"many":   {at: "internal/x/x.go:87", name: "many", lines: 3, params: 6},
		"T.five": {at: "internal/x/x.go:93", name: "T.five", lines: 1, params: 5},
	}
	if len(got) != len(want) {
		t.Errorf("read %d functions, want %d: %+v", len(got), len(want), got)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: read %+v, want %+v", name, got[name], w)
		}
	}
}
