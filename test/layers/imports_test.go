// Package layers checks who imports whom among keep's packages: the rules
// are the table below, written once; docs/design.md's "Who imports whom"
// is its rendering (TestDesignShowsTheImportRules keeps the two equal).
package layers

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/keep-run/keep/"

// rules lists, for every package of keep (tests excluded), the packages of
// keep it may import. A package missing here, or an import not listed, fails
// TestImportRules; so does a listed import no longer made (the table stays
// true). "" is a package that imports nothing of keep.
var rules = []struct {
	pkg     string
	imports string // space-separated, sorted
	why     string
}{
	{"internal/keeptype", "", "plain types and state tables"},
	{"internal/clock", "", "keep's time: durations on the monotonic clock, a time that never steps back, the test build's step"},
	{"internal/apitype", "internal/keeptype", "the API's shapes: every request and answer, which its clients decode"},
	{"internal/redact", "", "what is a credential"},
	{"internal/schedule", "", "intervals and cron"},
	{"internal/netguard", "", "the address guard"},
	{"internal/ownfiles", "", "keep's own files, refused to every script"},
	{"internal/config", "", "keep.toml"},
	{"internal/store", "internal/keeptype", "the storage seam: stores, decides nothing"},
	{"internal/store/sqldb", "internal/clock internal/keeptype internal/store", "the ledger's SQL, once"},
	{"internal/store/sqlite", "internal/store internal/store/sqldb", "a backend"},
	{"internal/store/postgres", "internal/redact internal/store internal/store/sqldb", "a backend"},
	{"internal/store/postgres/pgtest", "", "test schemas"},
	{"internal/store/backend", "internal/redact internal/store internal/store/postgres internal/store/sqlite", "the one place a store is chosen"},
	{"internal/store/storetest", "internal/keeptype internal/store", "the conformance suite"},
	{"internal/store/transfer", "internal/keeptype internal/store", "keep migrate's copy"},
	{"internal/account", "internal/keeptype internal/redact internal/store", "sealed tokens and secrets"},
	{"internal/script", "internal/keeptype internal/redact internal/schedule internal/script/wasmjs", "the sandbox and the one reading of a script"},
	{"internal/script/wasmjs", "", "QuickJS in WebAssembly, run by wazero in keep's process (issue 43)"},
	{"internal/connector", "internal/config internal/keeptype internal/netguard internal/redact", "method specs, the registry, the declaration of a connector and what it gets of the connected accounts (Accounts, an interface), what a fault means (FaultClasses)"},
	{"internal/connector/files", "internal/connector internal/keeptype internal/ownfiles", "a connector"},
	{"internal/connector/system", "internal/connector", "a connector"},
	{"internal/connector/http", "internal/config internal/connector internal/keeptype internal/netguard internal/redact", "a connector"},
	{"internal/connector/custom", "internal/config internal/connector internal/connector/http internal/keeptype internal/netguard internal/redact", "connectors declared in keep.toml"},
	{"internal/connector/email", "internal/config internal/connector internal/keeptype", "a connector"},
	{"internal/connector/google", "internal/account internal/config internal/connector internal/keeptype", "a connector"},
	{"internal/connector/slackconn", "internal/account internal/config internal/connector internal/keeptype", "a connector"},
	{"internal/connector/sqlconn", "internal/config internal/connector internal/keeptype internal/ownfiles internal/redact", "a connector"},
	{"internal/connector/builtin", "internal/config internal/connector internal/connector/custom internal/connector/email internal/connector/files internal/connector/google internal/connector/http internal/connector/slackconn internal/connector/sqlconn internal/connector/system", "the one list of the connectors keep ships"},
	{"internal/connector/connectortest", "internal/connector internal/engine internal/fake/fault internal/keeptype internal/redact internal/testsink", "the suite of connectors with writes"},
	{"internal/dts", "internal/connector internal/keeptype", "keep.d.ts: the script API's types, from the connectors' declarations and the ctx table"},
	{"internal/hookreq", "internal/keeptype internal/script", "a webhook request as received and what is judged of it alone: its signature, its delivery id, the handler's req, the answer's vocabulary (issue 41: the pure half of intake, below the engine)"},
	{"internal/transition", "internal/keeptype internal/store", "the one place a run, an item, a ledger row or a handler's row changes: the rev-checked writers, the workflow read, the decision log"},
	{"internal/engine", "internal/clock internal/config internal/connector internal/keeptype internal/redact internal/schedule internal/script internal/store internal/transition", "the run state machine: a run's steps, the ledger protocol, recovery, the host, version judging (what deploy calls: the check, the replay of done work, the writers' lock) and a webhook's handler run (RunWebhook)"},
	{"internal/intake", "internal/engine internal/hookreq internal/keeptype internal/redact internal/script internal/store internal/transition", "what comes in from outside: the event API's events and webhooks' deliveries (verified, recorded, held, their handler run by the engine), both written through transition's one producer writer; held deliveries a person takes or drops"},
	{"internal/control", "internal/clock internal/engine internal/intake internal/keeptype internal/script internal/store internal/transition", "people's actions: control.Control's one table, the decisions on runs, items, topics, grants, and deploy (script: the declaration a version's handlers and readers come from)"},
	{"internal/maintainer", "internal/config internal/connector internal/control internal/dts internal/engine internal/keeptype internal/script internal/store internal/transition", "repairs, on the engine; control for a repair's deploy"},
	{"internal/report", "internal/apitype internal/control internal/engine internal/keeptype internal/script internal/store internal/transition", "what people see"},
	{"internal/scheduler", "internal/clock internal/engine internal/keeptype internal/store", "due work"},
	{"internal/metrics", "internal/keeptype internal/store", "Prometheus"},
	{"internal/notify", "internal/apitype internal/config internal/connector/email internal/netguard internal/report internal/store", "notices"},
	{"internal/api", "internal/apitype internal/clock internal/connector internal/control internal/engine internal/intake internal/keeptype internal/maintainer internal/report internal/script internal/store internal/transition", "the HTTP API over control.Control, intake and report"},
	{"internal/hooks", "internal/hookreq internal/keeptype", "the webhooks' listener (POST /hooks/{wf}/{name}): none of the API, none of its guard, none of the engine (a Deliverer)"},
	{"internal/apiclient", "internal/apitype", "the API's typed client: shapes only"},
	{"internal/web", "internal/api internal/apiclient internal/apitype", "the page: reads and acts through the API's handler in process (apiclient over api.ForPage); api for its guard"},
	{"internal/daemon", "internal/account internal/api internal/apitype internal/clock internal/config internal/connector internal/connector/builtin internal/connector/email internal/connector/google internal/connector/http internal/connector/slackconn internal/connector/sqlconn internal/control internal/engine internal/hooks internal/intake internal/keeptype internal/maintainer internal/metrics internal/netguard internal/notify internal/ownfiles internal/redact internal/report internal/scheduler internal/script internal/store internal/store/backend internal/testrun internal/transition internal/web", "the one place that wires everything: what keep serve and keep run assemble (data directory, store, connectors, engine, scheduler, API, page, metrics), and an engine over a store the CLI opened (Options.Over)"},
	{"internal/inproc", "internal/account internal/api internal/config internal/connector internal/connector/builtin internal/daemon internal/dts internal/engine internal/keeptype internal/maintainer internal/report internal/scheduler internal/script internal/store internal/store/backend internal/store/transfer internal/testrun", "the CLI's in-process side, when no keep serve answers: the API in its process on the store it opens once (API, and the engine that carries a decision out on the same store), the store for the commands that need it by nature (Direct, Migrate), keep's code run without a server (Validate, Types, Plan, …); daemon for the wiring"},
	{"internal/testrun", "internal/apitype internal/config internal/connector internal/connector/builtin internal/control internal/engine internal/hookreq internal/intake internal/keeptype internal/netguard internal/report internal/scheduler internal/script internal/store internal/store/sqlite internal/transition", "keep test: a workflow's tests on the engine, with fake connectors"},
	{"internal/bench", "internal/control internal/daemon internal/keeptype internal/script internal/store internal/store/sqlite", "keep bench"},
	// The CLI: reads, actions and deploys reach keep only through
	// apiclient (keep serve's API, or inproc.API in process), decoded
	// into apitype's shapes and keeptype's names; config for keep.toml.
	// What runs keep in process reaches it through one function each:
	// inproc without a server (migrate, connect, secret set/rm, validate,
	// plan, types, connectors, a decision carried out), daemon for what
	// owns the engine (run, serve); bench and testrun are keep bench's and
	// keep test's whole machinery (bench imports daemon, so daemon cannot).
	{"internal/cli", "internal/apiclient internal/apitype internal/bench internal/config internal/daemon internal/inproc internal/keeptype internal/testrun", "the commands: a client of the API; inproc for what runs keep in its process without a server, daemon for what keep serve and keep run own; bench and testrun: keep bench's and keep test's own machinery"},
	{"internal/fake/fault", "internal/keeptype", "fault injection of the fakes (the kinds' names are keeptype's)"},
	{"internal/fake/googlefake", "internal/fake/fault", "a fake (not linked into keep)"},
	{"internal/fake/slackfake", "internal/fake/fault", "a fake (not linked into keep)"},
	{"internal/fake/llmfake", "", "a fake"},
	{"internal/testbin", "", "test helpers"},
	{"internal/testdb", "", "test helpers"},
	{"internal/testmail", "internal/fake/fault internal/testbin", "test helpers"},
	{"internal/testsink", "internal/fake/fault", "test helpers"},
	{"internal/testotlp", "", "test helpers"},
	{"cmd/keep", "internal/cli", "the binary"},
	{"cmd/keep-fake", "internal/fake/googlefake internal/fake/slackfake internal/fake/llmfake", "the fakes' binary"},
}

