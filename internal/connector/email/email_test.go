package email_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	_ "github.com/keep-run/keep/internal/connector/builtin" // registers the connectors' tables
	"github.com/keep-run/keep/internal/connector/email"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testmail"
)

func setup(t *testing.T, keepsSent bool) (*testmail.Server, *connector.Registry) {
	srv := testmail.Start(t, keepsSent)
	cfg, err := config.Parse("keep.toml", srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return srv, connector.NewRegistry(email.New(email.ConfigOf(cfg)))
}

func do(t *testing.T, reg *connector.Registry, method string, args map[string]any, key string) connector.Result {
	t.Helper()
	m, _ := reg.Method("email", method)
	b, _ := json.Marshal(args)
	args, _ = connector.DecodeArgs(b)
	if err := m.Validate(args); err != nil {
		t.Fatalf("%s refused %v: %v", method, args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return m.Do(ctx, connector.Call{Args: args, IdempotencyKey: key})
}

func reconcile(t *testing.T, reg *connector.Registry, args map[string]any, key string) (connector.ReconcileStatus, error) {
	m, _ := reg.Method("email", "send")
	st, _, err := m.Reconcile(context.Background(), connector.Call{Args: args, IdempotencyKey: key})
	return st, err
}

func TestSearchWithACursor(t *testing.T) {
	srv, reg := setup(t, true)
	srv.Deliver(t, "alice@example.com", "Invoice 1", "first")
	srv.Deliver(t, "bob@example.com", "Hello", "second")
	r := do(t, reg, "search", map[string]any{}, "")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	v := r.Value.(map[string]any)
	items := v["$array"].([]any)
	if len(items) != 2 || items[0].(map[string]any)["subject"] != "Invoice 1" || !strings.HasPrefix(items[0].(map[string]any)["text"].(string), "first") {
		t.Fatalf("%v", v)
	}
	if id := items[0].(map[string]any)["id"].(string); id == "" {
		t.Fatal("no Message-ID to register the input by")
	}
	cursor := v["lastCursor"]
	again := do(t, reg, "search", map[string]any{"after": cursor}, "").Value.(map[string]any)
	if len(again["$array"].([]any)) != 0 || again["lastCursor"] != cursor {
		t.Fatalf("after the cursor: %v", again)
	}
	srv.Deliver(t, "alice@example.com", "Invoice 2", "third")
	next := do(t, reg, "search", map[string]any{"after": cursor, "from": "alice"}, "").Value.(map[string]any)
	if n := next["$array"].([]any); len(n) != 1 || n[0].(map[string]any)["subject"] != "Invoice 2" {
		t.Fatalf("new mail after the cursor: %v", next)
	}
	if r := do(t, reg, "search", map[string]any{"folder": "Nope"}, ""); r.Err == nil || r.Err.Class != kt.ClassLogic {
		t.Fatalf("a folder that does not exist: %+v", r.Err)
	}
}

func TestSendCutAfterDataIsReconciledFromSent(t *testing.T) {
	srv, reg := setup(t, true)
	args := map[string]any{"to": "bob@example.com", "subject": "Your order", "text": "shipped"}
	// Before the server was seen filing a message of keep's, absence proves nothing.
	if st, err := reconcile(t, reg, args, "keep-1"); st != connector.ReconcileRetry || !strings.Contains(err.Error(), "server_keeps_sent") {
		t.Fatalf("reconciled as %s (%v) before the server was seen keeping copies", st, err)
	}
	if r := do(t, reg, "send", map[string]any{"to": "ann@example.com", "subject": "First", "text": "one"}, "keep-0"); r.Outcome != connector.OutcomeApplied || r.Value.(map[string]any)["filedBy"] != "server" {
		t.Fatalf("a first send: %v %+v %v", r.Outcome, r.Err, r.Value)
	}
	if st, err := reconcile(t, reg, args, "keep-1"); st != connector.ReconcileFailed {
		t.Fatalf("reconciled as %s (%v) before sending, where the server keeps copies", st, err)
	}
	srv.CutAfterData(1)
	r := do(t, reg, "send", args, "keep-1")
	if r.Outcome != connector.OutcomeUncertain || r.Err.Class != kt.ClassIndeterminate {
		t.Fatalf("a cut after DATA: %v %+v", r.Outcome, r.Err)
	}
	if st, err := reconcile(t, reg, args, "keep-1"); st != connector.ReconcileApplied {
		t.Fatalf("reconciled as %s (%v) after the server took it", st, err)
	}
	if sent := srv.Sent(); len(sent) != 2 || !strings.HasPrefix(sent[1], "<keep.") {
		t.Fatalf("sent %v", sent)
	}
	r = do(t, reg, "send", map[string]any{"to": "nobody@example.com", "subject": "x", "text": "y"}, "keep-2")
	if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassPrecondition || !strings.Contains(r.Err.Message, "no such user") || !strings.Contains(r.Err.Message, "fix the address") {
		t.Fatalf("a refused recipient is a person's (skip or fix the address): %v %+v", r.Outcome, r.Err)
	}
}

func TestWithoutServerCopiesNotInSentProvesNothing(t *testing.T) {
	srv, reg := setup(t, false)
	args := map[string]any{"to": "bob@example.com", "subject": "Your order", "text": "shipped"}
	if r := do(t, reg, "send", args, "keep-1"); r.Outcome != connector.OutcomeApplied {
		t.Fatalf("%+v", r.Err)
	}
	if st, err := reconcile(t, reg, args, "keep-1"); st != connector.ReconcileApplied {
		t.Fatalf("keep's own copy in Sent was not found: %s %v", st, err)
	}
	srv.CutAfterData(1)
	if r := do(t, reg, "send", args, "keep-2"); r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
	st, err := reconcile(t, reg, args, "keep-2")
	if st != connector.ReconcileRetry || err == nil || !strings.Contains(err.Error(), "keeps no copy") {
		t.Fatalf("a send cut off where the server keeps no copies reconciled as %s (%v); it must not say it did not happen", st, err)
	}
	if n := len(srv.Sent()); n != 2 {
		t.Fatalf("%d messages taken", n)
	}
}

func TestNoServerConfigured(t *testing.T) {
	reg := connector.NewRegistry(email.New(email.Config{}))
	r := do(t, reg, "send", map[string]any{"to": "bob@example.com", "subject": "s", "text": "t"}, "k")
	if r.Err == nil || !strings.Contains(r.Err.Message, "[connectors.email]") {
		t.Fatalf("%+v", r.Err)
	}
}

// An address whose comment holds CR/LF (issue 23 #5) once wrote its own
// Reply-To, a second Message-ID and a body, pushing keep's Message-ID out
// of the headers (reconcile then said "not sent"). Now validation refuses
// it saying why, the connector itself refuses it too, and an address with
// an ordinary comment goes out as the parsed address.
func TestAnAddressCannotInjectHeaders(t *testing.T) {
	srv, reg := setup(t, true)
	m, _ := reg.Method("email", "send")
	evil := "bob@example.com (x\r\nReply-To: evil@attacker.org\r\nMessage-ID: <forged@attacker.org>\r\n\r\nbody)"
	for _, args := range []map[string]any{
		{"to": evil, "subject": "Your order", "text": "shipped"},
		{"to": "bob@example.com", "cc": []any{evil}, "subject": "Your order", "text": "shipped"},
		{"to": "bob@example.com", "subject": "Your order\x00", "text": "shipped"},
	} {
		err := m.Validate(args)
		if err == nil || !strings.Contains(err.Error(), "control character") {
			t.Fatalf("validation of %q: %v; want a refusal naming the control character", args, err)
		}
		// Past validation too: the connector never writes such a header.
		r := m.Do(context.Background(), connector.Call{Args: args, IdempotencyKey: "keep-evil"})
		if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "control character") {
			t.Fatalf("send of %q: %v %+v", args, r.Outcome, r.Err)
		}
	}
	if got := srv.Messages(); len(got) != 0 {
		t.Fatalf("the server took %d messages: %q", len(got), got)
	}
	r := do(t, reg, "send", map[string]any{"to": "bob@example.com (Bob at work)", "cc": "Ann <ann@example.com>", "subject": "Your order", "text": "shipped"}, "keep-1")
	if r.Outcome != connector.OutcomeApplied {
		t.Fatalf("send: %v %+v", r.Outcome, r.Err)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("the server took %d messages", len(msgs))
	}
	head, _, _ := strings.Cut(msgs[0], "\r\n\r\n")
	if !strings.Contains(head, "\r\nTo: \"Bob at work\" <bob@example.com>\r\n") || !strings.Contains(head, "\r\nCc: \"Ann\" <ann@example.com>\r\n") {
		t.Fatalf("the addresses are not written as parsed:\n%s", head)
	}
	if sent := srv.Sent(); len(sent) != 1 || sent[0] != r.Value.(map[string]any)["messageId"] {
		t.Fatalf("the delivered Message-ID %v is not keep's %v", sent, r.Value)
	}
	if st, err := reconcile(t, reg, map[string]any{"to": "bob@example.com (Bob at work)", "cc": "Ann <ann@example.com>", "subject": "Your order", "text": "shipped"}, "keep-1"); st != connector.ReconcileApplied {
		t.Fatalf("reconcile of the sent message: %s %v", st, err)
	}
}
