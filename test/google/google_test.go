// Package google runs keep and keep-fake google as people would: chapter
// 06a's example unmodified, `keep connect google` through the loopback
// flow, and the Google writes under kill -9 and every fault of the fake.
// What it checks is what a user sees: rows in the sheet, mail in Sent,
// events in the calendar, and the outputs' status.
package google

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

// fake starts keep-fake google and returns its base URL.
func fake(t *testing.T) string {
	t.Helper()
	return testbin.StartFake(t, keepBin, "google", "--addr", "127.0.0.1:0")
}

type result struct {
	code     int
	out, err string
}

// keep runs the keep binary in dir.
func keep(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(keepBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	r := testbin.Run(t, cmd)
	return result{r.Code, r.Out, r.Err}
}

// connect runs keep connect google in dir and does what a person does:
// opens the URL it prints on a line of its own.
func connect(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(keepBin, "connect", "google")
	cmd.Dir = dir
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		opened := false
		for sc.Scan() {
			line := sc.Text()
			all.WriteString(line + "\n")
			if !opened && strings.HasPrefix(line, "http") {
				opened = true
				resp, err := http.Get(line) // the fake approves at once and redirects to keep
				if err != nil {
					t.Errorf("open %s: %v", line, err)
					continue
				}
				resp.Body.Close()
			}
		}
	}()
	err := cmd.Wait()
	pw.Close()
	wg.Wait()
	if err != nil {
		t.Fatalf("keep connect google: %v\n%s%s", err, all.String(), errb.String())
	}
	return all.String()
}

func admin(t *testing.T, base, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

func sheetRows(t *testing.T, base, id string) (rows [][]string, notes []string) {
	var out struct {
		Rows  [][]string `json:"rows"`
		Notes []string   `json:"notes"`
	}
	admin(t, base, "GET", "/_admin/sheets/"+url.PathEscape(id), nil, &out)
	return out.Rows, out.Notes
}

func writes(t *testing.T, base string) map[string]int {
	out := map[string]int{}
	admin(t, base, "GET", "/_admin/writes", nil, &out)
	return out
}

func project(t *testing.T, base, script string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("[connectors.google]\nendpoint = %q\n\n[policy]\ntool_timeout = \"1s\"\ntransient_backoff = \"20ms\"\nreconcile_backoff = \"20ms\"\nreconcile_attempts = 3\n", base)
	for name, body := range map[string]string{"keep.toml": cfg, "workflow.js": script} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestEmailToSheetsExampleUnmodified(t *testing.T) {
	base := fake(t)
	src, err := os.ReadFile("../../examples/email-to-sheets/workflow.js")
	if err != nil {
		t.Fatal(err)
	}
	dir := project(t, base, string(src))
	if r := keep(t, dir, nil, "deploy", "--grant", "workflow.js"); r.code != 0 {
		t.Fatalf("deploy: %d %s", r.code, r.err)
	}
	out := connect(t, dir)
	if !strings.Contains(out, "connected google as me@example.com") || !strings.Contains(out, "gmail.readonly") || !strings.Contains(out, "spreadsheets") {
		t.Fatalf("keep connect google said:\n%s", out)
	}
	if strings.Contains(out, "calendar") || strings.Contains(out, "gmail.send") {
		t.Fatalf("keep asked for scopes the workflow does not use:\n%s", out)
	}
	for i := 1; i <= 3; i++ {
		admin(t, base, "POST", "/_admin/gmail/messages", map[string]string{"from": fmt.Sprintf("alice%d@example.com", i), "to": "me@example.com", "subject": fmt.Sprintf("Invoice %d", i), "text": "hello"}, nil)
	}
	if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
		t.Fatalf("run: %d\n%s%s", r.code, r.out, r.err)
	}
	rows, notes := sheetRows(t, base, "...")
	got := map[string]bool{}
	for i, row := range rows {
		got[strings.Join(row, "|")] = strings.HasPrefix(notes[i], "keep:")
	}
	if len(rows) != 3 || !got["alice1@example.com|Invoice 1"] || !got["alice2@example.com|Invoice 2"] || !got["alice3@example.com|Invoice 3"] {
		t.Fatalf("the sheet after one run: %v %v (one row per email, each marked as keep's)", rows, notes)
	}
	var inputs []struct{ Title, Source string }
	r := keep(t, dir, nil, "inputs", "email-to-sheets", "--json")
	if err := json.Unmarshal([]byte(r.out), &inputs); err != nil || len(inputs) != 3 {
		t.Fatalf("inputs: %v %s", err, r.out)
	}
	titles := map[string]bool{}
	for _, in := range inputs {
		titles[in.Title] = true
	}
	if !titles[`Email from alice2@example.com: "Invoice 2"`] {
		t.Fatalf("input titles %v", titles)
	}
	var evs struct {
		Events []struct {
			Topic, MessageID string
			Payload          map[string]any
		}
	}
	r = keep(t, dir, nil, "events", "email-to-sheets", "--topic", "row.created", "--json")
	if err := json.Unmarshal([]byte(r.out), &evs); err != nil || len(evs.Events) != 3 {
		t.Fatalf("row.created events: %v %s", err, r.out)
	}
	seen := map[float64]bool{}
	for _, e := range evs.Events {
		id, _ := e.Payload["rowId"].(float64)
		seen[id] = true
	}
	if !seen[1] || !seen[2] || !seen[3] {
		t.Fatalf("row.created rowIds %v", evs.Events)
	}
	// The next poll takes up where the last ended: one new mail, one new row.
	admin(t, base, "POST", "/_admin/gmail/messages", map[string]string{"from": "dan@example.com", "subject": "Late", "text": "x"}, nil)
	if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
		t.Fatalf("second run: %d %s", r.code, r.err)
	}
	if rows, _ := sheetRows(t, base, "..."); len(rows) != 4 || rows[3][0] != "dan@example.com" {
		t.Fatalf("the sheet after a second poll: %v", rows)
	}
	// Tokens are never printed.
	r = keep(t, dir, nil, "connections", "--json")
	if !strings.Contains(r.out, "me@example.com") || strings.Contains(r.out, "ya29") || strings.Contains(r.out, "1//") {
		t.Fatalf("keep connections: %s", r.out)
	}
	db, _ := os.ReadFile(filepath.Join(dir, "keep-data", "keep.db"))
	if bytes.Contains(db, []byte("ya29.fake-")) || bytes.Contains(db, []byte("1//fake-refresh-")) {
		t.Fatal("a token is stored in the clear in keep.db")
	}
	if info, err := os.Stat(filepath.Join(dir, "keep-data", "secret.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("secret.key: %v %v", info, err)
	}
}

// A burst of mail larger than the producer's max between two polls is
// processed completely and once, through keep as a person runs it: the
// fake answers pages of 4, the script asks 5 at a time, 12 mails come in.
func TestABurstLargerThanMaxIsProcessedCompletelyAndOnce(t *testing.T) {
	base := fake(t)
	admin(t, base, "POST", "/_admin/page_max", map[string]any{"max": 4}, nil)
	src, err := os.ReadFile("../../examples/email-to-sheets/workflow.js")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.Replace(string(src), "ctx.gmail.search({ after: state?.cursor })", "ctx.gmail.search({ after: state?.cursor, max: 5 })", 1)
	if script == string(src) {
		t.Fatal("the example's search call changed; update this test")
	}
	dir := project(t, base, script)
	if r := keep(t, dir, nil, "deploy", "--grant", "workflow.js"); r.code != 0 {
		t.Fatalf("deploy: %d %s", r.code, r.err)
	}
	connect(t, dir)
	want := map[string]bool{}
	for i := 1; i <= 12; i++ {
		subject := fmt.Sprintf("Order %02d", i)
		admin(t, base, "POST", "/_admin/gmail/messages", map[string]string{"from": "shop@example.com", "subject": subject, "text": "x"}, nil)
		want["shop@example.com|"+subject] = true
	}
	var rows [][]string
	for run := 0; run < 5 && len(rows) < 12; run++ {
		if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
			t.Fatalf("run %d: %d\n%s%s", run, r.code, r.out, r.err)
		}
		rows, _ = sheetRows(t, base, "...")
	}
	got := map[string]int{}
	for _, row := range rows {
		got[strings.Join(row, "|")]++
	}
	for k := range want {
		if got[k] != 1 {
			t.Fatalf("%s has %d rows; the sheet: %v", k, got[k], rows)
		}
	}
	if len(rows) != 12 {
		t.Fatalf("%d rows for 12 mails: %v", len(rows), rows)
	}
}

