package keeptype

import (
	"reflect"
	"testing"
)

func TestPublished(t *testing.T) {
	had := Event{ID: 7, Workflow: "w", Topic: "t", MessageID: "m", Payload: []byte(`1`), Status: EventConsumed, ReservedBy: "r1",
		CreatedBy: "p1", CausedBy: []string{"b"}, Attempt: 2, CreatedAt: 10, UpdatedAt: 10}
	for _, c := range []struct {
		name string
		had  *Event
		in   Event
		want Event
	}{
		{"new: pending in attempt 1", nil, Event{MessageID: "m", Payload: []byte(`2`)},
			Event{MessageID: "m", Payload: []byte(`2`), Status: EventPending, Attempt: 1}},
		{"new keeps a given attempt", nil, Event{MessageID: "m", Attempt: 3},
			Event{MessageID: "m", Status: EventPending, Attempt: 3}},
		{"again, same attempt: last write wins on the payload, the status stays", &had,
			Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: []byte(`2`), CreatedBy: "p2", CausedBy: []string{"a"}, Attempt: 2, UpdatedAt: 20},
			Event{ID: 7, Workflow: "w", Topic: "t", MessageID: "m", Payload: []byte(`2`), Status: EventConsumed, ReservedBy: "r1", CreatedBy: "p1",
				CausedBy: []string{"a", "b"}, Attempt: 2, CreatedAt: 10, UpdatedAt: 20}},
		{"again from an older attempt: nothing re-opens", &had,
			Event{MessageID: "m", Attempt: 1, UpdatedAt: 20},
			Event{ID: 7, MessageID: "m", Status: EventConsumed, ReservedBy: "r1", CreatedBy: "p1", CausedBy: []string{"b"}, Attempt: 2, CreatedAt: 10, UpdatedAt: 20}},
		{"again from a newer attempt: re-opened, unreserved", &had,
			Event{MessageID: "m", Attempt: 3, UpdatedAt: 20},
			Event{ID: 7, MessageID: "m", Status: EventPending, CreatedBy: "p1", CausedBy: []string{"b"}, Attempt: 3, CreatedAt: 10, UpdatedAt: 20}},
	} {
		if got := Published(c.had, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}
