package engine

import (
	"encoding/json"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Posting is one input posted from outside the workflow's handlers (the
// event API: package intake) with its one event, on the version whose
// declaration is Decl.
type Posting struct {
	Version int64
	Decl    script.Declaration // whose consumers of Topic are woken
	Input   kt.Input           // its ID is given here
	Topic   string
	Payload json.RawMessage
}

// WritePosting writes a posted input and its event inside tx through
// writeProduced, the engine's one producer writer, so an input posted
// through the event API cannot differ from one a producer registers. It
// returns the input (with its new id) and the event as written.
func WritePosting(tx store.Tx, p Posting, ms int64) (kt.Input, kt.Event, error) {
	in := p.Input
	in.ID = newID()
	evs, err := writeProduced(tx, produced{workflow: in.Workflow, version: p.Version, decl: p.Decl, createdBy: transition.CreatedByAPI, inputs: []kt.Input{in},
		publishes: []publishReq{{Topic: p.Topic, MessageID: in.ID, InputID: in.ID, Payload: p.Payload}}, now: ms})
	if err != nil {
		return kt.Input{}, kt.Event{}, err
	}
	return in, evs[0], nil
}
