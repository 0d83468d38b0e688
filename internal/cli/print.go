package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keep-run/keep/internal/apitype"
)

// How the CLI shows what report computes: tables, cards, a run.

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

func (a *app) table() *tabwriter.Writer { return tabwriter.NewWriter(a.out, 0, 2, 2, ' ', 0) }

func crop(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// heading prints a section's title with its count; false when it is empty.
func (a *app) heading(title string, n int) bool {
	fmt.Fprintf(a.out, "%s (%d)\n", title, n)
	if n == 0 {
		fmt.Fprintln(a.out, "  (none yet)")
	}
	return n > 0
}

func (a *app) printInputs(inputs []apitype.Input) {
	if !a.heading("INPUTS", len(inputs)) {
		return
	}
	w := a.table()
	fmt.Fprintln(w, "  STATUS\tTITLE\tSOURCE\tID")
	for _, in := range inputs {
		fmt.Fprintf(w, "  %s\t%s\t%s/%s\t%s\n", in.Status, crop(in.Title, 60), in.Source, in.Type, crop(in.ExternalID, 30))
	}
	w.Flush()
}

func (a *app) printOutputs(outputs []apitype.Output, inputs []apitype.Input) {
	titles := map[string]string{}
	for _, in := range inputs {
		titles[in.ID] = in.Title
	}
	if !a.heading("OUTPUTS", len(outputs)) {
		return
	}
	w := a.table()
	fmt.Fprintln(w, "  STATUS\tTOOL\tTARGET\tFOR INPUT")
	for _, o := range outputs {
		var names []string
		for _, id := range o.InputIDs {
			if t, ok := titles[id]; ok {
				names = append(names, t)
			} else {
				names = append(names, id)
			}
		}
		fmt.Fprintf(w, "  %s\t%s.%s\t%s\t%s\n", o.Status, o.Tool, o.Method, crop(o.Target, 50), crop(strings.Join(names, ", "), 50))
	}
	w.Flush()
}

func (a *app) printCard(c apitype.Card) {
	fmt.Fprintf(a.out, "BLOCKED  run %s (%s %s, %s)\n", c.RunID, c.Workflow, c.Handler, c.Status)
	if c.Title != "" {
		fmt.Fprintf(a.out, "  about:   %s\n", c.Title)
	}
	if c.Mutation != nil {
		fmt.Fprintf(a.out, "  what:    %s.%s → %s\n", c.Mutation.Tool, c.Mutation.Method, c.Mutation.Target)
		if b, err := json.Marshal(c.Mutation.Args); err == nil {
			fmt.Fprintf(a.out, "  call:    %s\n", crop(string(b), 300))
		}
	}
	if w := c.AppliedWrite; w != nil {
		fmt.Fprintf(a.out, "  done:    %s.%s → %s (already applied; never sent again)\n", w.Tool, w.Method, w.Target)
	}
	for _, in := range c.Inputs {
		fmt.Fprintf(a.out, "  input:   %s\n", in.Title)
	}
	fmt.Fprintf(a.out, "  why:     %s\n", c.Reason)
	for _, n := range c.Notes {
		fmt.Fprintf(a.out, "  note:    %s\n", n)
	}
	for _, r := range c.Repairs {
		// A held repair's reason is what the person decides on (the
		// writes of both versions side by side): shown at length.
		n := 300
		if r.Status == "held" {
			n = 2000
		}
		fmt.Fprintf(a.out, "  repair:  attempt %d %s (%d tokens): %s\n", r.Attempt, r.Status, r.Tokens, crop(r.Reason, n))
	}
	var acts []string
	if c.Grant {
		if c.GrantItem != "" {
			acts = append(acts, "keep grant "+c.Workflow+" '"+c.GrantItem+"'   (allow exactly this: the run then tries again by itself)")
		} else {
			acts = append(acts, "keep grant "+c.Workflow+"   (allow it: the run then tries again by itself)")
		}
	}
	if c.Reconnect != "" {
		// Trying again before reconnecting would fail the same way.
		acts = append(acts, "keep connect "+c.Reconnect+"   (first: reconnect the account, then try again)")
	}
	// Safest first, each with what it risks (the page's order and words).
	for _, ch := range c.Choices {
		acts = append(acts, ch.Command(c.RunID)+"   ("+ch.Risk.Label()+": "+ch.Says+")")
	}
	fmt.Fprintf(a.out, "  do:      %s\n", strings.Join(acts, "\n           "))
}

// printRun renders `keep show run`: the run, its mutation, the decisions
// people took on it, its trace and, when blocked, its card.
func (a *app) printRun(d apitype.RunDetail) {
	r := d.Run
	fmt.Fprintf(a.out, "run %s\n  workflow: %s (version id %d)\n  handler:  %s %s\n  phase:    %s\n  status:   %s\n", r.ID, r.Workflow, r.Version, r.HandlerType, r.Handler, r.Phase, r.Status)
	if r.Title != "" {
		fmt.Fprintf(a.out, "  title:    %s\n", r.Title)
	}
	if r.RetryOf != "" {
		fmt.Fprintf(a.out, "  retry of: %s (automatic retry %d)\n", r.RetryOf, r.RetryCount)
	}
	if r.NextAttemptAt != "" {
		fmt.Fprintf(a.out, "  next:     keep tries it again at %s (retry %d)\n", r.NextAttemptAt, r.RetryCount+1)
	}
	switch {
	case r.Error == nil:
	case r.Error.Class == "":
		fmt.Fprintf(a.out, "  waiting:  %s\n", r.Error.Message)
	default:
		fmt.Fprintf(a.out, "  error:    %s: %s\n", r.Error.Class, r.Error.Message)
	}
	if mut := d.Mutation; mut != nil {
		fmt.Fprintf(a.out, "  mutation: %s.%s %s — %s", mut.Tool, mut.Method, mut.Target, mut.Status)
		if mut.ResolvedBy != "" {
			fmt.Fprintf(a.out, " (resolved by %s)", mut.ResolvedBy)
		}
		fmt.Fprintln(a.out)
	}
	if len(d.Decisions) > 0 {
		fmt.Fprintln(a.out, "\nDECISIONS")
		for _, x := range d.Decisions {
			fmt.Fprintf(a.out, "  %s  %s: %s — %s\n", x.At, x.By, x.Action, x.Detail)
		}
	}
	fmt.Fprintln(a.out, "\nTRACE")
	for _, e := range d.Trace {
		line := fmt.Sprintf("  %s  %-8s %-9s", time.UnixMilli(e.At).UTC().Format("15:04:05.000"), e.Phase, e.Kind)
		if e.Method != "" {
			line += " " + e.Method
		}
		if e.Args != nil {
			b, _ := json.Marshal(e.Args)
			line += " " + crop(string(b), 120)
		}
		if e.Duration > 0 {
			line += fmt.Sprintf(" (%dms)", e.Duration)
		}
		if e.Outcome != "" {
			line += " → " + e.Outcome
		}
		if e.Text != "" {
			line += " " + e.Text
		}
		fmt.Fprintln(a.out, line)
	}
	if d.Dropped > 0 {
		fmt.Fprintf(a.out, "  … %d more trace entries were dropped\n", d.Dropped)
	}
	if d.Card != nil {
		fmt.Fprintln(a.out)
		a.printCard(*d.Card)
	}
}
