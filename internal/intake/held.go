package intake

import (
	"context"
	"fmt"
	"strings"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Held names held webhook deliveries a person takes or drops: those of
// IDs (their records; nil for all) of Workflow.
type Held struct {
	Workflow string
	IDs      []int64
	Take     bool // take them (else drop them)
}

// ActOnHeld carries out a person's take or drop of held deliveries (h),
// in one transaction with its line in the decision log. A take marks each to be taken at keep
// serve's next pass whatever it waited for (one still blocked is held
// again, saying why); a drop records each refused, saying who dropped it,
// and forgets its request.
func ActOnHeld(ctx context.Context, st store.Store, h Held, now time.Time) (string, error) {
	wf, ids, take := h.Workflow, h.IDs, h.Take
	n := 0
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := transition.Workflow(tx, wf); err != nil {
			return err
		}
		held, err := tx.DeliveryHeld(wf, "", 0)
		if err != nil {
			return err
		}
		pick := held
		if ids != nil {
			byID := map[int64]kt.Delivery{}
			for _, d := range held {
				byID[d.ID] = d
			}
			pick = pick[:0:0]
			for _, id := range ids {
				d, ok := byID[id]
				if !ok {
					return &kt.ActionError{Msg: fmt.Sprintf("%s holds no delivery %d (keep webhooks %s lists the held ones with their record); nothing was done", wf, id, wf)}
				}
				pick = append(pick, d)
			}
		}
		if len(pick) == 0 {
			return &kt.ActionError{Msg: fmt.Sprintf("%s holds no webhook delivery; nothing was done", wf)}
		}
		for _, d := range pick {
			if take {
				if !strings.HasPrefix(d.HeldFor, HeldForPerson+":") {
					d.Reason = fmt.Sprintf("%s asked to take it (it was held: %s)", transition.Actor(ctx), d.Reason)
				}
				d.HeldFor = HeldForPerson + ":" + transition.Actor(ctx)
			} else {
				d.Status, d.HeldFor = kt.DeliveryRefused, ""
				d.Reason = fmt.Sprintf("dropped by %s while held (%s)", transition.Actor(ctx), d.Reason)
			}
			if err := tx.DeliverySettle(&d); err != nil {
				return err
			}
			n++
		}
		verb := "drop"
		if take {
			verb = "take"
		}
		return transition.LogDecision(ctx, tx, kt.Decision{Workflow: wf, Action: verb + "-held", Detail: fmt.Sprintf("%s %s", verb, kt.Count(n, "held webhook delivery")), At: now.UnixMilli()})
	})
	if err != nil {
		return "", err
	}
	if take {
		return fmt.Sprintf("%s of %s to be taken: keep serve takes them within a second (one still blocked is held again, saying why: keep webhooks %s)", kt.Count(n, "held webhook delivery"), wf, wf), nil
	}
	return fmt.Sprintf("dropped %s of %s: each is recorded refused, its request forgotten", kt.Count(n, "held webhook delivery"), wf), nil
}