// graph is `go list`'s view: each package of the module and the packages
// of the module it imports (its non-test files).
func graph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		if strings.HasPrefix(pkg, "test/") || strings.HasPrefix(pkg, "examples/") {
			continue // tests and examples: no rule
		}
		var own []string
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				own = append(own, strings.TrimPrefix(imp, module))
			}
		}
		slices.Sort(own)
		g[pkg] = own
	}
	return g
}

func TestImportRules(t *testing.T) {
	g := graph(t)
	if len(g) < 40 {
		t.Fatalf("go list found %d packages of keep: is the module root right?", len(g))
	}
	seen := map[string]bool{}
	for _, r := range rules {
		seen[r.pkg] = true
		got, ok := g[r.pkg]
		if !ok {
			t.Errorf("%s is in the rules but go list does not know it: remove it from the table and docs/design.md", r.pkg)
			continue
		}
		allowed := strings.Fields(r.imports)
		for _, imp := range got {
			if !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s, which its rule does not allow (%s may import: %q)", r.pkg, imp, r.pkg, r.imports)
			}
		}
		for _, imp := range allowed {
			if !slices.Contains(got, imp) {
				t.Errorf("%s no longer imports %s: take it out of its rule (and docs/design.md), so the table stays true", r.pkg, imp)
			}
		}
	}
	for pkg := range g {
		if !seen[pkg] {
			t.Errorf("%s has no import rule: add it to the table (and docs/design.md)", pkg)
		}
	}
}

