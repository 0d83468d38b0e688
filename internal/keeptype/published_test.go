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

func TestGrantLease(t *testing.T) {
	held := &Lease{Workflow: "w", Node: "a", Token: 4, ExpiresAt: 100}
	for _, c := range []struct {
		name string
		cur  *Lease
		node string
		now  int64
		want Lease
		ok   bool
	}{
		{"a first lease", nil, "a", 10, Lease{Workflow: "w", Node: "a", Token: 1, ExpiresAt: 60}, true},
		{"the holder renews, same token", held, "a", 90, Lease{Workflow: "w", Node: "a", Token: 4, ExpiresAt: 140}, true},
		{"another node waits while it holds", held, "b", 90, *held, false},
		{"another node takes it over once expired, next token", held, "b", 100, Lease{Workflow: "w", Node: "b", Token: 5, ExpiresAt: 150}, true},
		{"the old holder after expiry: a new token too", held, "a", 120, Lease{Workflow: "w", Node: "a", Token: 5, ExpiresAt: 170}, true},
	} {
		got, ok := GrantLease(c.cur, "w", c.node, c.now, c.now+50)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
