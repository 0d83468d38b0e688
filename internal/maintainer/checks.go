package maintainer

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/script"
)

// The checks a repair passes before anything runs (issue 17; ch 12 §12.9).
// Each returns "" or why the repair is refused, in words the model gets back.

// sameShape: the same handlers (of the same kinds), topics, publishes,
// subscriptions and approval settings.
func sameShape(old, new script.Declaration) string {
	sorted := func(s []string) string {
		c := append([]string(nil), s...)
		sort.Strings(c)
		return strings.Join(c, ",")
	}
	if sorted(old.Topics) != sorted(new.Topics) {
		return fmt.Sprintf("the topics changed (%s → %s); a repair keeps them", sorted(old.Topics), sorted(new.Topics))
	}
	for kind, pair := range map[string][2]map[string]script.HandlerDecl{"producer": {old.Producers, new.Producers}, "consumer": {old.Consumers, new.Consumers}, "task": {old.Tasks, new.Tasks}} {
		o, n := pair[0], pair[1]
		if len(o) != len(n) {
			return fmt.Sprintf("the %ss changed; a repair keeps every handler", kind)
		}
		for name, h := range o {
			nh, ok := n[name]
			if !ok {
				return fmt.Sprintf("the %s %s is gone; a repair keeps every handler", kind, name)
			}
			if sorted(h.Publishes) != sorted(nh.Publishes) || sorted(h.Subscribe) != sorted(nh.Subscribe) {
				return fmt.Sprintf("the %s %s publishes or subscribes differently; a repair keeps its topics", kind, name)
			}
		}
	}
	a, _ := json.Marshal(old.RequireApproval)
	b, _ := json.Marshal(new.RequireApproval)
	if string(a) != string(b) {
		return "the approval settings changed; a repair never changes what needs a person's approval"
	}
	return ""
}

// noWider: no connector method or input source the old script did not use.
func noWider(old, new string) string {
	had := map[string]bool{}
	for _, u := range append(engine.Uses(old), engine.Reaches(old)...) {
		had[u] = true
	}
	var more []string
	for _, u := range append(engine.Uses(new), engine.Reaches(new)...) {
		if !had[u] && !slices.Contains(more, u) {
			more = append(more, u)
		}
	}
	if len(more) > 0 {
		return fmt.Sprintf("it uses %s, which the version in place does not; a repair never widens what a workflow may do", strings.Join(more, ", "))
	}
	return ""
}

// analysisOf reads a script (script.Analyze); a script that does not
// parse has failed validation before any check here runs.
func analysisOf(src string) *script.Analysis {
	a, err := script.Analyze(src)
	if err != nil {
		return &script.Analysis{}
	}
	return a
}

// identityExprs are the expressions that build item IDs, message ids,
// input ids and subkeys, each with the definitions it reads (normalized
// source: comments and spacing do not count), as script.Analyze reads
// them.
func identityExprs(src string) []string {
	return analysisOf(src).Identities()
}

// frozenIDs: item-ID and subkey expressions unchanged (ch 12 §12.9).
func frozenIDs(old, new string) string {
	o, n := identityExprs(old), identityExprs(new)
	if strings.Join(o, "\n") == strings.Join(n, "\n") {
		return ""
	}
	return fmt.Sprintf("the expressions that build item IDs, message ids or subkeys changed (%s → %s); a repair keeps them, or done work would be done again", strings.Join(o, "; "), strings.Join(n, "; "))
}
