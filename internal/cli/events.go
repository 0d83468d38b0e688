package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/inproc"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// eventsView is what `keep events --json` prints.
type eventsView struct {
	Topics    []apitype.Topic    `json:"topics"`
	Producers []apitype.Producer `json:"producers"`
	apitype.EventPage
}

// eventsCmd shows a workflow's topics (counts by state) and its events,
// each with its payload and the inputs that caused it (issue 12 #8).
func (a *app) eventsCmd() *cobra.Command {
	var topic, state string
	var after int64
	var limit int
	c := reader(a, &cobra.Command{Use: "events WORKFLOW", Short: "show a workflow's topics and events: pending, reserved, consumed, skipped, with payloads and causes", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, k *keepAPI, args []string) (eventsView, error) {
			t, err := k.Topics(ctx, args[0])
			if err != nil {
				return eventsView{}, err
			}
			page, err := k.Events(ctx, args[0], apitype.EventQuery{Topic: topic, Status: state, After: after, Limit: limit})
			return eventsView{Topics: t.Topics, Producers: t.Producers, EventPage: page}, err
		},
		func(_ context.Context, _ *keepAPI, v eventsView) error { a.printEvents(v); return nil })
	a.eventsFlags(c, &topic, &state, &after, &limit)
	return c
}

func (a *app) printEvents(v eventsView) {
	w := a.table()
	fmt.Fprintln(w, "TOPIC\tPENDING\tRESERVED\tCONSUMED\tSKIPPED\tWRITTEN BY\tCONSUMER")
	for _, t := range v.Topics {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", t.Name, t.Pending, t.Reserved, t.Consumed, t.Skipped, strings.Join(t.Writers, ", "), t.Consumer)
	}
	w.Flush()
	fmt.Fprintf(a.out, "\nEVENTS (%d)\n", len(v.Events))
	w = a.table()
	fmt.Fprintln(w, "  ID\tTOPIC\tMESSAGE\tSTATE\tCAUSED BY\tPAYLOAD")
	for _, e := range v.Events {
		var causes []string
		for _, c := range e.CausedBy {
			causes = append(causes, crop(c.Title, 40))
		}
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Topic, crop(e.MessageID, 30), e.Status, strings.Join(causes, "; "), crop(compact(e.Payload), 60))
	}
	w.Flush()
	if v.Next != 0 {
		fmt.Fprintf(a.out, "  … more: --after %d\n", v.Next)
	}
}

// compact is a JSON value on one line, however the API laid it out.
func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func (a *app) eventsFlags(c *cobra.Command, topic, state *string, after *int64, limit *int) {
	c.Flags().StringVar(topic, "topic", "", "only this topic")
	c.Flags().StringVar(state, "status", "", "only events in this state: pending, reserved, consumed, skipped")
	c.Flags().Int64Var(after, "after", 0, "the page after this event id (printed at the end of a page)")
	c.Flags().IntVar(limit, "limit", 100, "events per page (1 to 1000)")
}

// resetStateCmd and skipPendingCmd are chapter 06's controls; each asks
// for a confirmation (or --yes) and is recorded in the decision log.
func (a *app) resetStateCmd() *cobra.Command {
	return a.controlCmd(&cobra.Command{Use: "reset-state WORKFLOW HANDLER", Short: "forget a producer's (or task's) state: its next run, at once, starts from scratch"},
		"Reset the state of %[2]s in %[1]s? Its next run starts from scratch (inputs and events it finds again are not duplicated).",
		func(ctx context.Context, c *keepAPI, wf, handler string) (string, string, error) {
			r, err := c.ResetState(ctx, wf, handler)
			return r.Message, wf, err // the producer runs now: carried out
		})
}

func (a *app) skipPendingCmd() *cobra.Command {
	return a.controlCmd(&cobra.Command{Use: "skip-pending WORKFLOW TOPIC", Short: "skip every pending event of a topic that no run holds (their inputs show skipped)"},
		"Skip every pending event of topic %[2]s in %[1]s? Its consumer will not see them.",
		func(ctx context.Context, c *keepAPI, wf, topic string) (string, string, error) {
			r, err := c.SkipPending(ctx, wf, topic)
			return r.Message, "", err
		})
}

