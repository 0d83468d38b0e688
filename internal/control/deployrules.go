package control

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// nextVersion numbers a new version of a deployed workflow (SPEC §9): a
// minor version is a repair and may not change the format of item keys; a
// major one says what happens to existing items and acknowledges orphans.
func nextVersion(tx store.Tx, cur kt.Version, v *kt.Version, o DeployOptions, res *kt.DeployResult) error {
	w, err := keyFormatWarning(tx, v.Workflow, v.Script)
	if err != nil {
		return err
	}
	ids := ""
	if n := len(o.idChanges); n > 0 {
		ids = fmt.Sprintf("replayed on it, %d piece(s) of done work would get other ids and be done again — %s", n, engine.ListDifferences(o.idChanges))
	}
	if o.Kind != kt.DeployMajor {
		if ids != "" {
			if orph, err := incompleteItems(tx, v.Workflow); err != nil {
				return err
			} else if orph != "" {
				ids += "; " + orph
			}
			return kt.Refuse("a minor version is a repair, and a repair keeps the ids of done work: %s. Nothing was deployed. Keep the expressions that build item ids, messageIds and input ids as they were; if the intent changed, deploy it as a major version (--major --reprocess=…)", ids)
		}
		if w != "" {
			return kt.Refuse("a minor version is a repair, and a repair keeps item ids frozen (ch 12 §12.9): %s. Nothing was deployed. If the intent changed, deploy it as a major version (--major --reprocess=… --accept-orphans)", w)
		}
		v.Major, v.Minor = cur.Major, cur.Minor+1
		return nil
	}
	if o.Reprocess == "" {
		return ErrReprocessChoice
	}
	// A major version that gives done or incomplete work other ids is
	// deployed only with the person's consent (ch 12 §12.6), whether the
	// item keys' format (keyFormatWarning) or the replay found it.
	if (w != "" || ids != "") && !o.AcceptOrphans {
		msg := w
		if ids != "" {
			if msg != "" {
				msg += "; "
			}
			msg += ids
			if w == "" {
				if orph, err := incompleteItems(tx, v.Workflow); err != nil {
					return err
				} else if orph != "" {
					msg += "; " + orph
				}
			}
		}
		return &kt.ActionError{Code: kt.CodeNeedsConsent, Msg: msg + ". Nothing was deployed: to activate it anyway, deploy again with --accept-orphans"}
	}
	v.Major, v.Minor = cur.Major+1, 0
	if w != "" {
		res.Warnings = append(res.Warnings, w)
	}
	if ids != "" {
		res.Warnings = append(res.Warnings, ids)
		if w == "" {
			orph, err := incompleteItems(tx, v.Workflow)
			if err != nil {
				return err
			}
			if orph != "" {
				res.Warnings = append(res.Warnings, orph)
			}
		}
	}
	return nil
}

// incompleteItems names the workflow's task items neither done nor
// skipped: when a version gives items other ids, these are left behind
// (orphaned) — "" when there are none.
func incompleteItems(tx store.Tx, wf string) (string, error) {
	ins, err := tx.InputList(wf)
	if err != nil {
		return "", err
	}
	var keys []string
	for _, in := range ins {
		if in.Kind == kt.KindTask && !in.Status.Finished() {
			keys = append(keys, in.Key)
		}
	}
	if len(keys) == 0 {
		return "", nil
	}
	more := ""
	if len(keys) > 10 {
		keys, more = keys[:10], ", …"
	}
	return fmt.Sprintf("%d incomplete item(s) no version would touch again would be orphaned (%s%s; see `keep items %s --orphaned`, `keep skip` resolves them)", len(keys), strings.Join(keys, ", "), more, wf), nil
}

// checkReprocessKeys checks a KEY,KEY choice before anything is deployed
// (a new workflow has no item to name).
func checkReprocessKeys(tx store.Tx, wf, choice string) error {
	if choice == "" || choice == "none" || choice == "all" {
		return nil
	}
	for _, key := range strings.Split(choice, ",") {
		if _, err := transition.FindItem(tx, wf, strings.TrimSpace(key)); err != nil {
			return kt.Refuse("--reprocess: %v; nothing was deployed", err)
		}
	}
	return nil
}

