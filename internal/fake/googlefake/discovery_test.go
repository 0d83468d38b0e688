package googlefake_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/keep-run/keep/internal/fake/googlefake"
)

// discovery is one API's discovery document, as the pinned client
// library (google.golang.org/api) carries it.
type discovery struct {
	Schemas   map[string]*schema `json:"schemas"`
	Resources map[string]*resource
}

type resource struct {
	Methods map[string]*struct {
		ID       string
		Response *schema
	}
	Resources map[string]*resource
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Properties           map[string]*schema `json:"properties"`
	AdditionalProperties *schema            `json:"additionalProperties"`
	Items                *schema            `json:"items"`
}

// pinned reads an API's discovery document from the module cache, at the
// version go.mod pins.
func pinned(t *testing.T, rel string) *discovery {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "google.golang.org/api").Output()
	if err != nil {
		t.Fatalf("go list -m google.golang.org/api: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), rel))
	if err != nil {
		t.Fatal(err)
	}
	var d discovery
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return &d
}

// response is the schema a method answers with, by its id
// ("gmail.users.messages.list").
func (d *discovery) response(t *testing.T, id string) *schema {
	var find func(rs map[string]*resource) *schema
	find = func(rs map[string]*resource) *schema {
		for _, r := range rs {
			for _, m := range r.Methods {
				if m.ID == id {
					return m.Response
				}
			}
			if s := find(r.Resources); s != nil {
				return s
			}
		}
		return nil
	}
	s := find(d.Resources)
	if s == nil {
		t.Fatalf("the discovery document has no method %s", id)
	}
	return s
}

// check lists where v differs from the schema: a field the API does not
// define, or a value of another JSON type (int64 travels as a string).
func (d *discovery) check(s *schema, v any, at string) []string {
	if s.Ref != "" {
		return d.check(d.Schemas[s.Ref], v, at)
	}
	bad := func() []string {
		return []string{fmt.Sprintf("%s: %T where the API defines %s %s", at, v, s.Type, s.Format)}
	}
	switch s.Type {
	case "object":
		o, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		var out []string
		keys := make([]string, 0, len(o))
		for k := range o {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := s.Properties[k]
			if p == nil {
				p = s.AdditionalProperties
			}
			if p == nil {
				out = append(out, fmt.Sprintf("%s.%s: a field the API does not define", at, k))
				continue
			}
			out = append(out, d.check(p, o[k], at+"."+k)...)
		}
		return out
	case "array":
		a, ok := v.([]any)
		if !ok {
			return bad()
		}
		var out []string
		for i, x := range a {
			out = append(out, d.check(s.Items, x, fmt.Sprintf("%s[%d]", at, i))...)
		}
		return out
	case "string":
		if _, ok := v.(string); !ok {
			return bad()
		}
	case "integer", "number":
		if _, ok := v.(float64); !ok {
			return bad()
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad()
		}
	}
	return nil
}

type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func (c *client) call(method, path string, body any) any {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
		c.t.Fatalf("%s %s: %s %v %v", method, path, resp.Status, err, v)
	}
	return v
}

