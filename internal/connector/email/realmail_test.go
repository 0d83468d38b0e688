package email_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/email"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testmail"
)

// The servers as stock Debian installs them: testmail shaped like Dovecot
// (INBOX only, SPECIAL-USE, TRYCREATE) and Postfix (files nothing).

func setupWith(t *testing.T, o testmail.Options, extra string) (*testmail.Server, *connector.Registry) {
	t.Helper()
	srv := testmail.StartWith(t, o)
	cfg, err := config.Parse("keep.toml", srv.Config()+extra)
	if err != nil {
		t.Fatal(err)
	}
	return srv, connector.NewRegistry(email.New(email.ConfigOf(cfg)))
}

func folder(t *testing.T, reg *connector.Registry, name string) []map[string]any {
	t.Helper()
	r := do(t, reg, "search", map[string]any{"folder": name}, "")
	if r.Err != nil {
		t.Fatalf("search %s: %+v", name, r.Err)
	}
	var out []map[string]any
	for _, x := range r.Value.(map[string]any)["$array"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

// A mailbox without Sent (stock Dovecot): keep creates Sent, files its
// copy there, and reconcile finds it; a folder marked \Sent is used by
// whatever name it has.
func TestSentIsFoundOrCreated(t *testing.T) {
	args := map[string]any{"to": "bob@example.com", "subject": "Your order", "text": "shipped"}
	for _, sent := range []string{"", "Sent Items"} {
		t.Run("sent="+sent, func(t *testing.T) {
			_, reg := setupWith(t, testmail.Options{Sent: sent}, "")
			r := do(t, reg, "send", args, "keep-1")
			want := sent
			if want == "" {
				want = "Sent"
			}
			if v := r.Value.(map[string]any); r.Outcome != connector.OutcomeApplied || v["sentFolder"] != want || v["filedBy"] != "keep" {
				t.Fatalf("send: %v %+v %v", r.Outcome, r.Err, r.Value)
			}
			if got := folder(t, reg, want); len(got) != 1 || "<"+str(got[0]["id"])+">" != r.Value.(map[string]any)["messageId"] {
				t.Fatalf("%s holds %v", want, got)
			}
			if st, err := reconcile(t, reg, args, "keep-1"); st != connector.ReconcileApplied {
				t.Fatalf("reconcile: %s %v", st, err)
			}
		})
	}
}

// Filing that fails is said, and the send still counts as sent.
func TestFilingThatFailsIsSaid(t *testing.T) {
	srv := testmail.StartWith(t, testmail.Options{})
	cfg, err := config.Parse("keep.toml", strings.Replace(srv.Config(), srv.IMAPAddr, "127.0.0.1:1", 1))
	if err != nil {
		t.Fatal(err)
	}
	reg := connector.NewRegistry(email.New(email.ConfigOf(cfg)))
	r := do(t, reg, "send", map[string]any{"to": "bob@example.com", "subject": "s", "text": "t"}, "keep-1")
	v, _ := r.Value.(map[string]any)
	if r.Outcome != connector.OutcomeApplied || !strings.Contains(str(v["notFiled"]), "not filed into Sent") || v["sentFolder"] != nil {
		t.Fatalf("send with IMAP unreachable: %v %+v %v", r.Outcome, r.Err, r.Value)
	}
	if n := len(srv.Sent()); n != 1 {
		t.Fatalf("%d messages sent", n)
	}
}

func str(v any) string { s, _ := v.(string); return s }

// server_keeps_sent = true on Postfix (which files nothing): a send cut
// after the message went out is never taken for "not sent".
func TestServerKeepsSentIsCheckedBeforeItIsTrusted(t *testing.T) {
	srv := testmail.StartWith(t, testmail.Options{Sent: "Sent"})
	cfg, err := config.Parse("keep.toml", strings.Replace(srv.Config(), "server_keeps_sent = false", "server_keeps_sent = true", 1))
	if err != nil {
		t.Fatal(err)
	}
	reg := connector.NewRegistry(email.New(email.ConfigOf(cfg)))
	args := map[string]any{"to": "bob@example.com", "subject": "Your order", "text": "shipped"}
	r := do(t, reg, "send", map[string]any{"to": "ann@example.com", "subject": "First", "text": "one"}, "keep-0")
	if v := r.Value.(map[string]any); r.Outcome != connector.OutcomeApplied || v["filedBy"] != "keep" {
		t.Fatalf("the server filed nothing, so keep files its copy: %v %+v %v", r.Outcome, r.Err, r.Value)
	}
	srv.CutAfterData(1)
	if r := do(t, reg, "send", args, "keep-1"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("cut after DATA: %v %+v", r.Outcome, r.Err)
	}
	st, err := reconcile(t, reg, args, "keep-1")
	if st != connector.ReconcileRetry || err == nil || !strings.Contains(err.Error(), "was ever filed there by the server") || !strings.Contains(err.Error(), "<keep.") {
		t.Fatalf("a message the server took, not in Sent, reconciled as %s (%v): a retry sends it twice", st, err)
	}
}

// A message of the same Message-ID that is not this write's (an older
// installation's, a changed write) is not taken for it.
func TestReconcileComparesWhatItFinds(t *testing.T) {
	_, reg := setupWith(t, testmail.Options{Sent: "Sent"}, "")
	if r := do(t, reg, "send", map[string]any{"to": "bob@example.com", "subject": "Your order", "text": "shipped"}, "keep-1"); r.Outcome != connector.OutcomeApplied {
		t.Fatalf("%+v", r.Err)
	}
	st, err := reconcile(t, reg, map[string]any{"to": "carol@example.com", "subject": "Refund", "text": "done"}, "keep-1")
	if st != connector.ReconcileRetry || err == nil || !strings.Contains(err.Error(), "not this write's") {
		t.Fatalf("another message of the same id reconciled as %s (%v)", st, err)
	}
}

// [policy] tool_timeout bounds the whole send: a relay that holds back its
// answer is left when the call's time is up, and the card names the
// Message-ID to look for.
func TestASendEndsWithItsCall(t *testing.T) {
	srv, reg := setupWith(t, testmail.Options{Sent: "Sent"}, "")
	held := srv.Hold()
	m, _ := reg.Method("email", "send")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-held; cancel() }() // the call's time ends while the relay holds its answer
	r := m.Do(ctx, connector.Call{Args: map[string]any{"to": "bob@example.com", "subject": "s", "text": "t"}, IdempotencyKey: "keep-1"})
	if !srv.Holding() {
		t.Fatal("the send waited for the held answer: the call's end did not end it")
	}
	if r.Outcome != connector.OutcomeUncertain || !strings.Contains(r.Err.Message, "tool_timeout") || !strings.Contains(r.Err.Message, "Message-ID <keep.") {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
}

// A private CA (ca_file) and STARTTLS on this machine (Postfix's
// submission port, Dovecot with its certificate); without the CA, the
// certificate is reported as untrusted, for a person, never retried.
func TestPrivateCAAndStartTLS(t *testing.T) {
	srv, reg := setupWith(t, testmail.Options{Sent: "Sent", TLS: true}, "")
	srv.Deliver(t, "alice@example.com", "Hello", "over TLS")
	if got := folder(t, reg, "INBOX"); len(got) != 1 || got[0]["subject"] != "Hello" {
		t.Fatalf("search over STARTTLS: %v", got)
	}
	if r := do(t, reg, "send", map[string]any{"to": "bob@example.com", "subject": "s", "text": "t"}, "keep-1"); r.Outcome != connector.OutcomeApplied || r.Value.(map[string]any)["sentFolder"] != "Sent" {
		t.Fatalf("send over STARTTLS: %v %+v %v", r.Outcome, r.Err, r.Value)
	}
	noCA := strings.Replace(srv.Config(), "ca_file", "# ca_file", 1)
	cfg, err := config.Parse("keep.toml", noCA)
	if err != nil {
		t.Fatal(err)
	}
	reg = connector.NewRegistry(email.New(email.ConfigOf(cfg)))
	for _, method := range []string{"search", "send"} {
		r := do(t, reg, method, map[string]any{"to": "bob@example.com", "subject": "s", "text": "t"}, "keep-2")
		if r.Err == nil || r.Err.Class != kt.ClassPermission || !strings.Contains(r.Err.Message, "not trusted") || !strings.Contains(r.Err.Message, "ca_file") {
			t.Fatalf("%s with a certificate keep does not trust: %+v", method, r.Err)
		}
	}
	if n := len(srv.Sent()); n != 1 {
		t.Fatalf("%d messages sent", n)
	}
}

// Mail as it comes: no Message-ID, other charsets, HTML only, encoded names.
func TestSearchReadsMailAsItComes(t *testing.T) {
	srv, reg := setupWith(t, testmail.Options{Sent: "Sent"}, "")
	srv.DeliverRaw(t, "From: =?iso-8859-1?q?J=FCrgen_M=FCller?= <j@example.com>\r\nTo: keep@example.com\r\nSubject: =?windows-1252?q?Caf=E9_=80?=\r\n"+
		"Content-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nCaf=E9 cr=E8me\r\n")
	srv.DeliverRaw(t, "From: ann@example.com\r\nTo: keep@example.com\r\nSubject: News\r\nMessage-ID: <n1@example.com>\r\n"+
		"Content-Type: text/html; charset=utf-8\r\n\r\n<html><head><style>p{}</style></head><body><p>Hello <b>world</b></p><p>Second&amp;last</p></body></html>\r\n")
	got := folder(t, reg, "INBOX")
	if len(got) != 2 {
		t.Fatalf("%v", got)
	}
	first := got[0]
	if id := str(first["id"]); id == "" || id != str(folder(t, reg, "INBOX")[0]["id"]) {
		t.Fatalf("a message without Message-ID has id %q, not stable", id)
	}
	if first["from"] != "Jürgen Müller <j@example.com>" || first["subject"] != "Café €" || !strings.HasPrefix(str(first["text"]), "Café crème") {
		t.Fatalf("decoded: from %q subject %q text %q", first["from"], first["subject"], first["text"])
	}
	if h := str(got[1]["html"]); !strings.Contains(h, "<b>world</b>") || got[1]["text"] != "Hello world\n\nSecond&last" && got[1]["text"] != "Hello world\nSecond&last" {
		t.Fatalf("HTML only: text %q html %q", got[1]["text"], h)
	}
	// The producer's cursor moves past the message without a Message-ID.
	r := do(t, reg, "search", map[string]any{"max": 1}, "")
	cursor := r.Value.(map[string]any)["lastCursor"]
	next := do(t, reg, "search", map[string]any{"after": cursor}, "").Value.(map[string]any)["$array"].([]any)
	if len(next) != 1 || next[0].(map[string]any)["id"] != "n1@example.com" {
		t.Fatalf("after the first: %v", next)
	}
}

// A reply carries In-Reply-To and References, so it threads.
func TestARepliesThreads(t *testing.T) {
	srv, reg := setupWith(t, testmail.Options{Sent: "Sent"}, "")
	r := do(t, reg, "send", map[string]any{"to": "bob@example.com", "subject": "Re: Order", "text": "ok", "inReplyTo": "n1@example.com"}, "keep-1")
	if r.Outcome != connector.OutcomeApplied {
		t.Fatalf("%+v", r.Err)
	}
	head, _, _ := strings.Cut(srv.Messages()[0], "\r\n\r\n")
	if !strings.Contains(head, "\r\nIn-Reply-To: <n1@example.com>\r\n") || !strings.Contains(head, "\r\nReferences: <n1@example.com>\r\n") {
		t.Fatalf("reply headers:\n%s", head)
	}
	m, _ := reg.Method("email", "send")
	if err := m.Validate(map[string]any{"to": "bob@example.com", "subject": "Re", "text": "x", "inReplyTo": "n1@example.com\r\nBcc: x@y"}); err == nil {
		t.Fatal("a header in inReplyTo was accepted")
	}
}

// An answer holds at most about 8 MiB of texts as JSON, whatever max
// allows: 80 mails of 64 KiB text and 64 KiB HTML (which JSON writes four
// times as long: every < and > is \u003c) come in several searches, each
// saying more until the last, none lost or read twice (issue 40 #7).
func TestASearchAnswerIsBoundedAndSaysMore(t *testing.T) {
	srv, reg := setupWith(t, testmail.Options{Sent: "Sent"}, "")
	text, htm := strings.Repeat("a", email.MaxText), strings.Repeat("<b>", email.MaxText/3)
	for i := 0; i < 80; i++ {
		srv.DeliverRaw(t, fmt.Sprintf("From: ann@example.com\r\nTo: keep@example.com\r\nSubject: Big %d\r\nMessage-ID: <big%d@example.com>\r\nMIME-Version: 1.0\r\n"+
			"Content-Type: multipart/alternative; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n%s\r\n--b\r\nContent-Type: text/html\r\n\r\n%s\r\n--b--\r\n", i, i, text, htm))
	}
	seen := map[string]int{}
	var after any
	for search := 1; ; search++ {
		r := do(t, reg, "search", map[string]any{"max": 500, "after": after}, "")
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		v := r.Value.(map[string]any)
		items := v["$array"].([]any)
		b, _ := json.Marshal(v)
		if len(b) > 9<<20 {
			t.Fatalf("search %d answered %d bytes", search, len(b))
		}
		for _, x := range items {
			m := x.(map[string]any)
			seen[str(m["id"])]++
			if len(str(m["text"])) != email.MaxText {
				t.Fatalf("%s: text of %d bytes", m["id"], len(str(m["text"])))
			}
		}
		if search == 1 && (v["more"] != true || !r.More || len(items) == 0 || len(items) == 80) {
			t.Fatalf("the first search returned %d of 80 mails, more %v", len(items), v["more"])
		}
		if v["more"] != true {
			break
		}
		after = v["lastCursor"]
	}
	if len(seen) != 80 {
		t.Fatalf("%d of 80 mails read", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s read %d times", id, n)
		}
	}
}
