package google

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	calendar "google.golang.org/api/calendar/v3"
	"google.golang.org/api/googleapi"

	"github.com/keep-run/keep/internal/connector"
)

// Calendar's scopes, as its discovery document lists them per method:
// keep asks for calendar.events (a calendar shared with the account is
// not its own, which calendar.events.owned would not reach); an account
// that granted the narrower calendar.events.owned(.readonly) works with
// its own calendars.
var (
	calendarRead = []string{Scope("calendar.events.readonly"), Scope("calendar.readonly"), Scope("calendar.events"), Scope("calendar"),
		Scope("calendar.events.owned.readonly"), Scope("calendar.events.owned")}
	calendarWrite = []string{Scope("calendar.events"), Scope("calendar"), Scope("calendar.events.owned")}
)

// sendUpdatesValues are Calendar's choices of whom it mails an invitation
// or an update: everyone, guests outside the account's domain, no one.
var sendUpdatesValues = []string{"all", "externalOnly", "none"}

// eventID is the id createEvent gives the event: made from the write's
// idempotency key (hex is within Calendar's base32hex alphabet), so a
// second attempt cannot create a second event and reconcile is one get.
func eventID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "keep" + hex.EncodeToString(sum[:16])
}

type calendarConn struct{ auth *Auth }

func (c *calendarConn) service(ctx context.Context, hc *http.Client) (*calendar.Service, error) {
	return calendar.NewService(ctx, c.auth.options(hc, "calendar/v3/")...)
}

