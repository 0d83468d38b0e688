package control

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// strandedBy lists the topics of workflow wf whose waiting events version
// label (declared by next) leaves behind, compared with the active
// version cur: no consumer reads the topic any more, or the event API no
// longer takes events for it.
func strandedBy(tx store.Tx, wf string, cur kt.Version, next script.Declaration, label string) ([]kt.Stranded, error) {
	prev, err := script.Declare(cur.File, cur.Script)
	if err != nil {
		return nil, fmt.Errorf("read the declaration of %s version %s: %w", wf, cur.Label(), err)
	}
	counts, err := tx.TopicCounts(wf)
	if err != nil {
		return nil, err
	}
	before, after := readers(prev), readers(next)
	var out []kt.Stranded
	for _, c := range counts {
		n := c.Pending + c.Reserved
		t := c.Topic
		dropsReader := len(before[t]) > 0 && len(after[t]) == 0
		dropsAPI := prev.OpenToAPI(t) && !next.OpenToAPI(t)
		if n == 0 || !dropsReader && !dropsAPI {
			continue
		}
		skip := fmt.Sprintf("keep skip-pending %s %s", wf, t)
		var msg string
		switch {
		case dropsReader:
			msg = fmt.Sprintf("%s wait on topic %s, which no consumer of version %s reads (%s read it)", kt.Count(n, "event"), t, label, strings.Join(before[t], ", "))
			if dropsAPI {
				msg += ", and the event API no longer takes events for it"
			}
			msg += fmt.Sprintf(": nothing will take them. Skip them with `%s` (their inputs show skipped), or deploy a version whose consumer subscribes to %s again", skip, t)
		default:
			msg = fmt.Sprintf("%s posted through the event API wait on topic %s, which version %s no longer opens to the event API (new posts are refused); %s still takes the ones waiting — `%s` skips them instead", kt.Count(n, "event"), t, label, strings.Join(after[t], ", "), skip)
		}
		out = append(out, kt.Stranded{Topic: t, Pending: n, Message: msg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, nil
}

// readers maps each topic to the consumers of d that subscribe to it.
func readers(d script.Declaration) map[string][]string {
	out := map[string][]string{}
	for name, c := range d.Consumers {
		for _, t := range c.Subscribe {
			out[t] = append(out[t], name)
		}
	}
	for t := range out {
		slices.Sort(out[t])
	}
	return out
}