// syncHandlers makes the handler rows match a declaration: on deploy every
// producer and task is due now and every consumer dirty (SPEC §5); handlers
// that the new version dropped stop being scheduled but keep their state.
func syncHandlers(tx store.Tx, wf string, d script.Declaration, now int64) error {
	existing, err := tx.HandlerList(wf)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	put := func(name string, typ kt.HandlerType) error {
		seen[name] = true
		h, err := tx.HandlerGet(wf, name)
		if err != nil && !errors.Is(err, kt.ErrNotFound) {
			return err
		}
		h.Workflow, h.Name, h.Type = wf, name, typ
		transition.Touch(&h, now)
		if typ == kt.HandlerConsumer {
			h.Dirty, h.NextRunAt = true, 0
		} else {
			h.NextRunAt = now
		}
		return tx.HandlerPut(h)
	}
	for n := range d.Producers {
		if err := put(n, kt.HandlerProducer); err != nil {
			return err
		}
	}
	for n := range d.Consumers {
		if err := put(n, kt.HandlerConsumer); err != nil {
			return err
		}
	}
	for n := range d.Tasks {
		if err := put(n, kt.HandlerTask); err != nil {
			return err
		}
	}
	for _, h := range existing {
		if !seen[h.Name] {
			h.Dirty, h.Queued, h.NextRunAt, h.WakeAt = false, false, 0, 0
			transition.Touch(&h, now)
			if err := tx.HandlerPut(h); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReprocessAfterMajor applies `keep deploy --major --reprocess=...`: "all"
// starts a new attempt of every item that is not in progress, a list of keys
// starts one for each of them, in the deploy's transaction: a choice it
// cannot apply deploys nothing. It returns how many items were reprocessed.
func ReprocessAfterMajor(tx store.Tx, wf, choice string, now int64) (int, error) {
	if choice == "" || choice == "none" {
		return 0, nil
	}
	var items []kt.Input
	if choice == "all" {
		all, err := tx.InputList(wf)
		if err != nil {
			return 0, err
		}
		for _, it := range all {
			if it.Kind == kt.KindTask && it.Status == kt.ItemProcessing {
				continue
			}
			items = append(items, it)
		}
	} else {
		named := map[string]bool{}
		for _, key := range strings.Split(choice, ",") {
			it, err := transition.FindItem(tx, wf, strings.TrimSpace(key))
			if err != nil {
				return 0, err
			}
			if !named[it.ID] { // an item named twice (by key and id, say) is one new attempt
				named[it.ID] = true
				items = append(items, it)
			}
		}
	}
	n := 0
	for _, it := range items {
		if _, err := transition.Reprocess(tx, it, now); err != nil {
			var ae *kt.ActionError
			if choice == "all" && errors.As(err, &ae) {
				continue // still in progress: left alone
			}
			return 0, err
		}
		n++
	}
	return n, nil
}

// KeyPrefixes lists the item key prefixes a script gives withItem
// ("email:"), as script.Analyze reads the ids: the constant text an id
// starts with, up to its first colon.
func KeyPrefixes(source string) []string {
	a, err := script.Analyze(source)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range a.Items {
		i := strings.Index(e.Prefix, ":")
		if i <= 0 {
			continue
		}
		p := e.Prefix[:i+1]
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// keyFormatWarning compares the item keys of a new major version with the
// existing items (ch 12 §12.6 "ID format change detection", best effort).
func keyFormatWarning(tx store.Tx, wf, source string) (string, error) {
	newPrefixes := KeyPrefixes(source)
	if len(newPrefixes) == 0 {
		return "", nil
	}
	items, err := tx.InputList(wf)
	if err != nil {
		return "", err
	}
	oldCount := map[string]int{}
	var samples []string
	incomplete := 0
	for _, it := range items {
		if it.Kind != kt.KindTask {
			continue
		}
		p := it.Key
		if i := strings.Index(p, ":"); i >= 0 {
			p = p[:i+1]
		}
		oldCount[p]++
		if !it.Status.Finished() {
			incomplete++
			if len(samples) < 5 {
				samples = append(samples, it.Key)
			}
		}
	}
	for _, p := range newPrefixes {
		if oldCount[p] > 0 {
			return "", nil
		}
	}
	if len(oldCount) == 0 {
		return "", nil
	}
	var old []string
	for p := range oldCount {
		old = append(old, p)
	}
	sort.Strings(old)
	orphans := ""
	if incomplete > 0 {
		orphans = fmt.Sprintf(" (%s%s)", strings.Join(samples, ", "), map[bool]string{true: ", …", false: ""}[incomplete > len(samples)])
	}
	return fmt.Sprintf("item ids change format: existing items use %s, the new version uses %s. Old items will not be matched: their work may be done again under new ids (duplicate writes are possible), and %d incomplete old items will become orphaned%s (see `keep items %s --orphaned`; `keep skip` resolves them)",
		strings.Join(old, ", "), strings.Join(newPrefixes, ", "), incomplete, orphans, wf), nil
}