// The shipped example, unmodified, through keep (issue 40 #3): a mail that
// comes into the mailbox after the poll that passed its date (Gmail
// indexed or delivered it late) gets its row at the next run, once; after
// Gmail forgot the history id, keep reads the mailbox again as on the
// first poll: every mail comes back, and the inputs registered by id and
// the events published by it keep one of each — no row twice, and the
// mail that came meanwhile gets its row.
func TestMailIndexedLateIsProcessedOnceAndAResyncDoublesNothing(t *testing.T) {
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
	run := func() {
		t.Helper()
		if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
			t.Fatalf("run: %d\n%s%s", r.code, r.out, r.err)
		}
	}
	mail := func(from string, date int64) {
		admin(t, base, "POST", "/_admin/gmail/messages", map[string]any{"from": from, "subject": "Invoice", "text": "x", "date": date}, nil)
	}
	for i := 1; i <= 3; i++ {
		mail(fmt.Sprintf("alice%d@example.com", i), 0)
	}
	run()
	mail("late@example.com", 1_600_000_000_000) // dated 2020: long before the cursor
	run()
	run()
	count := func() map[string]int {
		rows, _ := sheetRows(t, base, "...")
		got := map[string]int{}
		for _, row := range rows {
			got[row[0]]++
		}
		return got
	}
	if got := count(); len(got) != 4 || got["late@example.com"] != 1 || got["alice1@example.com"] != 1 {
		t.Fatalf("rows per sender after the late mail: %v; want one each, the late one too", got)
	}
	admin(t, base, "POST", "/_admin/gmail/expire_history", nil, nil)
	mail("bob@example.com", 0)
	run()
	run()
	if got := count(); len(got) != 5 || got["bob@example.com"] != 1 || got["late@example.com"] != 1 || got["alice3@example.com"] != 1 {
		t.Fatalf("rows per sender after a full sync: %v; want one each", got)
	}
	var inputs []struct{ Title string }
	r := keep(t, dir, nil, "inputs", "email-to-sheets", "--json")
	if err := json.Unmarshal([]byte(r.out), &inputs); err != nil || len(inputs) != 5 {
		t.Fatalf("inputs after a full sync: %v %s (want 5: registering by id keeps one)", err, r.out)
	}
	if w := writes(t, base)["sheets.appendRow"]; w != 5 {
		t.Fatalf("%d rows appended at the fake, want 5", w)
	}
}