func newCalendar(auth *Auth) *connector.Connector {
	c := &calendarConn{auth: auth}
	calParam := connector.Param{Name: "calendarId", Type: "string", Doc: "the calendar (default `primary`, the account's own)"}
	eventParams := []connector.Param{
		{Name: "summary", Type: "string", Doc: "the title"},
		{Name: "start", Type: "string", Doc: "RFC 3339 time (`2026-12-01T10:00:00+01:00`) or a date (`2026-12-01`, all day)"},
		{Name: "end", Type: "string", Doc: "as start; not before it"},
		{Name: "attendees", Type: "array of strings", Doc: "guests' email addresses"},
		{Name: "description", Type: "string", Doc: "the description"},
		{Name: "location", Type: "string", Doc: "the location"},
		{Name: "sendUpdates", Type: "string", Doc: "whom Google mails the invitation or the change: `all` guests, `externalOnly` (guests outside the account's domain) or `none` (the default: guests see it in their calendars, no mail)"},
	}
	create := append([]connector.Param{calParam}, eventParams...)
	create[1].Required, create[2].Required, create[3].Required = true, true, true
	create = append(create, connector.Param{Name: "subkey", Type: "string", Doc: "tells apart two events one run creates in the same calendar"})
	update := append([]connector.Param{calParam, {Name: "eventId", Type: "string", Required: true, Doc: "the event's id (identity)"}}, eventParams...)
	update = append(update, connector.Param{Name: "subkey", Type: "string", Doc: "tells apart two updates of one run to the same event"})
	return &connector.Connector{
		Name:    "calendar",
		Doc:     "Google Calendar, through the Calendar API with the account of `keep connect google`.",
		Sources: map[string][]string{"calendar": {"event"}},
		Methods: map[string]*connector.Method{
			"listEvents": {Name: "listEvents", Kind: connector.KindRead, Scopes: calendarRead, Validate: validateList, Do: c.list, Doc: connector.MethodDoc{
				Summary: "Lists events, by start time (recurring events as their single occurrences).",
				Params: []connector.Param{calParam, {Name: "from", Type: "string", Doc: "RFC 3339: events ending after it"},
					{Name: "to", Type: "string", Doc: "RFC 3339: events starting before it"}, {Name: "max", Type: "number", Doc: "at most this many, 1 to 2500 (default 250)"}},
				ResultTS: "Array<{ id: string; summary: string; description: string; location: string; start: string; end: string; attendees: string[]; status: string; htmlLink: string }>",
				Result:   "an array of `{ id, summary, description, location, start, end, attendees, status, htmlLink }` (`start`/`end` a time, in the calendar's time zone as Google answers it, or a date)",
				Errors:   "a calendar that does not exist: logic; 401/403: permission (403 `accessNotConfigured`: enable the Google Calendar API in the OAuth client's Cloud project); 429 and 403 usage limits (`rateLimitExceeded`, `quotaExceeded`, …): transient; 5xx: transient.",
				Limits:   "Google answers in pages (250 events at most, and a page may be short or even empty while more follow); keep reads every page up to `max`. Calendar allows about 600 requests a minute per user; a 403 usage limit or 429 is retried.",
			}},
			"createEvent": {Name: "createEvent", Kind: connector.KindMutate, Scopes: calendarWrite, Identity: []string{"calendarId"},
				Validate: validateEvent(true), Do: c.create, Reconcile: c.reconcileCreate, ComparePayload: connector.ComparePayloadOf("summary", "start", "end", "attendees", "description", "location"),
				Target: func(a map[string]any) string { return "calendar.createEvent in " + strOr(a["calendarId"], "primary") }, Doc: connector.MethodDoc{
					Summary:  "Creates an event whose id is made from the write's idempotency key: a second attempt of the same write cannot create a second event.",
					Params:   create,
					ResultTS: "{ id: string; summary: string; description: string; location: string; start: string; end: string; attendees: string[]; status: string; htmlLink: string; reconciled?: boolean }",
					Result:   "`{ id, summary, start, end, attendees, status, htmlLink }`; a reconciled create adds `reconciled: true`",
					Reconcile: "gets the event by its id: there means created, 404 means not (believed after the settle time, twice). " +
						"A second attempt that finds the id taken (409) reads the event and returns it.",
					Errors: "a bad time range: logic; 401 after a refresh or a revoked grant: permission (Reconnect Google); a missing scope names it; 403 `accessNotConfigured`: permission, enable the Google Calendar API in the OAuth client's Cloud project; 429 and 403 usage limits (`rateLimitExceeded`, `quotaExceeded`): transient, nothing written; 5xx or no answer after the request went out: unknown, settled by reconcile.",
					Limits: "Calendar allows about 600 requests a minute per user and limits how many events and invitations an account may create in a short time (403 `quotaExceeded`, lifted after a few hours); keep retries these as transient, after Google's Retry-After when it gives one.",
				}},
			"updateEvent": {Name: "updateEvent", Kind: connector.KindMutate, Scopes: calendarWrite, Identity: []string{"calendarId", "eventId"},
				Validate: validateEvent(false), Do: c.update, Reconcile: c.reconcileUpdate, ComparePayload: connector.ComparePayloadOf("summary", "start", "end", "attendees", "description", "location"),
				Target: func(a map[string]any) string { return "calendar.updateEvent " + str(a["eventId"]) }, Doc: connector.MethodDoc{
					Summary:   "Changes the given fields of an event (the others stay).",
					Params:    update,
					Result:    "the event, as createEvent returns it",
					ResultTS:  "{ id: string; summary: string; description: string; location: string; start: string; end: string; attendees: string[]; status: string; htmlLink: string; reconciled?: boolean }",
					Reconcile: "gets the event: every given field as asked (`summary`, `description`, `location`, `attendees` as a set of addresses, `start` and `end` as instants — Google answers them in the calendar's time zone) means applied, else not.",
					Errors:    "an event that does not exist: precondition; otherwise as createEvent.",
					Limits:    "as createEvent.",
				}},
		},
	}
}

func validateList(a map[string]any) error {
	for _, k := range []string{"from", "to"} {
		if v, ok := a[k]; ok && v != nil {
			s, isStr := v.(string)
			if _, err := time.Parse(time.RFC3339, s); !isStr || err != nil {
				return fmt.Errorf("calendar.listEvents: %s must be an RFC 3339 time like \"2026-12-01T00:00:00Z\"", k)
			}
		}
	}
	if m, ok := a["max"]; ok && m != nil {
		if f, isNum := m.(float64); !isNum || f < 1 || f > 2500 {
			return fmt.Errorf("calendar.listEvents: max must be a number from 1 to 2500")
		}
	}
	return nil
}

func when(v any) (*calendar.EventDateTime, time.Time, error) {
	s, _ := v.(string)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return &calendar.EventDateTime{DateTime: s}, t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return &calendar.EventDateTime{Date: s}, t, nil
	}
	return nil, time.Time{}, fmt.Errorf("%v is neither an RFC 3339 time (2026-12-01T10:00:00Z) nor a date (2026-12-01)", v)
}