// clients are the packages that are clients of keep's API and nothing
// more (issue 24: the CLI and the page are clients of one API, rules live
// once): none may import what carries out or decides people's actions or
// reads the store behind the API's back. Checked apart from the table, so
// that widening a row of the table does not quietly undo it.
var clients = []struct {
	pkg, why string
	never    []string
}{
	{"internal/web", "the page reads through the API's GET routes and acts through its POST routes (apiclient over api.ForPage): a button calling control.Control itself would answer, refuse and log differently from keep's CLI",
		[]string{"internal/engine", "internal/control", "internal/intake", "internal/transition", "internal/store", "internal/report", "internal/maintainer", "internal/scheduler", "internal/daemon"}},
	{"internal/cli", "the CLI reaches keep through apiclient (keep serve's API or inproc.API) and the few seams of inproc and daemon",
		[]string{"internal/engine", "internal/control", "internal/intake", "internal/transition", "internal/store", "internal/report", "internal/maintainer", "internal/scheduler", "internal/api"}},
}

func TestClientsOfTheAPIActOnlyThroughIt(t *testing.T) {
	g := graph(t)
	for _, c := range clients {
		got, ok := g[c.pkg]
		if !ok {
			t.Errorf("go list does not know %s", c.pkg)
			continue
		}
		for _, imp := range got {
			if slices.Contains(c.never, imp) {
				t.Errorf("%s imports %s: %s", c.pkg, imp, c.why)
			}
		}
	}
}

// testOnly are packages only tests import: helpers, fakes and suites.
var testOnly = []string{"internal/fake/...", "internal/testsink", "internal/testmail", "internal/testbin", "internal/testdb", "internal/testotlp",
	"internal/connector/connectortest", "internal/store/storetest", "internal/store/postgres/pgtest", "cmd/keep-fake"}

