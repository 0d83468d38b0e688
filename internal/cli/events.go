package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// eventsView is what `keep events --json` prints.
type eventsView struct {
	Topics    []report.Topic    `json:"topics"`
	Producers []report.Producer `json:"producers"`
	report.EventPage
}

// eventsCmd shows a workflow's topics (counts by state) and its events,
// each with its payload and the inputs that caused it (issue 12 #8).
func (a *app) eventsCmd() *cobra.Command {
	var topic, state string
	var after int64
	var limit int
	c := reader(a, &cobra.Command{Use: "events WORKFLOW", Short: "show a workflow's topics and events: pending, reserved, consumed, skipped, with payloads and causes", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, st store.Store, args []string) (eventsView, error) {
			topics, producers, err := report.Topics(ctx, st, args[0])
			if err != nil {
				return eventsView{}, err
			}
			page, err := report.Events(ctx, st, args[0], topic, state, after, limit)
			return eventsView{Topics: topics, Producers: producers, EventPage: page}, err
		},
		func(_ context.Context, _ store.Store, v eventsView) error { a.printEvents(v); return nil })
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
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Topic, crop(e.MessageID, 30), e.Status, strings.Join(causes, "; "), crop(string(e.Payload), 60))
	}
	w.Flush()
	if v.Next != 0 {
		fmt.Fprintf(a.out, "  … more: --after %d\n", v.Next)
	}
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
	var yes bool
	c := &cobra.Command{
		Use:   "reset-state WORKFLOW HANDLER",
		Short: "forget a producer's (or task's) state: its next run, at once, starts from scratch",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.confirm(yes, fmt.Sprintf("Reset the state of %s in %s? Its next run starts from scratch (inputs and events it finds again are not duplicated).", args[1], args[0])); err != nil {
				return err
			}
			return a.perform(cmd.Context(), "/api/v1/workflows/"+url.PathEscape(args[0])+"/handlers/"+url.PathEscape(args[1])+"/reset-state", nil,
				func(st store.Store) (string, string, error) {
					msg, err := engine.ResetState(cmd.Context(), st, args[0], args[1], time.Now())
					return msg, args[0], err
				})
		},
	}
	c.Flags().BoolVar(&yes, "yes", false, "do not ask for a confirmation")
	return c
}

func (a *app) skipPendingCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "skip-pending WORKFLOW TOPIC",
		Short: "skip every pending event of a topic that no run holds (their inputs show skipped)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.confirm(yes, fmt.Sprintf("Skip every pending event of topic %s in %s? Its consumer will not see them.", args[1], args[0])); err != nil {
				return err
			}
			return a.perform(cmd.Context(), "/api/v1/workflows/"+url.PathEscape(args[0])+"/topics/"+url.PathEscape(args[1])+"/skip-pending", nil,
				func(st store.Store) (string, string, error) {
					msg, err := engine.SkipPending(cmd.Context(), st, args[0], args[1], time.Now())
					return msg, "", err
				})
		},
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