// controlCmd makes c a control of a workflow's part (WORKFLOW NAME): it
// asks question (with the workflow and the name), then performs do.
func (a *app) controlCmd(c *cobra.Command, question string, do func(ctx context.Context, c *keepAPI, wf, name string) (string, string, error)) *cobra.Command {
	var yes bool
	c.Args = cobra.ExactArgs(2)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		wf, name := args[0], args[1]
		if err := a.confirm(yes, fmt.Sprintf(question, wf, name)); err != nil {
			return err
		}
		return a.perform(cmd.Context(), func(c *keepAPI) (string, string, error) { return do(cmd.Context(), c, wf, name) })
	}
	c.Flags().BoolVar(&yes, "yes", false, "do not ask for a confirmation")
	return c
}

// onTerminal says a person can answer on stdin (a pipe or /dev/null cannot).
func onTerminal() bool { return term.IsTerminal(int(os.Stdin.Fd())) }

// confirm asks a person on a terminal to type yes; elsewhere --yes says it.
func (a *app) confirm(yes bool, question string) error {
	if yes {
		return nil
	}
	if !onTerminal() {
		return &exitError{code: exitUsageCode, err: fmt.Errorf("%s Not on a terminal: pass --yes to confirm", question)}
	}
	fmt.Fprintf(a.out, "%s Type yes: ", question)
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return errors.New("not confirmed; nothing was changed")
	}
	return nil
}

// grantCmd lets a person allow what a workflow reaches, or take it back.
func (a *app) grantCmd() *cobra.Command {
	var yes bool
	var revoke []string
	c := &cobra.Command{
		Use:   "grant WORKFLOW ['GRANT'...]",
		Short: "allow a workflow what its active version uses and its blocked run was refused, or exactly the grants named ('http.request POST api.example.com', 'sql.exec reports'); --revoke takes grants back",
		Long: "A grant names what a call reaches: 'http.request METHOD HOST[:PORT]', 'sql.query DB', 'sql.exec DB', 'TOOL.METHOD' for other connectors, 'source:NAME', 'secret:NAME' (a {secret:NAME} the script sends, to the hosts keep secret scope gives it), or '*'. " +
			"Without grants named, keep grant allows what the active version's script names and what its blocked run was refused; a run blocked for want of it tries again. " +
			"A method's name alone ('http.request', the form of grants made before keep named targets) allows every target of it.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			wf, items := args[0], args[1:]
			for _, it := range append(append([]string(nil), items...), revoke...) {
				if err := kt.CheckGrantItem(it); err != nil {
					return &exitError{code: exitUsageCode, err: err}
				}
			}
			if len(revoke) > 0 {
				if len(items) > 0 {
					return &exitError{code: exitUsageCode, err: errors.New("grant or revoke, not both in one command")}
				}
				return a.perform(cmd.Context(), func(c *keepAPI) (string, string, error) {
					r, err := c.Revoke(cmd.Context(), wf, revoke)
					return r.Message, "", err
				})
			}
			// One API for the preview and the grant: its store is opened
			// once (issue 41).
			c, err := a.actionAPI(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			pending := items
			if len(items) == 0 {
				g, err := c.Grants(cmd.Context(), wf)
				if err != nil {
					return err
				}
				if pending = g.ToGrant; len(pending) == 0 {
					fmt.Fprintf(a.out, "%s was granted everything its active version uses already\n", wf)
					return nil
				}
			}
			cfg, err := config.Load(a.config())
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s would be allowed:\n", wf)
			for _, u := range pending {
				line := "  " + u
				if scope := inproc.GoogleScope(cfg, u); scope != "" {
					line += "  (Google scope " + scope + ")"
				}
				fmt.Fprintln(a.out, line)
			}
			// Grants named on the command line are the confirmation: the
			// card and a webhook's answer print that very command (issue
			// 42). Without names, keep asks, as what it allows is its own
			// reading of the version.
			if err := a.confirm(yes || len(items) > 0, "Allow "+wf+" these?"); err != nil {
				return err
			}
			return a.performOn(cmd.Context(), c, func(c *keepAPI) (string, string, error) {
				r, err := c.Grant(cmd.Context(), wf, items)
				return r.Message, wf, err
			})
		},
	}
	c.Flags().BoolVar(&yes, "yes", false, "do not ask for a confirmation (grants named on the command line are one)")
	c.Flags().StringArrayVar(&revoke, "revoke", nil, "take a grant back, written as it was granted (repeat for several); calls that need it are refused from then on")
	return c
}
