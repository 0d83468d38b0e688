package google_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/google"
	"github.com/keep-run/keep/internal/fake/googlefake"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// env is a fake Google, a real SQLite store holding the account keep
// connected through the fake's OAuth flow, and the three connectors.
type env struct {
	t     *testing.T
	url   string
	reg   *connector.Registry
	accts *account.Accounts
	fake  *googlefake.Server
	auth  *google.Auth
}

func setup(t *testing.T, scopes ...string) *env {
	t.Helper()
	fake := googlefake.New()
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t.Setenv(account.KeyEnv, strings.Repeat("ab", 32))
	box, err := account.LoadKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, url: srv.URL, accts: &account.Accounts{Store: st, Box: box}, fake: fake}
	cfg := google.Config{Endpoint: srv.URL}
	if len(scopes) == 0 {
		scopes = []string{google.Scope("gmail.modify"), google.Scope("spreadsheets"), google.Scope("calendar.events")}
	}
	e.connect(cfg, scopes)
	e.auth = google.NewAuth(cfg, e.accts)
	e.reg = connector.NewRegistry(google.New(e.auth)...)
	return e
}

// connect runs the authorization-code flow with PKCE against the fake, as
// keep connect does, and stores the token.
func (e *env) connect(cfg google.Config, scopes []string) {
	t := e.t
	conf := google.OAuthConfig(cfg, "http://127.0.0.1:9/callback", scopes)
	verifier := oauth2.GenerateVerifier()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(conf.AuthCodeURL("st", oauth2.AccessTypeOffline, oauth2.S256ChallengeOption(verifier)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" || loc.Query().Get("state") != "st" {
		t.Fatalf("authorize answered %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	if _, err := conf.Exchange(context.Background(), loc.Query().Get("code"), oauth2.VerifierOption("wrong-verifier-"+verifier)); err == nil {
		t.Fatal("the fake accepted a wrong PKCE verifier")
	}
	resp, _ = noFollow.Get(conf.AuthCodeURL("st", oauth2.AccessTypeOffline, oauth2.S256ChallengeOption(verifier)))
	resp.Body.Close()
	loc, _ = url.Parse(resp.Header.Get("Location"))
	tok, err := conf.Exchange(context.Background(), loc.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.accts.Save(context.Background(), google.Provider, "me@example.com", scopes, tok); err != nil {
		t.Fatal(err)
	}
}

func (e *env) admin(method, path string, body any, out any) {
	e.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, e.url+path, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		e.t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
}

func (e *env) fault(method, kind string, count int) {
	e.admin("POST", "/_admin/faults", map[string]any{"method": method, "fault": kind, "count": count}, nil)
}

func (e *env) sheet(id string) (rows [][]string, notes []string) {
	var out struct {
		Rows  [][]string `json:"rows"`
		Notes []string   `json:"notes"`
	}
	e.admin("GET", "/_admin/sheets/"+url.PathEscape(id), nil, &out)
	return out.Rows, out.Notes
}

// do calls tool.method as the engine does: validation first, then Do.
func (e *env) do(tool, method string, args map[string]any, key string) connector.Result {
	e.t.Helper()
	m, err := e.reg.Method(tool, method)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := json.Marshal(args)
	args, _ = connector.DecodeArgs(b)
	if err := m.Validate(args); err != nil {
		e.t.Fatalf("%s.%s refused %v: %v", tool, method, args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return m.Do(ctx, connector.Call{Args: args, IdempotencyKey: key})
}

func (e *env) reconcile(tool, method string, args map[string]any, key string) (connector.ReconcileStatus, any) {
	e.t.Helper()
	m, _ := e.reg.Method(tool, method)
	b, _ := json.Marshal(args)
	args, _ = connector.DecodeArgs(b)
	st, v, err := m.Reconcile(context.Background(), connector.Call{Args: args, IdempotencyKey: key})
	if err != nil {
		e.t.Fatalf("reconcile %s.%s: %v", tool, method, err)
	}
	return st, v
}

func TestAppendRowReconcileNeverTakesALookalike(t *testing.T) {
	e := setup(t)
	args := map[string]any{"spreadsheetId": "sheet-1", "values": []any{"alice@example.com", "Invoice 1"}}
	// A person typed the very same row before keep wrote anything.
	e.admin("POST", "/_admin/sheets/sheet-1/rows", map[string]any{"values": []string{"alice@example.com", "Invoice 1"}}, nil)
	if st, _ := e.reconcile("sheets", "appendRow", args, "keep-k1"); st != connector.ReconcileFailed {
		t.Fatalf("reconcile before keep appended answered %s: it took the person's identical row for keep's", st)
	}
	r := e.do("sheets", "appendRow", args, "keep-k1")
	if r.Outcome != connector.OutcomeApplied || r.Err != nil {
		t.Fatalf("append: %+v", r)
	}
	v := r.Value.(map[string]any)
	if v["rowId"] != int64(2) || v["range"] != "Sheet1!A2:B2" {
		t.Fatalf("append returned %v, want row 2 (after the person's row)", v)
	}
	st, got := e.reconcile("sheets", "appendRow", args, "keep-k1")
	if st != connector.ReconcileApplied || got.(map[string]any)["rowId"] != int64(2) {
		t.Fatalf("reconcile after the append: %s %v", st, got)
	}
	if st, _ := e.reconcile("sheets", "appendRow", args, "keep-other"); st != connector.ReconcileFailed {
		t.Fatalf("another write's reconcile answered %s", st)
	}
	rows, notes := e.sheet("sheet-1")
	if len(rows) != 2 || notes[0] != "" || notes[1] != "keep:keep-k1" {
		t.Fatalf("sheet %v notes %v", rows, notes)
	}
}

func TestAppendRowFaults(t *testing.T) {
	e := setup(t)
	args := map[string]any{"spreadsheetId": "s", "sheet": "Sheet1", "values": []any{"x", 2.5, true}}
	for _, c := range []struct {
		fault   string
		outcome connector.Outcome
		class   kt.ErrorClass
		applied bool
	}{
		{"timeout_after_apply", connector.OutcomeUncertain, kt.ClassIndeterminate, true},
		{"drop_after_apply", connector.OutcomeUncertain, kt.ClassIndeterminate, true},
		{"500_after_apply", connector.OutcomeUncertain, kt.ClassIndeterminate, true},
		{"500", connector.OutcomeUncertain, kt.ClassIndeterminate, false},
		{"429", connector.OutcomeFailed, kt.ClassTransient, false},
		{"403_scope", connector.OutcomeFailed, kt.ClassPermission, false},
	} {
		t.Run(c.fault, func(t *testing.T) {
			key := "keep-" + c.fault
			before, _ := e.sheet("s")
			e.fault("sheets.appendRow", c.fault, 1)
			r := e.do("sheets", "appendRow", args, key)
			if r.Outcome != c.outcome || r.Err == nil || r.Err.Class != c.class {
				t.Fatalf("outcome %v err %+v, want %v %s", r.Outcome, r.Err, c.outcome, c.class)
			}
			after, _ := e.sheet("s")
			if applied := len(after) == len(before)+1; applied != c.applied {
				t.Fatalf("rows %d → %d, applied should be %v", len(before), len(after), c.applied)
			}
			st, _ := e.reconcile("sheets", "appendRow", args, key)
			if (st == connector.ReconcileApplied) != c.applied {
				t.Fatalf("reconcile answered %s; the row was applied: %v", st, c.applied)
			}
			if c.fault == "429" && r.Err.RetryAfter != time.Second {
				t.Fatalf("429's Retry-After came as %v", r.Err.RetryAfter)
			}
			if c.fault == "403_scope" && kt.ReconnectOf(r.Err.Message) != "google" {
				t.Fatalf("a missing scope does not offer Reconnect: %q", r.Err.Message)
			}
		})
	}
	rows, _ := e.sheet("s")
	if len(rows) != 3 || rows[0][1] != "2.5" || rows[0][2] != "TRUE" {
		t.Fatalf("rows %v", rows)
	}
}

func TestTokenExpiryRefreshesAndRevocationAsksToReconnect(t *testing.T) {
	e := setup(t)
	args := map[string]any{"spreadsheetId": "s", "values": []any{"a"}}
	e.fault("sheets.appendRow", "401", 1) // Google expired the access token
	if r := e.do("sheets", "appendRow", args, "k1"); r.Outcome != connector.OutcomeApplied {
		t.Fatalf("after an expired token: %+v (keep should refresh and send once)", r.Err)
	}
	if rows, _ := e.sheet("s"); len(rows) != 1 {
		t.Fatalf("%d rows after a 401 and a refresh", len(rows))
	}
	e.admin("POST", "/_admin/revoke", nil, nil)
	r := e.do("sheets", "appendRow", args, "k2")
	if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassPermission || kt.ReconnectOf(r.Err.Message) != "google" {
		t.Fatalf("after the grant was revoked: %v %+v", r.Outcome, r.Err)
	}
	if !strings.Contains(r.Err.Message, "revoked") {
		t.Fatalf("the message does not say why: %q", r.Err.Message)
	}
	cs, _ := e.accts.List(context.Background())
	if len(cs) != 1 || cs[0].Broken == "" || cs[0].Sealed != nil {
		t.Fatalf("connections after a revocation: %+v", cs)
	}
	// Reading goes the same way, and nothing was written.
	if r := e.do("sheets", "getRows", map[string]any{"spreadsheetId": "s"}, ""); r.Err == nil || r.Err.Class != kt.ClassPermission {
		t.Fatalf("a read after the revocation: %+v", r.Err)
	}
	if rows, _ := e.sheet("s"); len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
}

func TestAScopeNotGrantedIsNamed(t *testing.T) {
	e := setup(t, google.Scope("spreadsheets.readonly"))
	r := e.do("sheets", "appendRow", map[string]any{"spreadsheetId": "s", "values": []any{"a"}}, "k")
	if r.Err == nil || r.Err.Class != kt.ClassPermission || !strings.Contains(r.Err.Message, "auth/spreadsheets,") && !strings.Contains(r.Err.Message, "auth/spreadsheets ") {
		t.Fatalf("%+v", r.Err)
	}
	if r := e.do("sheets", "getRows", map[string]any{"spreadsheetId": "s"}, ""); r.Err != nil {
		t.Fatalf("the granted read: %v", r.Err)
	}
}

func TestRowsReadAndUpdated(t *testing.T) {
	e := setup(t)
	for i, v := range []string{"a", "b", "c"} {
		if r := e.do("sheets", "appendRow", map[string]any{"spreadsheetId": "s", "values": []any{v, i}}, "k"+v); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	upd := map[string]any{"spreadsheetId": "s", "rowId": 2, "values": []any{"B", 10}}
	if st, _ := e.reconcile("sheets", "updateRow", upd, "u"); st != connector.ReconcileFailed {
		t.Fatalf("update reconciled as %s before it happened", st)
	}
	if r := e.do("sheets", "updateRow", upd, "u"); r.Err != nil || r.Value.(map[string]any)["range"] != "Sheet1!A2:B2" {
		t.Fatalf("%+v %v", r.Err, r.Value)
	}
	if st, _ := e.reconcile("sheets", "updateRow", upd, "u"); st != connector.ReconcileApplied {
		t.Fatalf("update reconciled as %s after it happened", st)
	}
	r := e.do("sheets", "getRows", map[string]any{"spreadsheetId": "s", "range": "A2:B"}, "")
	b, _ := json.Marshal(r.Value)
	if r.Err != nil || string(b) != `[{"rowId":2,"values":["B","10"]},{"rowId":3,"values":["c","2"]}]` {
		t.Fatalf("%v %s", r.Err, b)
	}
	if r := e.do("sheets", "getRows", map[string]any{"spreadsheetId": "s", "sheet": "Nope"}, ""); r.Err == nil || r.Err.Class != kt.ClassLogic {
		t.Fatalf("a sheet that does not exist: %+v", r.Err)
	}
}

func TestGmailSearchCursorGetSendAndLabels(t *testing.T) {
	e := setup(t)
	for _, s := range []string{"one", "two"} {
		e.admin("POST", "/_admin/gmail/messages", map[string]any{"from": "Alice <alice@example.com>", "subject": "Invoice " + s, "text": "body " + s}, nil)
	}
	r := e.do("gmail", "search", map[string]any{}, "")
	list := r.Value.(map[string]any)
	items := list["$array"].([]any)
	if r.Err != nil || len(items) != 2 || items[0].(map[string]any)["subject"] != "Invoice one" || list["lastCursor"] == nil {
		t.Fatalf("%v %v", r.Err, list)
	}
	first := items[0].(map[string]any)
	if first["from"] != "Alice <alice@example.com>" || first["labels"].([]any)[0] != "INBOX" {
		t.Fatalf("%v", first)
	}
	// The cursor does not go back when nothing is new.
	again := e.do("gmail", "search", map[string]any{"after": list["lastCursor"]}, "").Value.(map[string]any)
	if again["lastCursor"] != list["lastCursor"] {
		t.Fatalf("cursor %v → %v", list["lastCursor"], again["lastCursor"])
	}
	got := e.do("gmail", "get", map[string]any{"id": first["id"]}, "").Value.(map[string]any)
	if got["text"] != "body one" {
		t.Fatalf("%v", got)
	}
	if r := e.do("gmail", "get", map[string]any{"id": "nope"}, ""); r.Err == nil || r.Err.Class != kt.ClassLogic {
		t.Fatalf("%+v", r.Err)
	}

	send := map[string]any{"to": "bob@example.com", "subject": "Über", "text": "hi"}
	if st, _ := e.reconcile("gmail", "send", send, "keep-s1"); st != connector.ReconcileFailed {
		t.Fatalf("send reconciled as %s before it was sent", st)
	}
	e.fault("gmail.send", "drop_after_apply", 1)
	if r := e.do("gmail", "send", send, "keep-s1"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("a dropped answer: %+v", r)
	}
	st, v := e.reconcile("gmail", "send", send, "keep-s1")
	if st != connector.ReconcileApplied || v.(map[string]any)["reconciled"] != true {
		t.Fatalf("send reconciled as %s %v after it was sent", st, v)
	}
	var msgs struct {
		Messages []struct {
			Subject, MessageID string
			Labels             []string
		}
	}
	e.admin("GET", "/_admin/gmail/messages", nil, &msgs)
	if n := len(msgs.Messages); n != 3 || msgs.Messages[2].Subject != "Über" {
		t.Fatalf("%+v", msgs)
	}

	lab := map[string]any{"id": first["id"], "add": "Processed", "remove": []any{"UNREAD"}}
	if st, _ := e.reconcile("gmail", "modifyLabels", lab, "l"); st != connector.ReconcileFailed {
		t.Fatalf("labels reconciled as %s before", st)
	}
	if r := e.do("gmail", "modifyLabels", lab, "l"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if st, _ := e.reconcile("gmail", "modifyLabels", lab, "l"); st != connector.ReconcileApplied {
		t.Fatalf("labels reconciled as %s after", st)
	}
}

func TestCreateEventOnceWhateverHappens(t *testing.T) {
	e := setup(t)
	args := map[string]any{"summary": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T11:00:00Z", "attendees": []any{"bob@example.com"}}
	if st, _ := e.reconcile("calendar", "createEvent", args, "keep-e1"); st != connector.ReconcileFailed {
		t.Fatalf("reconciled as %s before", st)
	}
	e.fault("calendar.createEvent", "timeout_after_apply", 1)
	if r := e.do("calendar", "createEvent", args, "keep-e1"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("%+v", r)
	}
	// A second attempt of the same write finds the id taken and returns the event.
	r := e.do("calendar", "createEvent", args, "keep-e1")
	if r.Outcome != connector.OutcomeApplied || r.Value.(map[string]any)["summary"] != "Review" {
		t.Fatalf("%+v %v", r.Err, r.Value)
	}
	if st, _ := e.reconcile("calendar", "createEvent", args, "keep-e1"); st != connector.ReconcileApplied {
		t.Fatalf("reconciled as %s after", st)
	}
	var cal struct{ Items []map[string]any }
	e.admin("GET", "/_admin/calendar/primary", nil, &cal)
	if len(cal.Items) != 1 {
		t.Fatalf("%d events after a timeout and a second attempt", len(cal.Items))
	}
	list := e.do("calendar", "listEvents", map[string]any{"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z"}, "")
	if items := list.Value.([]any); len(items) != 1 {
		t.Fatalf("%v", list.Value)
	}
	id := r.Value.(map[string]any)["id"]
	upd := map[string]any{"eventId": id, "summary": "Review (moved)"}
	if r := e.do("calendar", "updateEvent", upd, "u"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if st, _ := e.reconcile("calendar", "updateEvent", upd, "u"); st != connector.ReconcileApplied {
		t.Fatalf("update reconciled as %s", st)
	}
	if r := e.do("calendar", "updateEvent", map[string]any{"eventId": "nope0", "summary": "x"}, "u2"); r.Err == nil || r.Err.Class != kt.ClassPrecondition {
		t.Fatalf("%+v", r.Err)
	}
}

func TestNoAccountSaysConnect(t *testing.T) {
	reg := connector.NewRegistry(google.New(nil)...)
	m, _ := reg.Method("gmail", "search")
	r := m.Do(context.Background(), connector.Call{Args: map[string]any{}})
	if r.Err == nil || r.Err.Class != kt.ClassPermission || kt.ReconnectOf(r.Err.Message) != "google" {
		t.Fatalf("%+v", r.Err)
	}
	var ke *kt.Error
	if !errors.As(error(r.Err), &ke) {
		t.Fatal("not a kt.Error")
	}
}
