package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/keep-run/keep/internal/transition"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

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

// grantedIn reports whether item is allowed by one of gs (keeptype's
// GrantCovers: the same grant, "*", or the method's name alone).
func grantedIn(gs []kt.Grant, item string) bool {
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
		if !grantedIn(gs, u) {
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

// grantAll records grants of items inside tx, with the decision.
func grantAll(ctx context.Context, tx store.Tx, workflow string, items []string, now int64, logIt bool) error {
	if len(items) == 0 {
		return nil
	}
	for _, it := range items {
		if err := tx.GrantAdd(kt.Grant{Workflow: workflow, Item: it, GrantedBy: transition.Actor(ctx), GrantedAt: now}); err != nil {
			return err
		}
	}
	if !logIt {
		return nil
	}
	return transition.LogDecision(ctx, tx, kt.Decision{Workflow: workflow, Action: "grant", Detail: "granted " + strings.Join(items, ", "), At: now})
}

// Grant grants a workflow everything its active version uses that the
// reading names, and what its blocked run was refused at the call (a
// target computed at run time), and lets that run try again. It returns
// what it granted (nothing when all was granted already).
func Grant(ctx context.Context, st store.Store, workflow string, now time.Time) ([]string, error) {
	return grantThen(ctx, st, workflow, now, func(tx store.Tx, _ string) ([]string, error) {
		return ToGrant(tx, workflow)
	})
}

// ToGrant is what Grant would grant: the version's uses not granted yet,
// and the grant its blocked run was refused.
func ToGrant(tx store.Tx, workflow string) ([]string, error) {
	items, err := Ungranted(tx, workflow)
	if err != nil {
		return nil, err
	}
	r, err := tx.RunOpen(workflow)
	if err != nil || r.Status != kt.StatusApproval || r.Action != "" {
		return items, nil
	}
	refused := kt.NeededGrant(r.ErrorMessage)
	if refused == "" || slices.Contains(items, refused) {
		return items, nil
	}
	gs, err := tx.GrantList(workflow)
	if err != nil || grantedIn(gs, refused) {
		return items, err
	}
	return append(items, refused), nil
}

// GrantItems grants a workflow exactly items (the card's Grant: what its
// run was refused), and lets a run blocked for want of them try again.
func GrantItems(ctx context.Context, st store.Store, workflow string, items []string, now time.Time) ([]string, error) {
	for _, it := range items {
		if err := kt.CheckGrantItem(it); err != nil {
			return nil, &kt.ActionError{Msg: err.Error()}
		}
	}
	return grantThen(ctx, st, workflow, now, func(tx store.Tx, _ string) ([]string, error) {
		gs, err := tx.GrantList(workflow)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, it := range items {
			if !slices.ContainsFunc(gs, func(g kt.Grant) bool { return g.Item == it }) && !slices.Contains(out, it) {
				out = append(out, it)
			}
		}
		return out, nil
	})
}

// grantThen grants what pick chooses (given the grant the workflow's
// blocked run was refused, "" when none is named) and lets that run try
// again once what it was refused is granted.
func grantThen(ctx context.Context, st store.Store, workflow string, now time.Time, pick func(tx store.Tx, refused string) ([]string, error)) ([]string, error) {
	var granted []string
	var blocked string
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(workflow); errors.Is(err, kt.ErrNotFound) {
			return kt.Missing("there is no workflow %q (see `keep status`)", workflow)
		} else if err != nil {
			return err
		}
		var refused string
		r, err := tx.RunOpen(workflow)
		waiting := err == nil && r.Status == kt.StatusApproval && r.Action == "" && kt.NeedsGrant(r.ErrorMessage)
		if waiting {
			refused = kt.NeededGrant(r.ErrorMessage)
		}
		items, err := pick(tx, refused)
		if err != nil {
			return err
		}
		granted = items
		if err := grantAll(ctx, tx, workflow, items, now.UnixMilli(), true); err != nil {
			return err
		}
		if !waiting {
			return nil
		}
		gs, err := tx.GrantList(workflow)
		if err != nil {
			return err
		}
		// A message of the form before grants were named says nothing to
		// check: the run tries again, as it did then.
		if refused == "" || grantedIn(gs, refused) {
			blocked = r.ID
		}
		return nil
	})
	if err != nil || blocked == "" {
		return granted, err
	}
	if _, err := resolveRun(ctx, st, blocked, kt.ResolveTryAgain, (*decision).tryAgain, now); err != nil && !IsRefusal(err) {
		return granted, err
	}
	return granted, nil
}

// revokeGrants takes grants back: a call they allowed is refused from its next
// call on (a run under way keeps what it read already). Each revoke is in
// the decision log.
func revokeGrants(ctx context.Context, st store.Store, workflow string, items []string, now time.Time) (string, error) {
	if len(items) == 0 {
		return "", &kt.ActionError{Msg: "name the grants to revoke: keep grant " + workflow + " --revoke 'http.request POST api.example.com'"}
	}
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(workflow); errors.Is(err, kt.ErrNotFound) {
			return kt.Missing("there is no workflow %q (see `keep status`)", workflow)
		} else if err != nil {
			return err
		}
		gs, err := tx.GrantList(workflow)
		if err != nil && !kt.IsDamaged(err) {
			// A damaged grant is taken back as it is stored (its
			// restore step, kt.RestoreGrant): the list only says, on a
			// refusal, which grants there are.
			return err
		}
		for _, it := range items {
			ok, err := tx.GrantRemove(workflow, it)
			if err != nil {
				return err
			}
			if !ok {
				have := make([]string, 0, len(gs))
				for _, g := range gs {
					have = append(have, "'"+g.Item+"'")
				}
				if len(have) == 0 {
					have = append(have, "none")
				}
				return &kt.ActionError{Msg: fmt.Sprintf("%s has no grant '%s'; nothing was revoked (its grants: %s)", workflow, it, strings.Join(have, ", "))}
			}
		}
		return transition.LogDecision(ctx, tx, kt.Decision{Workflow: workflow, Action: "revoke", Detail: "revoked " + strings.Join(items, ", "), At: now.UnixMilli()})
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("revoked %s: %s — a call that needs it is refused from now on", workflow, strings.Join(items, ", ")), nil
}

// IsRefusal reports whether err is a refused action (the state moved on).
func IsRefusal(err error) bool {
	var ae *kt.ActionError
	return errors.As(err, &ae)
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
	return grantedIn(x.grants, item), nil
}

// grantAction is Grant as people ask for it, what it did in a sentence:
// without items, what the version uses and its run was refused (keep
// grant WF); with items, exactly those (the card's Grant).
func grantAction(ctx context.Context, st store.Store, workflow string, items []string, now time.Time) (string, error) {
	if len(items) == 0 {
		granted, err := Grant(ctx, st, workflow, now)
		if err != nil || len(granted) == 0 {
			return fmt.Sprintf("%s was granted everything its active version uses already", workflow), err
		}
		return fmt.Sprintf("granted %s: %s", workflow, strings.Join(granted, ", ")), nil
	}
	granted, err := GrantItems(ctx, st, workflow, items, now)
	if err != nil || len(granted) == 0 {
		return fmt.Sprintf("%s was granted %s already", workflow, strings.Join(items, ", ")), err
	}
	return fmt.Sprintf("granted %s: %s", workflow, strings.Join(granted, ", ")), nil
}
