package email_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/email"
	"github.com/keep-run/keep/internal/testmail"
)

// Against Debian's Postfix (as the SMTP relay) and Dovecot (the mailbox):
// email.send through Postfix arrives once; server_keeps_sent = true is not
// trusted, since Postfix files nothing: keep's copy is what is in Sent.
func TestAgainstPostfix(t *testing.T) {
	imapAddr := testmail.Dovecot(t)
	pf := testmail.StartPostfix(t, false)
	r := postfixRegistry(t, imapAddr, pf, "")
	args := map[string]any{"to": "bob@example.com", "subject": "Your order", "text": "shipped"}
	res := do(t, r, "send", args, "keep-pf-1")
	v, _ := res.Value.(map[string]any)
	if res.Outcome != connector.OutcomeApplied || v["sentFolder"] != "Sent" || v["filedBy"] != "keep" {
		t.Fatalf("send through Postfix: %v %+v %v\n%s", res.Outcome, res.Err, res.Value, pf.Log())
	}
	id := str(v["messageId"])
	got := pf.WaitDelivered(t, 1)
	if !strings.Contains(got[0], "Message-ID: "+id) || !strings.Contains(got[0], "Subject: Your order") {
		t.Fatalf("Postfix delivered %q, not the message %s", got[0], id)
	}
	sent := folder(t, r, "Sent")
	if len(sent) != 1 || sent[0]["subject"] != "Your order" {
		t.Fatalf("Sent after a send through Postfix with server_keeps_sent = true: %v", sent)
	}
	if st, err := reconcile(t, r, args, "keep-pf-1"); st != connector.ReconcileApplied {
		t.Fatalf("reconcile of a send through Postfix: %s %v", st, err)
	}
	// Nothing more arrived: the send went once.
	if got := pf.Delivered(t); len(got) != 1 {
		t.Fatalf("Postfix delivered %d messages for one send", len(got))
	}
}

// Postfix requiring STARTTLS on loopback: with starttls and ca_file keep
// sends over TLS; without them Postfix refuses and nothing is sent.
func TestAgainstPostfixSTARTTLS(t *testing.T) {
	imapAddr := testmail.Dovecot(t)
	pf := testmail.StartPostfix(t, true)
	args := map[string]any{"to": "bob@example.com", "subject": "Over TLS", "text": "sealed"}
	plain := postfixRegistry(t, imapAddr, pf, "")
	if res := do(t, plain, "send", args, "keep-pf-plain"); res.Outcome != connector.OutcomeFailed || res.Err == nil || !strings.Contains(res.Err.Error(), "STARTTLS") {
		t.Fatalf("send in the clear to a Postfix that requires STARTTLS: %v %+v", res.Outcome, res.Err)
	}
	r := postfixRegistry(t, imapAddr, pf, fmt.Sprintf("starttls = true\nca_file = %q\n", pf.CAFile))
	if res := do(t, r, "send", args, "keep-pf-tls"); res.Outcome != connector.OutcomeApplied {
		t.Fatalf("send over STARTTLS: %v %+v\n%s", res.Outcome, res.Err, pf.Log())
	}
	got := pf.WaitDelivered(t, 1)
	// Postfix's Received line says ESMTPS: the message came over TLS.
	if len(got) != 1 || !strings.Contains(got[0], "Subject: Over TLS") || !strings.Contains(got[0], "with ESMTPS") {
		t.Fatalf("Postfix delivered %q", got)
	}
}

// postfixRegistry is keep's email connector with Dovecot as the mailbox
// and Postfix as the relay (on loopback, no login), server_keeps_sent =
// true, plus extra lines of configuration.
func postfixRegistry(t *testing.T, imapAddr string, pf *testmail.Postfix, extra string) *connector.Registry {
	t.Helper()
	conf := fmt.Sprintf("[connectors.email]\nimap = \"imap://%s:%s@%s\"\nsmtp = \"smtp://%s\"\nfrom = %q\nserver_keeps_sent = true\n%s",
		"keep%40example.com", testmail.Password, imapAddr, pf.Addr, testmail.User, extra)
	cfg, err := config.Parse("keep.toml", conf)
	if err != nil {
		t.Fatal(err)
	}
	return connector.NewRegistry(email.New(email.ConfigOf(cfg)))
}