// never are what must stay true whatever the table says (issue 41),
// checked apart from it, so that widening a row does not quietly undo one.
// A name ending in "/..." is the package and every package under it; with
// through, every package from reaches counts (the walk does not go
// through the packages of via), not only its own imports.
var never = []struct {
	from    string
	to      []string
	through bool
	via     []string
	why     string
}{
	{"internal/connector/...", []string{"internal/store/..."}, true, []string{"internal/account"},
		"connectors never reach the store: a connector talks to a service, and what keep stores is the engine's to write; their one door is account, the sealed tokens of google and slackconn"},
	{"internal/connector", []string{"internal/account", "internal/store/..."}, true, nil,
		"the connector base never reaches account nor the store: what connectors get of the connected accounts is connector.Accounts, an interface account implements, so the base every connector and keep validate build on carries no store"},
	{"cmd/keep", testOnly, true, nil,
		"production never imports a fake or a test helper: keep's binary answers as the real services' clients do, never from a fake's code (the fault kinds keep test knows are keeptype's)"},
	{"internal/cli", []string{"internal/engine", "internal/store/..."}, false, nil,
		"the CLI never the engine (nor the store): it is a client of keep's API, and what runs keep in process goes through inproc (and daemon, for keep serve and keep run)"},
	{"internal/engine", []string{"internal/api", "internal/daemon", "internal/cli", "internal/web"}, true, nil,
		"the engine never reaches its clients: the API, the page and the CLI call it"},
	{"internal/engine", []string{"internal/control", "internal/intake"}, true, nil,
		"the engine never reaches people's actions or intake (issue 41): they write through transition (its one producer writer too), and a walk through a run's step never leaves the engine for them"},
	{"internal/engine", []string{"internal/hookreq", "internal/hooks"}, true, nil,
		"the engine never reaches a webhook's request nor its listener (issue 41): a delivery is intake's, and the engine holds nothing about HTTP but what its connectors send; it runs a handler on the req intake hands it (RunWebhook)"},
	{"internal/transition", []string{"internal/engine", "internal/control", "internal/intake"}, true, nil,
		"transition is the seam below the engine, control and intake: the one place a run, an item or a ledger row changes, needing none of them"},
	{"internal/hooks", []string{"internal/engine", "internal/store/...", "internal/intake", "internal/control"}, true, nil,
		"the webhooks' listener never reaches the engine, the store, intake or control (issue 41): it faces the internet, and holds of keep only a request's shape and the answer's (hookreq) and a Deliverer daemon hands it"},
	{"internal/hookreq", []string{"internal/engine", "internal/store/...", "internal/transition"}, true, nil,
		"a webhook request is judged alone (hookreq): no state, so intake and keep test judge it the same way"},
	{"internal/intake", []string{"internal/control"}, true, nil,
		"intake never reaches control: control's publish and held-delivery rows call intake, never the other way"},
}

func matches(pkg, pattern string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchesAny(pkg string, patterns []string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(pkg, p) })
}

// reach is every package of keep start reaches through g's imports, not
// going through the packages of via, with the path to each.
func reach(g map[string][]string, start string, via []string) map[string]string {
	path := map[string]string{start: start}
	queue := []string{start}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := path[imp]; seen {
				continue
			}
			path[imp] = path[p] + " → " + imp
			if !matchesAny(imp, via) {
				queue = append(queue, imp)
			}
		}
	}
	return path
}

func TestNeverRules(t *testing.T) {
	g := graph(t)
	for _, r := range never {
		n := 0
		for pkg := range g {
			if !matches(pkg, r.from) || (r.from != pkg && matchesAny(pkg, testOnly)) {
				continue
			}
			n++
			reached := map[string]string{}
			if r.through {
				reached = reach(g, pkg, r.via)
			} else {
				for _, imp := range g[pkg] {
					reached[imp] = pkg + " → " + imp
				}
			}
			for imp, how := range reached {
				if imp != pkg && matchesAny(imp, r.to) && !matchesAny(imp, r.via) {
					t.Errorf("%s reaches %s (%s): %s", pkg, imp, how, r.why)
				}
			}
		}
		if n == 0 {
			t.Errorf("the rule for %s matches no package of keep", r.from)
		}
	}
}

// TestNoPackageDocStatesItsImports: who may import whom is written once,
// in the table above; a package doc that says it again goes false when
// the table changes (issue 41 found 9 of 28 false).
func TestNoPackageDocStatesItsImports(t *testing.T) {
	said := regexp.MustCompile(`(?i)may (not )?import|imports only`)
	files := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || path == "../../test") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for i, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") && said.MatchString(line) {
				t.Errorf("%s:%d: %s: a package's imports are test/layers's table; delete the sentence", strings.TrimPrefix(path, "../../"), i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil || files < 100 {
		t.Fatalf("read %d Go files of keep: %v", files, err)
	}
}

// TestDesignShowsTheImportRules: docs/design.md's "Who imports whom" is
// the rendering of the table, line for line.
func TestDesignShowsTheImportRules(t *testing.T) {
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- import rules: test/layers -->\n", "<!-- end of import rules -->\n"
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("docs/design.md has no block between %q and %q", begin, end)
	}
	if got, want := string(doc[i+len(begin):j]), render(); got != want {
		t.Errorf("docs/design.md's import rules differ from the table of test/layers; put this between the markers:\n%s", want)
	}
}

func render() string {
	var b strings.Builder
	b.WriteString("| package | may import (of keep) | why |\n|---|---|---|\n")
	for _, r := range rules {
		imps := "nothing"
		if r.imports != "" {
			imps = "`" + strings.ReplaceAll(strings.ReplaceAll(r.imports, "internal/", ""), " ", "`, `") + "`"
		}
		b.WriteString("| `" + strings.TrimPrefix(r.pkg, "internal/") + "` | " + imps + " | " + r.why + " |\n")
	}
	return b.String()
}
