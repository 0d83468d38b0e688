package engine

import (
	"crypto/sha256"
	"slices"
	"sort"
	"strings"
	"sync"

	kt "github.com/keep-run/keep/internal/keeptype"
	sc "github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Permissions per source (issue 16, ch 06a "permissions are enforced per
// source"): a version uses connector methods and input sources; a person
// grants them (keep grant, the page's Grant, keep run for the script it
// runs, keep deploy --grant); a call of anything not granted blocks its
// run as paused:approval with a card that says what to grant. Grants are
// kept per workflow, so a new version that uses nothing new needs none.

// Uses lists the grants a script needs that its reading can name, sorted,
// as script.Analyze reads it: "tool.method" for a call that reaches one
// place, "http.request METHOD HOST" for a request whose method and host
// are written as literals or consts (a URL built from a const that ends
// its host, "https://api.example.com/" + path, names it too),
// "sql.query DB"/"sql.exec DB" for a literal database, "source:NAME"
// for each registerInput whose source is a literal, and "secret:NAME" for
// each {secret:NAME} the script writes (issue 38). What it cannot name
// (a host computed at run time) is refused at the call, whose message
// names exactly what was reached, for the card's Grant to grant. A script
// that does not parse uses nothing it can be granted.
func Uses(script string) []string {
	u, _ := usesOf(script)
	return slices.Clone(u)
}

// UsesOf is Uses of several scripts together, sorted, once each.
func UsesOf(scripts []string) []string {
	set := map[string]bool{}
	for _, s := range scripts {
		for _, u := range Uses(s) {
			set[u] = true
		}
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// Reaches lists every connector method and input source a script calls,
// whether or not the reading names its target ("http.request",
// "source:files"), sorted.
func Reaches(script string) []string {
	_, bases := usesOf(script)
	out := make([]string, 0, len(bases))
	for b := range bases {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// secretComputed is what Reaches lists for a script that builds a
// secret's name at run time: every secret grant may be used by it.
const secretComputed = "{secret:…} with a name computed at run time"

// usesOf is Uses, and every method and source the script reaches, named
// or not (GrantBase's form), so a grant of one it still calls counts as used.
// The answers are kept per script text (a workflow's status reads them on
// every view: analysing the script each time was a twentieth of the
// workflow page's bytes, issue 44); callers only read them.
func usesOf(script string) ([]string, map[string]bool) {
	key := sha256.Sum256([]byte(script))
	usesMemo.Lock()
	m, ok := usesMemo.m[key]
	usesMemo.Unlock()
	if ok {
		return m.uses, m.bases
	}
	uses, bases := analyseUses(script)
	usesMemo.Lock()
	if len(usesMemo.m) >= maxUsesMemo {
		clear(usesMemo.m)
	}
	usesMemo.m[key] = usesOfScript{uses, bases}
	usesMemo.Unlock()
	return uses, bases
}

type usesOfScript struct {
	uses  []string
	bases map[string]bool
}

// usesMemo holds usesOf's answers for the last scripts read (at most
// maxUsesMemo; then it starts again).
var usesMemo = struct {
	sync.Mutex
	m map[[32]byte]usesOfScript
}{m: map[[32]byte]usesOfScript{}}

const maxUsesMemo = 64

func analyseUses(script string) ([]string, map[string]bool) {
	bases := map[string]bool{}
	a, err := sc.Analyze(script)
	if err != nil {
		return nil, bases
	}
	set := map[string]bool{}
	for _, c := range a.Calls {
		bases[c.Tool+"."+c.Method] = true
		if it, ok := staticGrant(c); ok {
			set[it] = true
		}
	}
	for _, in := range a.Inputs {
		if in.Source != "" {
			set["source:"+in.Source] = true
			bases["source:"+in.Source] = true
		}
	}
	for _, name := range a.Secrets {
		set[kt.SecretGrant(name)] = true
		bases[kt.SecretGrant(name)] = true
	}
	if a.SecretsComputed {
		bases[secretComputed] = true
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	sort.Strings(out)
	return out, bases
}

// staticGrant is the grant a call needs when its arguments say it before
// the run: the fields the grant reads are literals (or consts), and a
// URL's host is written whole.
func staticGrant(c sc.Call) (string, bool) {
	args := make(map[string]any, len(c.Args))
	for k, v := range c.Args {
		args[k] = v
	}
	switch c.Tool + "." + c.Method {
	case "http.request":
		if c.Open {
			return "", false
		}
		if _, computed := c.Prefixes["method"]; computed {
			return "", false
		}
		if _, lit := args["url"].(string); !lit {
			p, ok := c.Prefixes["url"]
			if !ok {
				return "", false
			}
			if _, err := kt.HostOfURL(p, false); err != nil {
				return "", false
			}
			args["url"] = p
		}
	case "sql.query", "sql.exec":
		if _, lit := args["db"].(string); !lit || c.Open {
			return "", false
		}
	}
	it, err := kt.GrantItem(c.Tool, c.Method, args)
	return it, err == nil
}

// GrantedIn reports whether item is allowed by one of gs (keeptype's
// GrantCovers: the same grant, "*", or the method's name alone).
func GrantedIn(gs []kt.Grant, item string) bool {
	for _, g := range gs {
		if kt.GrantCovers(g.Item, item) {
			return true
		}
	}
	return false
}

// Ungranted lists the uses of a workflow's active version not granted yet.
func Ungranted(tx store.Tx, workflow string) ([]string, error) {
	wf, err := tx.WorkflowGet(workflow)
	if err != nil {
		return nil, err
	}
	v, err := tx.VersionGet(workflow, wf.ActiveVersion)
	if err != nil {
		return nil, err
	}
	gs, err := tx.GrantList(workflow)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, u := range Uses(v.Script) {
		if !GrantedIn(gs, u) {
			out = append(out, u)
		}
	}
	return out, nil
}

// Unused lists the grants of gs that a script no longer reaches: none of
// its calls is of the grant's method (or source). A grant whose target a
// call computes at run time counts as used while the method is called.
func Unused(gs []kt.Grant, script string) []string {
	_, bases := usesOf(script)
	var out []string
	for _, g := range gs {
		if g.Item != "*" && !bases[kt.GrantBase(g.Item)] && !(bases[secretComputed] && strings.HasPrefix(g.Item, kt.SecretGrantPrefix)) {
			out = append(out, g.Item)
		}
	}
	return out
}

// checkGrant refuses a call that needs item, which the workflow was not
// granted; the message names the grant, which the card's Grant grants.
func (x *runExec) checkGrant(item, what string) error {
	ok, err := x.granted(item)
	if err != nil || ok {
		return err
	}
	return kt.Errorf(kt.ClassPermission, "%s is not granted to %s: a person allows what a workflow reaches (%s)%s", what, x.wf.Name, item, kt.GrantSuffix(x.wf.Name, item))
}

// granted reports whether the workflow was granted item, reading its
// grants at the run's first call when the step's plan did not.
func (x *runExec) granted(item string) (bool, error) {
	if x.grants == nil {
		var gs []kt.Grant
		if err := x.e.store.View(x.ctx, func(tx store.Tx) error {
			var err error
			gs, err = tx.GrantList(x.wf.Name)
			return err
		}); kt.IsDamaged(err) {
			return false, err // a damaged grant allows nothing (issue 44)
		} else if err != nil {
			return false, kt.Errorf(kt.ClassInternal, "read the grants of %s: %v", x.wf.Name, err)
		}
		x.grants = gs
		if x.grants == nil {
			x.grants = []kt.Grant{}
		}
	}
	return GrantedIn(x.grants, item), nil
}
