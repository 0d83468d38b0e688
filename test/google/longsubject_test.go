package google

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// Issue 40 #2: the shipped Gmail example titles an input with the mail's
// subject; a subject of 600 characters made a title over keep's bound,
// failed the producer and kept its cursor, so no later mail was read. Now
// the title is shortened (on a rune boundary, ending in an ellipsis, the
// run's trace says so), every mail is registered and gets its row, and
// the next poll reads the mail that came after.
func TestALongSubjectDoesNotStopTheInbox(t *testing.T) {
	base := fake(t)
	src, err := os.ReadFile("../../examples/email-to-sheets/workflow.js")
	if err != nil {
		t.Fatal(err)
	}
	dir := project(t, base, string(src))
	if r := keep(t, dir, nil, "deploy", "--grant", "workflow.js"); r.code != 0 {
		t.Fatalf("deploy: %d %s", r.code, r.err)
	}
	connect(t, dir)
	long := "Ünïcode " + strings.Repeat("é", 592) // 600 characters, 1,194 bytes
	for _, subject := range []string{"Before", long, "After"} {
		admin(t, base, "POST", "/_admin/gmail/messages", map[string]string{"from": "alice@example.com", "to": "me@example.com", "subject": subject, "text": "hello"}, nil)
	}
	if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
		t.Fatalf("run: %d\n%s%s", r.code, r.out, r.err)
	}
	var inputs []struct{ Title string }
	r := keep(t, dir, nil, "inputs", "email-to-sheets", "--json")
	if err := json.Unmarshal([]byte(r.out), &inputs); err != nil || len(inputs) != 3 {
		t.Fatalf("inputs (want all three mails): %v %s", err, r.out)
	}
	shortened := 0
	for _, in := range inputs {
		if strings.HasPrefix(in.Title, `Email from alice@example.com: "Ünïcode éé`) {
			shortened++
			if len(in.Title) > 500 || !utf8.ValidString(in.Title) || !strings.HasSuffix(in.Title, "…") {
				t.Fatalf("the long subject's title (%d bytes): %q", len(in.Title), in.Title)
			}
		}
	}
	if shortened != 1 {
		t.Fatalf("no input titled with the long subject, shortened: %+v", inputs)
	}
	rows, _ := sheetRows(t, base, "...")
	whole := false
	for _, row := range rows {
		whole = whole || row[1] == long
	}
	if len(rows) != 3 || !whole {
		t.Fatalf("the sheet: %d rows, want 3, the long subject whole in its payload: %v", len(rows), rows)
	}
	var runs []struct {
		ID, Handler, Status string
	}
	r = keep(t, dir, nil, "runs", "email-to-sheets", "--json")
	if err := json.Unmarshal([]byte(r.out), &runs); err != nil {
		t.Fatalf("runs: %v %s", err, r.out)
	}
	traced := false
	for _, run := range runs {
		if run.Handler == "pollEmail" {
			if show := keep(t, dir, nil, "show", "run", run.ID); strings.Contains(show.out, "the title has 1226 characters, more than keep's bound of 500: shortened") {
				traced = true
			}
		}
	}
	if !traced {
		t.Fatalf("no trace of the producer says the title was shortened: %+v", runs)
	}
	admin(t, base, "POST", "/_admin/gmail/messages", map[string]string{"from": "dan@example.com", "subject": "Later", "text": "x"}, nil)
	if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
		t.Fatalf("second run: %d %s", r.code, r.err)
	}
	if rows, _ := sheetRows(t, base, "..."); len(rows) != 4 || rows[3][0] != "dan@example.com" {
		t.Fatalf("the sheet after a later mail: %v", rows)
	}
}
