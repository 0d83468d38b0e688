package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apitype"
)

// publishCmd posts one event to a topic the workflow opens to the event API
// (topics: { NAME: { from: "api" } }), as POST …/topics/{topic}/events does.
func (a *app) publishCmd() *cobra.Command {
	var id, title, payload string
	c := &cobra.Command{
		Use:   "publish WORKFLOW TOPIC --id ID --title TITLE --json 'JSON'",
		Short: "post one event to a topic the workflow declares { from: \"api\" }: its input and event in one step; the same --id again changes nothing",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			wf, topic := args[0], args[1]
			var raw json.RawMessage
			if payload != "" {
				var v any
				if err := json.Unmarshal([]byte(payload), &v); err != nil {
					return &exitError{code: exitUsageCode, err: fmt.Errorf("keep publish %s %s: --json is not JSON (%v); pass a JSON value, e.g. --json '{\"order\": 1042}'", wf, topic, err)}
				}
				raw = json.RawMessage(payload)
			}
			return a.perform(cmd.Context(), func(c *keepAPI) (string, string, error) {
				r, err := c.Publish(cmd.Context(), wf, topic, apitype.PublishRequest{ID: apitype.EventID(id), Title: title, Payload: raw})
				return r.Message, wf, err // its consumer runs now: carried out
			})
		},
	}
	c.Flags().StringVar(&id, "id", "", "the event's id in your system (an order number): posting the same id again changes nothing")
	c.Flags().StringVar(&title, "title", "", "what the input is, in a line (e.g. 'Order 1042 from alice@example.com')")
	c.Flags().StringVar(&payload, "json", "", "the event's payload, a JSON value (at most 1 MiB; none: null)")
	return c
}