// connect runs the fake's OAuth flow for every scope the calls need.
func connect(t *testing.T, base string) *http.Client {
	conf := &oauth2.Config{ClientID: "c", RedirectURL: "http://127.0.0.1:9/cb", Endpoint: oauth2.Endpoint{AuthURL: base + "/o/oauth2/auth", TokenURL: base + "/token", AuthStyle: oauth2.AuthStyleInParams},
		Scopes: []string{"https://www.googleapis.com/auth/gmail.modify", "https://www.googleapis.com/auth/spreadsheets", "https://www.googleapis.com/auth/calendar.events"}}
	v := oauth2.GenerateVerifier()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(v)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	tok, err := conf.Exchange(context.Background(), loc.Query().Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	return conf.Client(context.Background(), tok)
}

// The fake answers in the shapes Google's discovery documents define, for
// every route keep's connectors call: no field Google does not define, no
// value of another type (a test of the fake, which the connectors' tests
// trust to be Google).
func TestTheFakeAnswersAsTheDiscoveryDocumentsDefine(t *testing.T) {
	srv := httptest.NewServer(googlefake.New().Handler())
	defer srv.Close()
	c := &client{t: t, base: srv.URL, hc: connect(t, srv.URL)}
	admin := func(path string, body any) map[string]any {
		b, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return v
	}
	in := admin("/_admin/gmail/messages", map[string]any{"from": "ann@example.com", "subject": "Invoice", "text": "t", "html": "<p>t</p>"})
	id, thread := in["id"].(string), in["threadId"].(string)
	raw := base64.URLEncoding.EncodeToString([]byte("To: ann@example.com\r\nSubject: Re: Invoice\r\nX-Keep-Idempotency-Key: k\r\n\r\nhi"))

	gmail, sheets, cal := pinned(t, "gmail/v1/gmail-api.json"), pinned(t, "sheets/v4/sheets-api.json"), pinned(t, "calendar/v3/calendar-api.json")
	event := map[string]any{"id": "keepabc123", "summary": "Review", "start": map[string]any{"dateTime": "2026-12-01T10:00:00Z"},
		"end": map[string]any{"dateTime": "2026-12-01T11:00:00Z"}, "attendees": []any{map[string]any{"email": "bob@example.com"}}, "description": "d", "location": "l"}
	row := map[string]any{"requests": []any{map[string]any{"appendCells": map[string]any{"sheetId": 0, "fields": "userEnteredValue,note",
		"rows": []any{map[string]any{"values": []any{map[string]any{"userEnteredValue": map[string]any{"stringValue": "a"}, "note": "keep:k"}}}}}}}}
	for _, x := range []struct {
		d          *discovery
		method     string
		verb, path string
		body       any
	}{
		{gmail, "gmail.users.getProfile", "GET", "/gmail/v1/users/me/profile", nil},
		{gmail, "gmail.users.labels.list", "GET", "/gmail/v1/users/me/labels", nil},
		{gmail, "gmail.users.messages.list", "GET", "/gmail/v1/users/me/messages?q=in:inbox&maxResults=1", nil},
		{gmail, "gmail.users.messages.get", "GET", "/gmail/v1/users/me/messages/" + id + "?format=full", nil},
		{gmail, "gmail.users.messages.get", "GET", "/gmail/v1/users/me/messages/" + id + "?format=metadata&metadataHeaders=Subject", nil},
		{gmail, "gmail.users.messages.get", "GET", "/gmail/v1/users/me/messages/" + id + "?format=minimal", nil},
		{gmail, "gmail.users.messages.send", "POST", "/gmail/v1/users/me/messages/send", map[string]any{"raw": raw, "threadId": thread}},
		{gmail, "gmail.users.messages.modify", "POST", "/gmail/v1/users/me/messages/" + id + "/modify", map[string]any{"removeLabelIds": []any{"UNREAD"}}},
		{gmail, "gmail.users.threads.get", "GET", "/gmail/v1/users/me/threads/" + thread + "?format=metadata", nil},
		{gmail, "gmail.users.labels.create", "POST", "/gmail/v1/users/me/labels", map[string]any{"name": "Processed"}},
		{gmail, "gmail.users.history.list", "GET", "/gmail/v1/users/me/history?startHistoryId=1&historyTypes=messageAdded&labelId=INBOX&maxResults=1", nil},
		{gmail, "gmail.users.history.list", "GET", "/gmail/v1/users/me/history?startHistoryId=1", nil},
		{sheets, "sheets.spreadsheets.get", "GET", "/v4/spreadsheets/s?fields=sheets.properties", nil},
		{sheets, "sheets.spreadsheets.batchUpdate", "POST", "/v4/spreadsheets/s:batchUpdate", row},
		{sheets, "sheets.spreadsheets.get", "GET", "/v4/spreadsheets/s?ranges=Sheet1!A:A&includeGridData=true", nil},
		{sheets, "sheets.spreadsheets.values.update", "PUT", "/v4/spreadsheets/s/values/Sheet1!A1?valueInputOption=RAW", map[string]any{"values": []any{[]any{"b", 2}}}},
		{sheets, "sheets.spreadsheets.values.get", "GET", "/v4/spreadsheets/s/values/Sheet1!A1:B1", nil},
		{cal, "calendar.events.insert", "POST", "/calendar/v3/calendars/primary/events?sendUpdates=all", event},
		{cal, "calendar.events.get", "GET", "/calendar/v3/calendars/primary/events/keepabc123", nil},
		{cal, "calendar.events.patch", "PATCH", "/calendar/v3/calendars/primary/events/keepabc123", map[string]any{"summary": "Moved"}},
		{cal, "calendar.events.list", "GET", "/calendar/v3/calendars/primary/events?singleEvents=true&orderBy=startTime", nil},
	} {
		got := c.call(x.verb, x.path, x.body)
		if errs := x.d.check(x.d.response(t, x.method), got, x.method); len(errs) > 0 {
			t.Errorf("%s %s answered outside %s's definition:\n  %s", x.verb, x.path, x.method, strings.Join(errs, "\n  "))
		}
	}
}

// users.history.list as Gmail documents it: records after startHistoryId
// in increasing ids, of the types asked, in pages with a nextPageToken,
// the current historyId (the profile's) on every page; after the history
// is forgotten, an older startHistoryId is answered 404.
func TestHistoryListsChangesInPagesAndForgets(t *testing.T) {
	fake := googlefake.New()
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	c := &client{t: t, base: srv.URL, hc: connect(t, srv.URL)}
	start := c.call("GET", "/gmail/v1/users/me/profile", nil).(map[string]any)["historyId"].(string)
	var ids []string
	for i := 0; i < 5; i++ {
		b, _ := json.Marshal(map[string]any{"from": "a@example.com", "subject": fmt.Sprint(i), "date": 1_000_000 + i})
		resp, err := http.Post(srv.URL+"/_admin/gmail/messages", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		ids = append(ids, m["id"].(string))
	}
	c.call("POST", "/gmail/v1/users/me/messages/"+ids[0]+"/modify", map[string]any{"removeLabelIds": []any{"UNREAD"}})
	var got []string
	last, token := "", ""
	for pages := 0; ; pages++ {
		v := c.call("GET", "/gmail/v1/users/me/history?historyTypes=messageAdded&maxResults=2&startHistoryId="+start+"&pageToken="+token, nil).(map[string]any)
		for _, h := range v["history"].([]any) {
			rec := h.(map[string]any)
			if rec["id"].(string) <= last {
				t.Fatalf("history ids do not increase: %v after %s", rec["id"], last)
			}
			last = rec["id"].(string)
			for _, a := range rec["messagesAdded"].([]any) {
				got = append(got, a.(map[string]any)["message"].(map[string]any)["id"].(string))
			}
		}
		token, _ = v["nextPageToken"].(string)
		if token == "" {
			if pages != 2 || v["historyId"] != c.call("GET", "/gmail/v1/users/me/profile", nil).(map[string]any)["historyId"] {
				t.Fatalf("%d pages, historyId %v", pages+1, v["historyId"])
			}
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("messages added: %v, want %v (the label change is not one)", got, ids)
	}
	resp, _ := http.Post(srv.URL+"/_admin/gmail/expire_history", "application/json", nil)
	resp.Body.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/gmail/v1/users/me/history?startHistoryId="+start, nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an expired startHistoryId: %s, want 404", resp.Status)
	}
}
