package email_test

import (
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/connector/email"
	"github.com/keep-run/keep/internal/fake/fault"
	"github.com/keep-run/keep/internal/testmail"
)

// suitePassword is the mailbox's password, shaped as a token package
// redact knows, so that a script quoting it is masked too.
const suitePassword = "ghp_MailSuitePassword0123456789abcdefAB"

// smtpHasNot are package fault's kinds SMTP has no counterpart of.
var smtpHasNot = map[string]string{
	fault.Status429:      "SMTP has no Retry-After: a server limiting the rate answers 4xx (421, 451), transient and nothing sent, as any 4xx to MAIL, RCPT or DATA",
	fault.Status500:      "SMTP's reply to the end of DATA is final (RFC 5321 §4.2.5): a 4xx or 5xx means the message was not taken, never an unknown outcome; the unknown ones are a cut or a held answer after DATA (drop_after_apply, timeout_after_apply)",
	fault.Status503:      "as 500: an SMTP error reply means not taken",
	fault.Status500After: "as 500: an SMTP server that took the message answers 250; one that answers an error did not take it",
}

// email.send passes the connectors' shared suite against testmail's real
// SMTP and IMAP servers (go-smtp, go-imap) with server_keeps_sent: one
// message sent first shows the server filing what it sends, so a message
// not in Sent was not sent.
func TestSuiteSend(t *testing.T) {
	const subject = "Invoice 7"
	connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
		srv := testmail.StartWith(t, testmail.Options{KeepsSent: true, Sent: "Sent", Password: suitePassword})
		cfg, err := config.Parse("keep.toml", srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		reg := connector.NewRegistry(email.New(email.ConfigOf(cfg)))
		if r := do(t, reg, "send", map[string]any{"to": "ann@example.com", "subject": "First", "text": "one"}, "keep-first"); r.Outcome != connector.OutcomeApplied {
			t.Fatalf("the first send: %v %+v", r.Outcome, r.Err)
		}
		return &connectortest.Target{Registry: reg, Tool: "email", Method: "send", Secret: suitePassword, NotApplicable: smtpHasNot,
			Args:    map[string]any{"to": "bob@example.com", "subject": subject, "text": "attached"},
			Changed: map[string]any{"to": "bob@example.com", "subject": subject, "text": "attached again"},
			Applied: func(t *testing.T) int {
				n := 0
				for _, s := range srv.Subjects() {
					if s == subject {
						n++
					}
				}
				return n
			},
			Arm: func(t *testing.T, kind string, _ int) {
				if !srv.QueueKind(kind) {
					t.Fatalf("testmail cannot inject %q", kind)
				}
			}}
	})
}
