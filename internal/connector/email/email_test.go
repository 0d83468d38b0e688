package email_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
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
	return srv, connector.NewRegistry(email.New(cfg.Email))
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
	if st, _ := reconcile(t, reg, args, "keep-1"); st != connector.ReconcileFailed {
		t.Fatalf("reconciled as %s before sending", st)
	}
	srv.CutAfterData(1)
	r := do(t, reg, "send", args, "keep-1")
	if r.Outcome != connector.OutcomeUncertain || r.Err.Class != kt.ClassIndeterminate {
		t.Fatalf("a cut after DATA: %v %+v", r.Outcome, r.Err)
	}
	if st, err := reconcile(t, reg, args, "keep-1"); st != connector.ReconcileApplied {
		t.Fatalf("reconciled as %s (%v) after the server took it", st, err)
	}
	if sent := srv.Sent(); len(sent) != 1 || !strings.HasPrefix(sent[0], "<keep.") {
		t.Fatalf("sent %v", sent)
	}
	r = do(t, reg, "send", map[string]any{"to": "nobody@example.com", "subject": "x", "text": "y"}, "keep-2")
	if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "no such user") {
		t.Fatalf("a refused recipient: %v %+v", r.Outcome, r.Err)
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
	reg := connector.NewRegistry(email.New(config.Email{}))
	r := do(t, reg, "send", map[string]any{"to": "bob@example.com", "subject": "s", "text": "t"}, "k")
	if r.Err == nil || !strings.Contains(r.Err.Message, "[connectors.email]") {
		t.Fatalf("%+v", r.Err)
	}
}
