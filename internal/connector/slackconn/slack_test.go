package slackconn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/slackconn"
	"github.com/keep-run/keep/internal/fake/slackfake"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/notify"
	"github.com/keep-run/keep/internal/store/sqlite"
)

type env struct {
	t    *testing.T
	url  string
	reg  *connector.Registry
	bot  *slackconn.Slack
	fake *slackfake.Server
}

func setup(t *testing.T) *env {
	fake := slackfake.New()
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	box, err := account.LoadKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	accts := &account.Accounts{Store: st, Box: box}
	if err := accts.Save(context.Background(), slackconn.Provider, "keep@keep-fake", nil, &oauth2.Token{AccessToken: slackfake.Token}); err != nil {
		t.Fatal(err)
	}
	bot := &slackconn.Slack{Endpoint: srv.URL, Accounts: accts}
	return &env{t: t, url: srv.URL, reg: connector.NewRegistry(slackconn.New(bot)), bot: bot, fake: fake}
}

func (e *env) admin(path string, body, out any) {
	e.t.Helper()
	var resp *http.Response
	var err error
	if body != nil {
		b, _ := json.Marshal(body)
		resp, err = http.Post(e.url+path, "application/json", bytes.NewReader(b))
	} else {
		resp, err = http.Get(e.url + path)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
}

func (e *env) do(method string, args map[string]any, key string) connector.Result {
	e.t.Helper()
	m, _ := e.reg.Method("slack", method)
	b, _ := json.Marshal(args)
	args, _ = connector.DecodeArgs(b)
	if err := m.Validate(args); err != nil {
		e.t.Fatalf("%s refused: %v", method, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return m.Do(ctx, connector.Call{Args: args, IdempotencyKey: key})
}

func (e *env) reconcile(method string, args map[string]any, key string) connector.ReconcileStatus {
	e.t.Helper()
	m, _ := e.reg.Method("slack", method)
	b, _ := json.Marshal(args)
	args, _ = connector.DecodeArgs(b)
	st, _, err := m.Reconcile(context.Background(), connector.Call{Args: args, IdempotencyKey: key})
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) posted(ch string) int {
	var out struct{ Messages []map[string]any }
	e.admin("/_admin/channels/"+ch, nil, &out)
	n := 0
	for _, m := range out.Messages {
		if m["user"] == slackfake.BotUser {
			n++
		}
	}
	return n
}

func TestPostMessageFaultsAndReconcile(t *testing.T) {
	e := setup(t)
	args := map[string]any{"channel": "C1", "text": "Order 7 shipped"}
	for _, c := range []struct {
		fault   string
		outcome connector.Outcome
		class   kt.ErrorClass
		applied bool
	}{
		{"drop_after_apply", connector.OutcomeUncertain, kt.ClassIndeterminate, true},
		{"timeout_after_apply", connector.OutcomeUncertain, kt.ClassIndeterminate, true},
		{"500_after_apply", connector.OutcomeUncertain, kt.ClassIndeterminate, true},
		{"500", connector.OutcomeUncertain, kt.ClassIndeterminate, false},
		{"429", connector.OutcomeFailed, kt.ClassTransient, false},
		{"not_in_channel", connector.OutcomeFailed, kt.ClassPrecondition, false},
	} {
		t.Run(c.fault, func(t *testing.T) {
			key := "keep-" + c.fault
			before := e.posted("C1")
			if st := e.reconcile("postMessage", args, key); st != connector.ReconcileFailed {
				t.Fatalf("reconciled as %s before", st)
			}
			e.admin("/_admin/faults", map[string]any{"method": "slack.postMessage", "fault": c.fault}, nil)
			r := e.do("postMessage", args, key)
			if r.Outcome != c.outcome || r.Err == nil || r.Err.Class != c.class {
				t.Fatalf("%v %+v, want %v %s", r.Outcome, r.Err, c.outcome, c.class)
			}
			if applied := e.posted("C1") == before+1; applied != c.applied {
				t.Fatalf("posted: %v, want %v", applied, c.applied)
			}
			if st := e.reconcile("postMessage", args, key); (st == connector.ReconcileApplied) != c.applied {
				t.Fatalf("reconciled as %s", st)
			}
			if c.fault == "429" && r.Err.RetryAfter != time.Second {
				t.Fatalf("Retry-After %v", r.Err.RetryAfter)
			}
		})
	}
	// An identical message a person wrote is not keep's.
	e.admin("/_admin/messages", map[string]any{"channel": "C1", "text": "Order 7 shipped"}, nil)
	if st := e.reconcile("postMessage", args, "keep-new"); st != connector.ReconcileFailed {
		t.Fatalf("a person's identical message reconciled as %s", st)
	}
}

func TestHistoryReactionsAndARevokedToken(t *testing.T) {
	e := setup(t)
	var first struct{ TS string }
	e.admin("/_admin/messages", map[string]any{"channel": "C2", "text": "deploy please"}, &first)
	e.admin("/_admin/messages", map[string]any{"channel": "C2", "text": "and the docs"}, nil)
	r := e.do("history", map[string]any{"channel": "C2"}, "")
	v := r.Value.(map[string]any)
	items := v["$array"].([]any)
	if r.Err != nil || len(items) != 2 || items[0].(map[string]any)["text"] != "deploy please" {
		t.Fatalf("%v %v", r.Err, v)
	}
	again := e.do("history", map[string]any{"channel": "C2", "after": v["lastCursor"]}, "").Value.(map[string]any)
	if len(again["$array"].([]any)) != 0 || again["lastCursor"] != v["lastCursor"] {
		t.Fatalf("after the cursor: %v", again)
	}
	react := map[string]any{"channel": "C2", "ts": first.TS, "name": "white_check_mark"}
	if st := e.reconcile("addReaction", react, "r"); st != connector.ReconcileFailed {
		t.Fatalf("reaction reconciled as %s before", st)
	}
	for i := 0; i < 2; i++ { // a second add is done already, not an error
		if r := e.do("addReaction", react, "r"); r.Outcome != connector.OutcomeApplied {
			t.Fatalf("add %d: %+v", i, r.Err)
		}
	}
	if st := e.reconcile("addReaction", react, "r"); st != connector.ReconcileApplied {
		t.Fatalf("reaction reconciled as %s after", st)
	}
	e.admin("/_admin/revoke", map[string]any{}, nil)
	r = e.do("postMessage", map[string]any{"channel": "C2", "text": "x"}, "k")
	if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassPermission || kt.ReconnectOf(r.Err.Message) != "slack" || !strings.Contains(r.Err.Message, "token_revoked") {
		t.Fatalf("a revoked token: %v %+v", r.Outcome, r.Err)
	}
	if r := e.do("history", map[string]any{"channel": "C2"}, ""); r.Err == nil || r.Err.Class != kt.ClassPermission {
		t.Fatalf("a read after the revocation: %+v", r.Err)
	}
}

// A notice quotes outside data: a title with "<!channel>" or a forged link
// "<http://x|…>" once pinged the whole channel and showed a link under
// words of the title's choosing (issue 23, low), and mrkdwn in a title
// (*bold*, _italic_, ~strike~, `code`, a "> " quote, ```a block```) was
// rendered as formatting (issue 38, low). Slack now gets the text escaped
// by its rules (&, <, >) and posted with mrkdwn off, so all of it shows as
// the characters written, and with unfurling off, so a URL in a title
// makes Slack fetch no preview.
func TestANoticeIsEscapedForSlack(t *testing.T) {
	e := setup(t)
	ch := &notify.Slack{Channel: "C9", Post: e.bot.Notify}
	n := notify.Notice{Kind: "blocked", Subject: "keep: <!channel> needs you", Text: "Order *URGENT* _pay_ ~now~ `rm` <http://evil.example|your invoice> & <@U123>\n> wire it to http://evil.example/pay\n```x```"}
	if err := ch.Send(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	var out struct{ Messages []map[string]any }
	e.admin("/_admin/channels/C9", nil, &out)
	want := "keep: &lt;!channel&gt; needs you\nOrder *URGENT* _pay_ ~now~ `rm` &lt;http://evil.example|your invoice&gt; &amp; &lt;@U123&gt;\n&gt; wire it to http://evil.example/pay\n```x```"
	if len(out.Messages) != 1 || out.Messages[0]["text"] != want {
		t.Fatalf("Slack got %v; want the text %q", out.Messages, want)
	}
	posted, _ := out.Messages[0]["posted"].(map[string]any)
	if posted["mrkdwn"] != "false" || posted["unfurl_links"] != "false" || posted["unfurl_media"] != "false" {
		t.Fatalf("posted with %v; want mrkdwn, unfurl_links and unfurl_media false (the text shown as written, no preview)", posted)
	}
}

// history reads every page: Slack answers short pages (15 items for apps
// outside its Marketplace, fewer than asked) with has_more and a
// next_cursor. Forty messages between two polls, read with limit 25 and
// the cursor, come each once, oldest first, none skipped.
func TestHistoryPagesAndTheCursorSkipsNothing(t *testing.T) {
	e := setup(t)
	var want []string
	for i := 0; i < 40; i++ {
		var m struct{ TS string }
		e.admin("/_admin/messages", map[string]any{"channel": "C3", "text": fmt.Sprintf("m%d", i)}, &m)
		want = append(want, m.TS)
	}
	var got []string
	cursor := any("0") // from the channel's first message
	for poll := 0; poll < 5; poll++ {
		r := e.do("history", map[string]any{"channel": "C3", "after": cursor, "limit": 25}, "")
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		v := r.Value.(map[string]any)
		for _, it := range v["$array"].([]any) {
			got = append(got, it.(map[string]any)["ts"].(string))
		}
		cursor = v["lastCursor"]
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %d messages %v, want the 40 in order %v", len(got), got, want)
	}
	// Without after: the latest limit messages, oldest first.
	r := e.do("history", map[string]any{"channel": "C3", "limit": 20}, "")
	items := r.Value.(map[string]any)["$array"].([]any)
	if r.Err != nil || len(items) != 20 || items[0].(map[string]any)["ts"] != want[20] || items[19].(map[string]any)["ts"] != want[39] {
		t.Fatalf("the latest 20: %v %v", r.Err, items)
	}
}

// A reply in a thread is not in conversations.history (Slack lists the
// thread's parent only): reconcile reads the thread with
// conversations.replies, so a reply whose answer was lost is found and
// never posted twice.
func TestAThreadReplyWhoseAnswerWasLostIsFound(t *testing.T) {
	e := setup(t)
	var parent struct{ TS string }
	e.admin("/_admin/messages", map[string]any{"channel": "C4", "text": "deploy failed"}, &parent)
	for i := 0; i < 20; i++ { // the parent is well past history's first page
		e.admin("/_admin/messages", map[string]any{"channel": "C4", "text": fmt.Sprintf("later %d", i)}, nil)
	}
	args := map[string]any{"channel": "C4", "threadTs": parent.TS, "text": "on it"}
	if st := e.reconcile("postMessage", args, "keep-reply"); st != connector.ReconcileFailed {
		t.Fatalf("reconciled as %s before the reply", st)
	}
	e.admin("/_admin/faults", map[string]any{"method": "slack.postMessage", "fault": "drop_after_apply"}, nil)
	if r := e.do("postMessage", args, "keep-reply"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
	if st := e.reconcile("postMessage", args, "keep-reply"); st != connector.ReconcileApplied {
		t.Fatalf("the reply that was posted reconciled as %s: keep would post it again", st)
	}
	if n := e.posted("C4"); n != 1 {
		t.Fatalf("%d replies posted", n)
	}
	// history lists the thread's parent, never the reply.
	r := e.do("history", map[string]any{"channel": "C4", "after": "0", "limit": 100}, "")
	for _, it := range r.Value.(map[string]any)["$array"].([]any) {
		if it.(map[string]any)["text"] == "on it" {
			t.Fatalf("history listed a thread reply: %v", it)
		}
	}
}

// A channel by name (#ops) works for every method: history, reactions and
// reconcile resolve it to the channel's ID (Slack takes names only in
// chat.postMessage), once.
func TestAChannelByNameWorksEverywhere(t *testing.T) {
	e := setup(t)
	for i := 0; i < 20; i++ { // other channels before it: conversations.list pages
		e.admin("/_admin/messages", map[string]any{"channel": fmt.Sprintf("#room-%02d", i), "text": "x"}, nil)
	}
	var seeded struct{ TS, Channel string }
	e.admin("/_admin/messages", map[string]any{"channel": "#ops", "text": "disk full"}, &seeded)
	r := e.do("history", map[string]any{"channel": "#ops", "after": "0"}, "")
	if r.Err != nil || len(r.Value.(map[string]any)["$array"].([]any)) != 1 {
		t.Fatalf("history of #ops: %+v %v", r.Err, r.Value)
	}
	args := map[string]any{"channel": "#ops", "text": "looking"}
	e.admin("/_admin/faults", map[string]any{"method": "slack.postMessage", "fault": "timeout_after_apply"}, nil)
	if r := e.do("postMessage", args, "keep-ops"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
	if st := e.reconcile("postMessage", args, "keep-ops"); st != connector.ReconcileApplied {
		t.Fatalf("a post to #ops reconciled as %s", st)
	}
	react := map[string]any{"channel": "#ops", "ts": seeded.TS, "name": "eyes"}
	if r := e.do("addReaction", react, "r"); r.Err != nil {
		t.Fatalf("addReaction on #ops: %+v", r.Err)
	}
	if st := e.reconcile("addReaction", react, "r"); st != connector.ReconcileApplied {
		t.Fatalf("a reaction on #ops reconciled as %s", st)
	}
	var calls map[string]int
	e.admin("/_admin/calls", nil, &calls)
	if calls["conversations.list"] < 2 || calls["conversations.list"] > 3 {
		t.Fatalf("conversations.list called %d times: the name is resolved once (its pages), then cached", calls["conversations.list"])
	}
	if r := e.do("history", map[string]any{"channel": "#nowhere"}, ""); r.Err == nil || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "#nowhere") {
		t.Fatalf("a name no channel has: %+v", r.Err)
	}
}

// clock is a virtual clock the fake's rate limit counts on: a retry's wait
// moves it, so an hour of Slack's 1 call a minute takes no hour, and no
// timer races the work.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// A backlog of 1,000 messages read at Slack's 1 call a minute with pages of
// 15 (conversations.history for apps outside its Marketplace) completes
// (issue 40 #6): a 429 keeps where the read stopped, and the retry of the
// same call goes on from there, after Slack's Retry-After, saying it got
// somewhere (kt.Error.Progressed: the engine does not count such a retry).
// Every page is fetched once: the calls are the pages and the 429s. It
// restarted at page 1 on every 429 and never ended.
func TestABacklogReadOnePageAMinuteCompletes(t *testing.T) {
	e := setup(t)
	c := &clock{now: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
	e.fake.SetClock(c.Now)
	var want []string
	for i := 0; i < 1000; i++ {
		var m struct{ TS string }
		e.admin("/_admin/messages", map[string]any{"channel": "C7", "text": fmt.Sprintf("m%d", i)}, &m)
		want = append(want, m.TS)
	}
	e.admin("/_admin/rate_limit", map[string]any{"method": "conversations.history", "calls": 1, "windowSeconds": 60}, nil)
	var got []string
	cursor, attempts, progressed, limited := any("0"), 0, 0, 0
	for polls := 0; ; polls++ {
		var r connector.Result
		for {
			if attempts++; attempts > 500 {
				t.Fatalf("%d attempts and %d of 1,000 messages read: the read does not go on where it stopped", attempts, len(got))
			}
			r = e.do("history", map[string]any{"channel": "C7", "after": cursor, "limit": 999}, "")
			if r.Err == nil {
				break
			}
			if r.Err.Class != kt.ClassTransient || r.Err.RetryAfter <= 0 || r.Err.RetryAfter > time.Minute {
				t.Fatalf("a rate limit: %+v", r.Err)
			}
			limited++
			if r.Err.Progressed {
				progressed++
			}
			c.Add(r.Err.RetryAfter) // the engine's wait for the retry
		}
		v := r.Value.(map[string]any)
		items := v["$array"].([]any)
		for _, it := range items {
			got = append(got, it.(map[string]any)["ts"].(string))
		}
		cursor = v["lastCursor"]
		if len(items) == 0 {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %d messages, want the 1,000 in order", len(got))
	}
	var calls, rl map[string]int
	e.admin("/_admin/calls", nil, &calls)
	e.admin("/_admin/ratelimited", nil, &rl)
	// 999 messages in 67 pages of 15, then the 1,000th (1 page), then an empty poll (1 page).
	pages := 67 + 1 + 1
	if n := calls["conversations.history"]; n != pages+rl["conversations.history"] || rl["conversations.history"] != limited {
		t.Fatalf("%d calls of conversations.history and %d answered 429 (%d seen); want the %d pages once each and the 429s", n, rl["conversations.history"], limited, pages)
	}
	if progressed < 60 {
		t.Fatalf("only %d of %d rate-limited attempts said they got somewhere", progressed, limited)
	}
}