func validateEvent(create bool) func(map[string]any) error {
	method := "calendar.updateEvent"
	if create {
		method = "calendar.createEvent"
	}
	return func(a map[string]any) error {
		if create {
			if err := need(method, a, "summary", "start", "end"); err != nil {
				return err
			}
		} else if err := need(method, a, "eventId"); err != nil {
			return err
		}
		var times []time.Time
		for _, k := range []string{"start", "end"} {
			if v, ok := a[k]; ok && v != nil {
				_, t, err := when(v)
				if err != nil {
					return fmt.Errorf("%s: %s %v", method, k, err)
				}
				times = append(times, t)
			}
		}
		if len(times) == 2 && times[1].Before(times[0]) {
			return fmt.Errorf("%s: end is before start", method)
		}
		if _, ok := strList(a["attendees"]); !ok {
			return fmt.Errorf("%s: attendees must be an array of email addresses", method)
		}
		if v, ok := a["sendUpdates"]; ok && v != nil && !slices.Contains(sendUpdatesValues, str(v)) {
			return fmt.Errorf("%s: sendUpdates must be \"all\", \"externalOnly\" or \"none\" (got %v)", method, v)
		}
		for _, k := range []string{"calendarId", "summary", "description", "location"} {
			if v, ok := a[k]; ok && v != nil {
				if _, isStr := v.(string); !isStr {
					return fmt.Errorf("%s: %s must be a string", method, k)
				}
			}
		}
		return nil
	}
}

// eventOf builds the fields a call sets.
func eventOf(a map[string]any) *calendar.Event {
	e := &calendar.Event{}
	if v, ok := a["summary"].(string); ok {
		e.Summary = v
	}
	if v, ok := a["description"].(string); ok {
		e.Description = v
	}
	if v, ok := a["location"].(string); ok {
		e.Location = v
	}
	if v, ok := a["start"]; ok && v != nil {
		e.Start, _, _ = when(v)
	}
	if v, ok := a["end"]; ok && v != nil {
		e.End, _, _ = when(v)
	}
	if l, _ := strList(a["attendees"]); l != nil {
		for _, addr := range l {
			e.Attendees = append(e.Attendees, &calendar.EventAttendee{Email: addr})
		}
	}
	return e
}

func eventValue(e *calendar.Event) map[string]any {
	at := func(d *calendar.EventDateTime) string {
		if d == nil {
			return ""
		}
		if d.DateTime != "" {
			return d.DateTime
		}
		return d.Date
	}
	attendees := []any{}
	for _, a := range e.Attendees {
		attendees = append(attendees, a.Email)
	}
	return map[string]any{"id": e.Id, "summary": e.Summary, "description": e.Description, "location": e.Location, "start": at(e.Start), "end": at(e.End),
		"attendees": attendees, "status": e.Status, "htmlLink": e.HtmlLink}
}

func (c *calendarConn) list(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	cal := strOr(a["calendarId"], "primary")
	max := int64(250)
	if f, ok := a["max"].(float64); ok {
		max = int64(f)
	}
	var out []any
	err := c.auth.read(ctx, "calendar.listEvents of "+cal, calendarRead, func(ctx context.Context, hc *http.Client) error {
		out = []any{}
		svc, err := c.service(ctx, hc)
		if err != nil {
			return err
		}
		q := svc.Events.List(cal).SingleEvents(true).OrderBy("startTime").MaxResults(max).Context(ctx)
		if s := str(a["from"]); s != "" {
			q = q.TimeMin(s)
		}
		if s := str(a["to"]); s != "" {
			q = q.TimeMax(s)
		}
		// Every page, up to max: a page may be short, or empty, while
		// nextPageToken says more follow.
		err = q.Pages(ctx, func(evs *calendar.Events) error {
			for _, e := range evs.Items {
				if int64(len(out)) < max {
					out = append(out, eventValue(e))
				}
			}
			if int64(len(out)) >= max {
				return errEnough
			}
			return nil
		})
		if errors.Is(err, errEnough) {
			return nil
		}
		return err
	})
	if err != nil {
		return connector.Result{Err: err}
	}
	return connector.Result{Value: out}
}

func (c *calendarConn) create(ctx context.Context, call connector.Call) connector.Result {
	cal := strOr(call.Args["calendarId"], "primary")
	return c.auth.write(ctx, "calendar.createEvent in "+cal, calendarWrite, func(ctx context.Context, hc *http.Client) (any, error) {
		svc, err := c.service(ctx, hc)
		if err != nil {
			return nil, err
		}
		e := eventOf(call.Args)
		e.Id = eventID(call.IdempotencyKey)
		made, err := svc.Events.Insert(cal, e).SendUpdates(strOr(call.Args["sendUpdates"], "none")).Context(ctx).Do()
		var ge *googleapi.Error
		if errors.As(err, &ge) && ge.Code == http.StatusConflict {
			// The id is taken: only this write makes it, so an earlier
			// attempt created the event. Return that one.
			got, gerr := svc.Events.Get(cal, e.Id).Context(ctx).Do()
			if gerr != nil {
				return nil, appliedUnread{fmt.Sprintf("the event %s exists, but reading it failed (%v)", e.Id, gerr)}
			}
			v := eventValue(got)
			v["reconciled"] = true
			return v, nil
		}
		if err != nil {
			return nil, err
		}
		return eventValue(made), nil
	})
}

