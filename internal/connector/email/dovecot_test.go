package email_test

import (
	"strings"
	"testing"

	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/email"
	"github.com/keep-run/keep/internal/testmail"
)

// Against Debian's Dovecot itself (with testmail's SMTP server, which like
// Postfix files nothing into Sent): a mailbox without Sent gets one and
// keep's copy in it; reconcile finds it; server_keeps_sent = true is not
// trusted on the word; mail without a Message-ID and in Latin-1 is read.
func TestAgainstDovecot(t *testing.T) {
	imapAddr := testmail.Dovecot(t)
	smtpSrv := testmail.StartWith(t, testmail.Options{})
	conf := strings.Replace(smtpSrv.Config(), smtpSrv.IMAPAddr, imapAddr, 1)
	reg := func(keepsSent bool) *connector.Registry {
		c := conf
		if keepsSent {
			c = strings.Replace(c, "server_keeps_sent = false", "server_keeps_sent = true", 1)
		}
		cfg, err := config.Parse("keep.toml", c)
		if err != nil {
			t.Fatal(err)
		}
		return connector.NewRegistry(email.New(email.ConfigOf(cfg)))
	}
	r := reg(false)
	appendRaw(t, imapAddr, "INBOX", "From: =?iso-8859-1?q?J=FCrgen?= <j@example.com>\r\nTo: keep@example.com\r\nSubject: Caf=?iso-8859-1?q?=E9?=\r\n"+
		"Content-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nCaf=E9\r\n")
	got := folder(t, r, "INBOX")
	if len(got) != 1 || str(got[0]["id"]) == "" || got[0]["from"] != "Jürgen <j@example.com>" || !strings.HasPrefix(str(got[0]["text"]), "Café") {
		t.Fatalf("INBOX: %v", got)
	}
	args := map[string]any{"to": "bob@example.com", "subject": "Your order", "text": "shipped"}
	res := do(t, r, "send", args, "keep-1")
	if v := res.Value.(map[string]any); res.Outcome != connector.OutcomeApplied || v["sentFolder"] != "Sent" || v["filedBy"] != "keep" {
		t.Fatalf("send: %v %+v %v", res.Outcome, res.Err, res.Value)
	}
	if st, err := reconcile(t, r, args, "keep-1"); st != connector.ReconcileApplied {
		t.Fatalf("reconcile of a filed send: %s %v", st, err)
	}
	smtpSrv.CutAfterData(1)
	trusting := reg(true)
	if res := do(t, trusting, "send", args, "keep-2"); res.Outcome != connector.OutcomeUncertain {
		t.Fatalf("cut after DATA: %v %+v", res.Outcome, res.Err)
	}
	if st, err := reconcile(t, trusting, args, "keep-2"); st != connector.ReconcileRetry || !strings.Contains(err.Error(), "<keep.") {
		t.Fatalf("a message the server took and nobody filed reconciled as %s (%v)", st, err)
	}
}

func appendRaw(t *testing.T, addr, mailbox, msg string) {
	t.Helper()
	cl, err := imapclient.DialInsecure(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Login(testmail.User, testmail.Password).Wait(); err != nil {
		t.Fatal(err)
	}
	cmd := cl.Append(mailbox, int64(len(msg)), nil)
	cmd.Write([]byte(msg))
	cmd.Close()
	if _, err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}
