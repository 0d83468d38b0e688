package google_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/google"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// clock is a virtual clock the fake and keep's pacer share: waiting moves
// it, so a minute of calls takes no minute.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// A burst of mail larger than max between two polls (or a first poll) is
// read completely, once, oldest first: the cursor never moves past mail
// it did not return. The fake answers pages of 7.
func TestGmailSearchReadsABurstLargerThanMaxCompletely(t *testing.T) {
	e := setup(t)
	c := &clock{now: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
	e.fake.SetClock(c.Now)
	e.admin("POST", "/_admin/page_max", map[string]any{"max": 7}, nil)
	var want []string
	send := func(n int) {
		for i := 0; i < n; i++ {
			c.Add(300 * time.Millisecond) // some in the same second
			subject := fmt.Sprintf("order %d", len(want))
			e.admin("POST", "/_admin/gmail/messages", map[string]any{"from": "shop@example.com", "subject": subject, "text": "x"}, nil)
			want = append(want, subject)
		}
	}
	var got []string
	seen := map[string]bool{}
	var cursor any
	poll := func() int {
		r := e.do("gmail", "search", map[string]any{"query": "in:inbox", "after": cursor, "max": 10}, "")
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		v := r.Value.(map[string]any)
		n := 0
		for _, it := range v["$array"].([]any) {
			m := it.(map[string]any)
			if !seen[m["id"].(string)] { // the input ledger keeps one per id
				seen[m["id"].(string)] = true
				got = append(got, m["subject"].(string))
				n++
			}
		}
		cursor = v["lastCursor"]
		return n
	}
	send(25) // before the first poll
	for poll() > 0 {
	}
	send(23) // a burst between two polls
	for poll() > 0 {
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read %d of %d, in this order:\n%v\nwant\n%v", len(got), len(want), got, want)
	}
}

// A reply in a thread carries In-Reply-To and References naming the
// thread's last message: Gmail threads a sent message only so.
func TestGmailReplyThreads(t *testing.T) {
	e := setup(t)
	var in struct{ ID, ThreadID string }
	e.admin("POST", "/_admin/gmail/messages", map[string]any{"from": "ann@example.com", "subject": "Invoice 7", "text": "is it paid?"}, &in)
	r := e.do("gmail", "send", map[string]any{"to": "ann@example.com", "subject": "Re: Invoice 7", "text": "yes", "threadId": in.ThreadID}, "keep-reply")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Value.(map[string]any)["threadId"]; got != in.ThreadID {
		t.Fatalf("the reply went to thread %v, not %s: Gmail did not thread it", got, in.ThreadID)
	}
	var msgs struct {
		Messages []struct {
			MessageID string
			Headers   map[string]string
		}
	}
	e.admin("GET", "/_admin/gmail/messages", nil, &msgs)
	h := msgs.Messages[1].Headers
	if h["In-Reply-To"] != msgs.Messages[0].MessageID || !strings.Contains(h["References"], msgs.Messages[0].MessageID) {
		t.Fatalf("the reply's headers %v do not name %s", h, msgs.Messages[0].MessageID)
	}
}

// A send-only workflow is granted gmail.send and gmail.metadata, never a
// scope that reads bodies; with metadata, Gmail refuses searches (q), and
// it replaced keep's Message-ID: reconcile finds the message by its
// X-Keep-Idempotency-Key in Sent, and never takes another send's.
func TestGmailSendReconcilesWithMetadataWhenGmailReplacedTheMessageID(t *testing.T) {
	scopes := google.ScopesFor(connector.NewRegistry(google.New(nil)...), []string{"gmail.send"})
	if strings.Join(scopes, " ") != "openid email "+google.Scope("gmail.metadata")+" "+google.Scope("gmail.send") {
		t.Fatalf("a send-only workflow asks for %v", scopes)
	}
	both := google.ScopesFor(connector.NewRegistry(google.New(nil)...), []string{"gmail.send", "gmail.search"})
	for _, s := range both {
		if s == google.Scope("gmail.metadata") {
			t.Fatalf("gmail.metadata asked beside a reading scope (Gmail then refuses every search): %v", both)
		}
	}
	e := setup(t, scopes[2:]...)
	send := map[string]any{"to": "bob@example.com", "subject": "Report", "text": "attached"}
	e.do("gmail", "send", map[string]any{"to": "bob@example.com", "subject": "Report", "text": "other"}, "keep-other")
	if st, _ := e.reconcile("gmail", "send", send, "keep-s1"); st != connector.ReconcileFailed {
		t.Fatalf("reconciled as %s before the send", st)
	}
	e.fault("gmail.send", "drop_after_apply", 1)
	if r := e.do("gmail", "send", send, "keep-s1"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
	st, v := e.reconcile("gmail", "send", send, "keep-s1")
	if st != connector.ReconcileApplied {
		t.Fatalf("the sent message reconciled as %s: keep would send it twice", st)
	}
	var msgs struct {
		Messages []struct{ ID, MessageID string }
	}
	e.admin("GET", "/_admin/gmail/messages", nil, &msgs)
	if len(msgs.Messages) != 2 || v.(map[string]any)["id"] != msgs.Messages[1].ID || !strings.HasPrefix(msgs.Messages[1].MessageID, "<CA") {
		t.Fatalf("reconcile found %v among %+v", v, msgs.Messages)
	}
}

// Google's usage-limit 403s are rate limits: transient, retried, nothing
// written; an API not enabled in the Cloud project says which to enable.
func TestUsageLimit403sAreRetriedAndAnAPINotEnabledIsNamed(t *testing.T) {
	e := setup(t)
	args := map[string]any{"spreadsheetId": "s", "values": []any{"a"}}
	for _, reason := range []string{"rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded", "dailyLimitExceeded"} {
		e.fault("sheets.appendRow", "403_"+reason, 1)
		asked := time.Now()
		r := e.do("sheets", "appendRow", args, "k-"+reason)
		answered := time.Now()
		if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassTransient || strings.Contains(r.Err.Message, "share") {
			t.Fatalf("403 %s: %v %+v", reason, r.Outcome, r.Err)
		}
		if reason != "dailyLimitExceeded" {
			continue
		}
		// The retry falls on the next midnight Pacific time, whatever the
		// time of day the test runs at (CI once ran it at 23:59:34 PST).
		// The answer was made between asked and answered, so the retry's
		// instant lies within that span of a midnight.
		if r.Err.RetryAfter <= 0 || r.Err.RetryAfter > 24*time.Hour {
			t.Fatalf("a daily quota is retried after %v", r.Err.RetryAfter)
		}
		pst := time.FixedZone("PST", -8*3600)
		earliest, latest := asked.Add(r.Err.RetryAfter).In(pst), answered.Add(r.Err.RetryAfter).In(pst)
		midnight := time.Date(latest.Year(), latest.Month(), latest.Day(), 0, 0, 0, 0, pst)
		if midnight.Before(earliest.Add(-time.Second)) || midnight.After(latest.Add(time.Second)) {
			t.Fatalf("a daily quota is retried after %v, at %v Pacific time, not at midnight", r.Err.RetryAfter, latest)
		}
	}
	if rows, _ := e.sheet("s"); len(rows) != 0 {
		t.Fatalf("%d rows written under a usage limit", len(rows))
	}
	e.fault("calendar.listEvents", "403_accessNotConfigured", 1)
	r := e.do("calendar", "listEvents", map[string]any{}, "")
	if r.Err == nil || r.Err.Class != kt.ClassPermission || !strings.Contains(r.Err.Message, "enable the Google Calendar API") || strings.Contains(r.Err.Message, "share") {
		t.Fatalf("an API not enabled: %+v", r.Err)
	}
}

// updateEvent's reconcile compares every field it was given, and times as
// instants: Calendar answers them in the calendar's time zone.
func TestUpdateEventReconcileComparesEveryFieldAsInstants(t *testing.T) {
	e := setup(t)
	made := e.do("calendar", "createEvent", map[string]any{"summary": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T11:00:00Z"}, "keep-c")
	if made.Err != nil {
		t.Fatal(made.Err)
	}
	id := made.Value.(map[string]any)["id"]
	// A change of the description that never arrived is not applied, though the summary is as asked.
	lost := map[string]any{"eventId": id, "summary": "Review", "description": "Room 4", "location": "Berlin", "attendees": []any{"bob@example.com"}}
	e.fault("calendar.updateEvent", "500", 1)
	if r := e.do("calendar", "updateEvent", lost, "keep-u1"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
	if st, _ := e.reconcile("calendar", "updateEvent", lost, "keep-u1"); st != connector.ReconcileFailed {
		t.Fatalf("a lost description change reconciled as %s: it would never be sent", st)
	}
	if r := e.do("calendar", "updateEvent", lost, "keep-u1"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if st, _ := e.reconcile("calendar", "updateEvent", lost, "keep-u1"); st != connector.ReconcileApplied {
		t.Fatalf("the applied change reconciled as %s", st)
	}
	// A move that arrived reads back in the calendar's zone (-08:00): applied.
	moved := map[string]any{"eventId": id, "start": "2026-12-01T12:00:00+01:00", "end": "2026-12-01T13:00:00+01:00"}
	e.fault("calendar.updateEvent", "drop_after_apply", 1)
	if r := e.do("calendar", "updateEvent", moved, "keep-u2"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
	st, v := e.reconcile("calendar", "updateEvent", moved, "keep-u2")
	if st != connector.ReconcileApplied {
		t.Fatalf("an applied move reconciled as %s: keep would send it again", st)
	}
	if got := v.(map[string]any)["start"]; got != "2026-12-01T03:00:00-08:00" {
		t.Fatalf("Calendar answered start %v, not in the calendar's zone", got)
	}
}

// listEvents reads every page, an empty one with a nextPageToken too, up to max.
func TestListEventsReadsEveryPage(t *testing.T) {
	e := setup(t)
	e.admin("POST", "/_admin/page_max", map[string]any{"max": 4}, nil)
	for i := 0; i < 11; i++ {
		start := time.Date(2026, 12, 1, 8+i, 0, 0, 0, time.UTC)
		args := map[string]any{"summary": fmt.Sprintf("slot %d", i), "start": start.Format(time.RFC3339), "end": start.Add(30 * time.Minute).Format(time.RFC3339)}
		if r := e.do("calendar", "createEvent", args, fmt.Sprintf("keep-e%d", i)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	r := e.do("calendar", "listEvents", map[string]any{"from": "2026-12-01T00:00:00Z"}, "")
	if items, _ := r.Value.([]any); r.Err != nil || len(items) != 11 || items[10].(map[string]any)["summary"] != "slot 10" {
		t.Fatalf("listed %d of 11: %+v %v", len(items), r.Err, r.Value)
	}
	r = e.do("calendar", "listEvents", map[string]any{"from": "2026-12-01T00:00:00Z", "max": 6}, "")
	if items, _ := r.Value.([]any); len(items) != 6 {
		t.Fatalf("max 6 listed %d", len(items))
	}
}

// Guests are invited when the script says so (sendUpdates), never by default.
func TestGuestsAreInvitedWhenTheScriptAsks(t *testing.T) {
	e := setup(t)
	base := map[string]any{"summary": "Kickoff", "start": "2026-12-02T10:00:00Z", "end": "2026-12-02T11:00:00Z", "attendees": []any{"bob@other.example", "me2@example.com"}}
	if r := e.do("calendar", "createEvent", base, "keep-quiet"); r.Err != nil {
		t.Fatal(r.Err)
	}
	loud := map[string]any{"sendUpdates": "all"}
	for k, v := range base {
		loud[k] = v
	}
	if r := e.do("calendar", "createEvent", loud, "keep-loud"); r.Err != nil {
		t.Fatal(r.Err)
	}
	var cal struct{ Notified []string }
	e.admin("GET", "/_admin/calendar/primary", nil, &cal)
	if len(cal.Notified) != 2 || !strings.HasSuffix(cal.Notified[0], " bob@other.example") {
		t.Fatalf("invitations mailed: %v, want both guests of the second event only", cal.Notified)
	}
	m, _ := e.reg.Method("calendar", "createEvent")
	if err := m.Validate(map[string]any{"summary": "x", "start": "2026-12-02", "end": "2026-12-02", "sendUpdates": "everyone"}); err == nil || !strings.Contains(err.Error(), "sendUpdates") {
		t.Fatalf("a bad sendUpdates: %v", err)
	}
}

// Sheets allows 60 reads and 60 writes a minute per user, and an append
// costs three requests: keep paces itself, so 35 appends in a row (70
// reads) all arrive, where they met 429s. The clock is virtual.
func TestSheetsPacesItselfUnderGooglesQuota(t *testing.T) {
	e := setup(t)
	c := &clock{now: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
	e.fake.SetClock(c.Now)
	waited := time.Duration(0)
	google.SetPaceClock(e.auth, c.Now, func(ctx context.Context, d time.Duration) error { waited += d; c.Add(d); return nil })
	for i := 0; i < 35; i++ {
		if r := e.do("sheets", "appendRow", map[string]any{"spreadsheetId": "paced", "values": []any{i}}, fmt.Sprintf("k%d", i)); r.Err != nil {
			t.Fatalf("append %d: %+v", i, r.Err)
		}
	}
	if rows, _ := e.sheet("paced"); len(rows) != 35 {
		t.Fatalf("%d rows", len(rows))
	}
	if waited < 10*time.Second {
		t.Fatalf("keep waited %v of the virtual clock for 70 reads", waited)
	}
}

// A daily quota is tried again at the next midnight Pacific time, however
// close it is: a minute before it, a minute; just after it, a day.
func TestADailyQuotaIsTriedAgainAtTheNextPacificMidnight(t *testing.T) {
	for _, c := range []struct {
		now  string
		want time.Duration
	}{
		{"2026-11-28T07:59:34Z", 26 * time.Second},
		{"2026-11-28T08:00:00Z", 24 * time.Hour},
		{"2026-11-28T08:00:01Z", 24*time.Hour - time.Second},
		{"2026-11-28T20:00:00Z", 12 * time.Hour},
		{"2026-12-31T23:00:00+01:00", 10 * time.Hour},
	} {
		now, err := time.Parse(time.RFC3339, c.now)
		if err != nil {
			t.Fatal(err)
		}
		if got := google.UntilPacificMidnight(now); got != c.want {
			t.Errorf("at %s a daily quota is retried after %v, want %v", c.now, got, c.want)
		}
	}
}

// Mail that comes into the mailbox after the poll that passed its date
// (Gmail indexes or delivers it late: its internalDate is older than mail
// already read) is seen on the next poll, exactly once, with or without a
// query: keep follows Gmail's history (messages added since the last
// history id), not the date. A history id Gmail forgot (404) starts a full
// sync: every message comes again, once each, and the one added meanwhile
// with them; registering by id keeps one of each (TestMailIndexedLate…
// in test/google shows it through keep).
func TestGmailSearchSeesMailAddedLateAndResyncsAfterAnExpiredHistoryID(t *testing.T) {
	for _, query := range []string{"", "in:inbox"} {
		t.Run("query="+query, func(t *testing.T) {
			e := setup(t)
			c := &clock{now: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
			e.fake.SetClock(c.Now)
			var cursor any
			poll := func() []string {
				t.Helper()
				r := e.do("gmail", "search", map[string]any{"query": query, "after": cursor, "max": 10}, "")
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				v := r.Value.(map[string]any)
				var got []string
				for _, it := range v["$array"].([]any) {
					got = append(got, it.(map[string]any)["subject"].(string))
				}
				cursor = v["lastCursor"]
				return got
			}
			mail := func(subject string, date time.Time) {
				e.admin("POST", "/_admin/gmail/messages", map[string]any{"from": "shop@example.com", "subject": subject, "text": "x", "date": date.UnixMilli()}, nil)
			}
			early := c.Now()
			for i := 1; i <= 3; i++ {
				c.Add(time.Minute)
				mail(fmt.Sprintf("order %d", i), c.Now())
			}
			if got := poll(); strings.Join(got, ",") != "order 1,order 2,order 3" {
				t.Fatalf("first poll: %v", got)
			}
			if got := poll(); len(got) != 0 {
				t.Fatalf("a poll with nothing new: %v", got)
			}
			c.Add(time.Hour)
			mail("late", early) // dated before every mail the cursor passed
			if got := poll(); strings.Join(got, ",") != "late" {
				t.Fatalf("the poll after a late mail came in: %v, want [late]", got)
			}
			if got := poll(); len(got) != 0 {
				t.Fatalf("the late mail came again: %v", got)
			}

			e.admin("POST", "/_admin/gmail/expire_history", nil, nil)
			mail("after expiry", c.Now())
			seen := map[string]int{}
			for polls := 0; ; polls++ {
				got := poll()
				if len(got) == 0 {
					break
				}
				if polls > 3 {
					t.Fatalf("the sync does not end: %v", got)
				}
				for _, s := range got {
					seen[s]++
				}
			}
			if len(seen) != 5 || seen["after expiry"] != 1 || seen["late"] != 1 || seen["order 1"] != 1 {
				t.Fatalf("the full sync after Gmail forgot the history id read %v; want the 5 messages once each", seen)
			}
			if got := poll(); len(got) != 0 || !strings.HasPrefix(cursor.(string), "h") {
				t.Fatalf("after the sync: %v, cursor %v (want the history again)", got, cursor)
			}
		})
	}
}