func (c *calendarConn) reconcileCreate(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
	cal := strOr(call.Args["calendarId"], "primary")
	var got *calendar.Event
	gone := false
	err := c.auth.read(ctx, "calendar.createEvent's reconcile", calendarRead, func(ctx context.Context, hc *http.Client) error {
		svc, err := c.service(ctx, hc)
		if err != nil {
			return err
		}
		got, err = svc.Events.Get(cal, eventID(call.IdempotencyKey)).Context(ctx).Do()
		var ge *googleapi.Error
		if errors.As(err, &ge) && (ge.Code == http.StatusNotFound || ge.Code == http.StatusGone) {
			gone = true
			return nil
		}
		return err
	})
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	if gone || got == nil {
		return connector.ReconcileFailed, nil, nil
	}
	v := eventValue(got)
	v["reconciled"] = true
	return connector.ReconcileApplied, v, nil
}

func (c *calendarConn) update(ctx context.Context, call connector.Call) connector.Result {
	cal, id := strOr(call.Args["calendarId"], "primary"), str(call.Args["eventId"])
	return c.auth.write(ctx, "calendar.updateEvent "+id, calendarWrite, func(ctx context.Context, hc *http.Client) (any, error) {
		svc, err := c.service(ctx, hc)
		if err != nil {
			return nil, err
		}
		e, err := svc.Events.Patch(cal, id, eventOf(call.Args)).SendUpdates(strOr(call.Args["sendUpdates"], "none")).Context(ctx).Do()
		if err != nil {
			return nil, err
		}
		return eventValue(e), nil
	})
}

func (c *calendarConn) reconcileUpdate(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
	cal, id := strOr(call.Args["calendarId"], "primary"), str(call.Args["eventId"])
	var got *calendar.Event
	err := c.auth.read(ctx, "calendar.updateEvent's reconcile", calendarRead, func(ctx context.Context, hc *http.Client) error {
		svc, err := c.service(ctx, hc)
		if err != nil {
			return err
		}
		got, err = svc.Events.Get(cal, id).Context(ctx).Do()
		return err
	})
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	if !sameEvent(got, call.Args) {
		return connector.ReconcileFailed, nil, nil
	}
	have := eventValue(got)
	have["reconciled"] = true
	return connector.ReconcileApplied, have, nil
}

// sameEvent says the event has every field args give as they give it:
// texts equal, attendees the same set of addresses, times the same
// instants (Calendar answers them in the calendar's time zone, whatever
// offset they were sent with), dates the same dates.
func sameEvent(got *calendar.Event, args map[string]any) bool {
	want := eventOf(args)
	for k, pair := range map[string][2]string{"summary": {got.Summary, want.Summary}, "description": {got.Description, want.Description}, "location": {got.Location, want.Location}} {
		if _, asked := args[k]; asked && pair[0] != pair[1] {
			return false
		}
	}
	if _, asked := args["attendees"]; asked {
		set := func(as []*calendar.EventAttendee) string {
			var l []string
			for _, a := range as {
				l = append(l, strings.ToLower(a.Email))
			}
			sort.Strings(l)
			return strings.Join(l, ",")
		}
		if set(got.Attendees) != set(want.Attendees) {
			return false
		}
	}
	for k, pair := range map[string][2]*calendar.EventDateTime{"start": {got.Start, want.Start}, "end": {got.End, want.End}} {
		if _, asked := args[k]; asked && !sameWhen(pair[0], pair[1]) {
			return false
		}
	}
	return true
}

func sameWhen(got, want *calendar.EventDateTime) bool {
	if got == nil || want == nil {
		return got == want
	}
	if want.Date != "" {
		return got.Date == want.Date
	}
	g, err1 := time.Parse(time.RFC3339, got.DateTime)
	w, err2 := time.Parse(time.RFC3339, want.DateTime)
	return err1 == nil && err2 == nil && g.Equal(w)
}
