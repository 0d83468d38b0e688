package maintainer

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
)

//go:embed prompts/plan.md
var planPrompt string

// Planner writes a workflow script from a person's words (keep plan), or
// the next major version of one (keep plan --revise).
type Planner struct {
	Model Asker
	// Check validates a script as keep deploy would.
	Check       func(file, src string) (*script.Program, []kt.Problem, error)
	Registry    *connector.Registry
	MaxAttempts int
	// File is the name the script is saved under ("workflow.js"): its test
	// names it (workflow: "./workflow.js").
	File string
	// Test, when set, asks for the script's test too (keep test): the
	// answer's second fenced block, run on the script (testSrc, src); it
	// says why they are refused, "" when every case passes.
	Test func(ctx context.Context, testSrc, src string) string
	// TestFaults are the faults a test may name (testrun.Faults), for the
	// types the prompt carries.
	TestFaults []string
}

// Plan is a script the Planner wrote and what to tell the person.
type Plan struct {
	Script   string
	Test     string   // the script's test file (Planner.Test set)
	Summary  string   // the model's words
	Notes    []string // keep's review: what the person should know before deploying
	Tokens   int
	Attempts int
}

// review applies the Planner's rules beyond validation, on the script as
// script.Analyze reads it; "" when it passes.
func review(src string) string {
	a := analysisOf(src)
	for _, in := range a.Inputs {
		if !in.HasTitle {
			return fmt.Sprintf("the input registered on line %d has no title: give every registerInput a title a person understands", in.Line)
		}
	}
	// An id built from the time or chance is refused by validation, in
	// every script (script.Check, issue 42), before this review.
	return ""
}

// Plan asks for a script for intent; current, when set, is the version
// the new one revises.
func (p *Planner) Plan(ctx context.Context, intent string, current *kt.Version) (Plan, error) {
	var b strings.Builder
	creds := script.FindCredentials("")
	if current != nil {
		creds = script.FindCredentials(current.Script) // never sent: placeholders, put back
	}
	fmt.Fprintf(&b, "What the person wants:\n\n%s\n\n", intent)
	if current != nil {
		fmt.Fprintf(&b, "Revise this workflow (%s, version %s) into its next major version:\n\n```js\n%s\n```\n\n", current.Workflow, current.Label(), current.Script)
	}
	if p.Test != nil {
		fmt.Fprintf(&b, "The script is saved as %s: its test starts export default Keep.test({ workflow: \"./%s\", cases: { ... } }).\n\n", p.File, p.File)
	}
	fmt.Fprintf(&b, "## The connectors you may use\n\n%s\n", connector.Markdown(connector.Describe(p.Registry)))
	b.WriteString("\n" + typesSection(p.Registry, "", p.TestFaults))
	chat := []Chat{{Role: "system", Content: planPrompt}, {Role: "user", Content: b.String()}}
	var plan Plan
	var why string
	for plan.Attempts = 1; plan.Attempts <= p.MaxAttempts; plan.Attempts++ {
		ans, err := p.Model.Ask(ctx, masked(chat, creds))
		plan.Tokens += ans.Tokens
		if err != nil {
			return plan, fmt.Errorf("no answer: %v", err)
		}
		blocks, summary := Blocks(ans.Content)
		var src, test string
		if len(blocks) > 0 {
			src = creds.Restore(blocks[0])
		}
		if len(blocks) > 1 {
			test = creds.Restore(blocks[1])
		}
		switch {
		case strings.TrimSpace(src) == "":
			why = "the answer has no fenced code block with the whole script"
		default:
			why = p.validate(src, current)
		}
		if why == "" && p.Test != nil {
			if strings.TrimSpace(test) == "" {
				why = "the answer has no second fenced code block with the script's test (export default Keep.test({ ... }))"
			} else {
				why = p.Test(ctx, test, src)
			}
		}
		if why == "" {
			plan.Script, plan.Test, plan.Summary = src, test, summary
			if current != nil {
				if w := frozenIDs(current.Script, src); w != "" {
					plan.Notes = append(plan.Notes, strings.Replace(w, "; a repair keeps them, or done work would be done again", "", 1)+
						": deploy it as a major version and choose what happens to done items (--reprocess) and to items of the old format (--accept-orphans)")
				}
			}
			return plan, nil
		}
		chat = append(chat, Chat{Role: "assistant", Content: ans.Content},
			Chat{Role: "user", Content: "keep refused this script: " + why + ". Answer again with the whole corrected script in one fenced code block."})
	}
	return plan, fmt.Errorf("no answer passed keep's checks in %d attempts; the last was refused because %s", p.MaxAttempts, why)
}

func (p *Planner) validate(src string, current *kt.Version) string {
	prog, problems, err := p.Check("plan.js", src)
	if err != nil {
		var lines []string
		for _, pr := range problems {
			lines = append(lines, pr.String())
		}
		if len(lines) == 0 {
			lines = append(lines, err.Error())
		}
		return "it does not pass keep validate: " + strings.Join(lines, "; ")
	}
	// A revision is the next version of the same workflow: under another
	// name, deploying it would start a second workflow beside the first.
	if current != nil && prog.Decl.WorkflowName() != current.Workflow {
		return fmt.Sprintf("it is named %q, but it revises the workflow %q: keep the name %q", prog.Decl.WorkflowName(), current.Workflow, current.Workflow)
	}
	return review(src)
}
