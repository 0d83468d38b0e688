package email_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"mime"
	"strings"
	"testing"

	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/email"
	kt "github.com/keep-run/keep/internal/keeptype"
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

// imapDo logs in to the IMAP server at addr and runs f.
func imapDo(t *testing.T, addr string, f func(cl *imapclient.Client)) {
	t.Helper()
	cl, err := imapclient.DialInsecure(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Login(testmail.User, testmail.Password).Wait(); err != nil {
		t.Fatal(err)
	}
	f(cl)
}

// rebuild deletes a folder and makes it again with the same messages, as
// a move to another server or a restore does: Dovecot gives it a new
// UIDVALIDITY, and every message a new UID.
func rebuild(t *testing.T, addr, mailbox string, msgs ...string) {
	t.Helper()
	imapDo(t, addr, func(cl *imapclient.Client) {
		cl.Delete(mailbox).Wait() // absent the first time
		if err := cl.Create(mailbox, nil).Wait(); err != nil {
			t.Fatal(err)
		}
	})
	for _, m := range msgs {
		appendRaw(t, addr, mailbox, m)
	}
}

func dovecotRegistry(t *testing.T, imapAddr string) (*testmail.Server, *connector.Registry) {
	t.Helper()
	smtpSrv := testmail.StartWith(t, testmail.Options{})
	cfg, err := config.Parse("keep.toml", strings.Replace(smtpSrv.Config(), smtpSrv.IMAPAddr, imapAddr, 1))
	if err != nil {
		t.Fatal(err)
	}
	return smtpSrv, connector.NewRegistry(email.New(email.ConfigOf(cfg)))
}

// noID is a mail without a Message-ID, as a script or an old mailer sends
// it; n makes its Received line (its delivery) its own.
func noID(n int, subject string) string {
	return fmt.Sprintf("Received: from mx.example.com by mail.example.com with ESMTP id Q%04d; Mon, 2 Mar 2026 10:00:%02d +0000\r\n"+
		"From: alerts@example.com\r\nTo: keep@example.com\r\nDate: Mon, 2 Mar 2026 10:00:00 +0000\r\nSubject: %s\r\n\r\nDisk full\r\n", n, n%60, subject)
}

// A message without a Message-ID has the same id after its folder is
// rebuilt (new UIDVALIDITY, new UIDs), and two deliveries of the same
// text have two ids (issue 40 #5).
func TestAMessageWithoutMessageIDKeepsItsIDAcrossARebuild(t *testing.T) {
	imapAddr := testmail.Dovecot(t)
	_, reg := dovecotRegistry(t, imapAddr)
	msgs := []string{noID(1, "Alert"), noID(2, "Alert")}
	rebuild(t, imapAddr, "Alerts", msgs...)
	first := do(t, reg, "search", map[string]any{"folder": "Alerts"}, "").Value.(map[string]any)
	rebuild(t, imapAddr, "Alerts", msgs...)
	second := do(t, reg, "search", map[string]any{"folder": "Alerts"}, "").Value.(map[string]any)
	v1, _, _ := strings.Cut(str(first["lastCursor"]), ":")
	v2, _, _ := strings.Cut(str(second["lastCursor"]), ":")
	if v1 == v2 {
		t.Fatalf("the rebuild kept UIDVALIDITY %s: it tests nothing", v1)
	}
	ids := func(v map[string]any) []string {
		var out []string
		for _, x := range v["$array"].([]any) {
			out = append(out, str(x.(map[string]any)["id"]))
		}
		return out
	}
	a, b := ids(first), ids(second)
	if len(a) != 2 || len(b) != 2 || a[0] != b[0] || a[1] != b[1] {
		t.Fatalf("ids before the rebuild %v, after %v: a message answered before would be answered again", a, b)
	}
	if a[0] == a[1] || !strings.HasPrefix(a[0], "no-message-id.") {
		t.Fatalf("two deliveries share id %q: the second would never be answered", a[0])
	}
}

// email.search lists attachments (name, type, size, ref) without reading
// them; email.attachment reads one by its ref, bounded by max; a ref of a
// folder rebuilt since is refused (issue 40 #7).
func TestAttachmentsAreListedAndReadByRef(t *testing.T) {
	imapAddr := testmail.Dovecot(t)
	_, reg := dovecotRegistry(t, imapAddr)
	pdf := bytes.Repeat([]byte("%PDF-1.7 keep\x00\xff"), 200_000) // 3.2 MB, binary
	msg := withAttachment("Invoice 7", "Please find the invoice attached.", "Rechnung März.pdf", "application/pdf", pdf)
	rebuild(t, imapAddr, "Invoices", msg)
	got := folder(t, reg, "Invoices")
	if len(got) != 1 || !strings.HasPrefix(str(got[0]["text"]), "Please find the invoice attached.") {
		t.Fatalf("search: %v", got)
	}
	atts, _ := got[0]["attachments"].([]any)
	if len(atts) != 1 {
		t.Fatalf("attachments: %v", got[0]["attachments"])
	}
	at := atts[0].(map[string]any)
	size, _ := at["size"].(int64)
	if at["name"] != "Rechnung März.pdf" || at["type"] != "application/pdf" || size < int64(len(pdf))-64 || size > int64(len(pdf))+64 {
		t.Fatalf("the attachment is listed as %v; it is %d bytes", at, len(pdf))
	}
	r := do(t, reg, "attachment", map[string]any{"ref": at["ref"]}, "")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	v := r.Value.(map[string]any)
	b, err := base64.StdEncoding.DecodeString(str(v["base64"]))
	if err != nil || !bytes.Equal(b, pdf) || v["name"] != "Rechnung März.pdf" || v["size"] != int64(len(pdf)) {
		t.Fatalf("read %d bytes (%v), name %v size %v; want the %d bytes attached", len(b), err, v["name"], v["size"], len(pdf))
	}
	r = do(t, reg, "attachment", map[string]any{"ref": at["ref"], "max": 1 << 20}, "")
	if r.Err == nil || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "over max 1048576") {
		t.Fatalf("an attachment over max: %+v", r.Err)
	}
	m, _ := reg.Method("email", "attachment")
	for _, bad := range []map[string]any{{"ref": "Rechnung.pdf"}, {}, {"ref": at["ref"], "max": 11 << 20}} {
		if err := m.Validate(bad); err == nil {
			t.Fatalf("email.attachment(%v) was accepted", bad)
		}
	}
	rebuild(t, imapAddr, "Invoices", msg)
	r = do(t, reg, "attachment", map[string]any{"ref": at["ref"]}, "")
	if r.Err == nil || r.Err.Class != kt.ClassPrecondition || !strings.Contains(r.Err.Message, "search again") {
		t.Fatalf("a ref of a folder rebuilt since: %+v", r.Err)
	}
}

// withAttachment is a multipart/mixed message: a text and one attachment,
// base64 in lines of 76 as mailers write it.
func withAttachment(subject, text, name, typ string, data []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "From: shop@example.com\r\nTo: keep@example.com\r\nSubject: %s\r\nMessage-ID: <%s@example.com>\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n%s\r\n--b1\r\n"+
		"Content-Type: %s\r\nContent-Disposition: attachment; filename=\"%s\"\r\nContent-Transfer-Encoding: base64\r\n\r\n",
		subject, strings.ReplaceAll(subject, " ", "."), text, typ, mime.QEncoding.Encode("utf-8", name))
	enc := base64.StdEncoding.EncodeToString(data)
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\r\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\r\n--b1--\r\n")
	return b.String()
}

// One odd attachment stops no mailbox: a part in a transfer encoding
// Dovecot cannot decode (x-uuencode: BINARY.SIZE answers NO
// [UNKNOWN-CTE]) is listed with an estimated size, and the mail beside it
// is read.
func TestAnAttachmentInAnUnknownEncodingIsListed(t *testing.T) {
	imapAddr := testmail.Dovecot(t)
	_, reg := dovecotRegistry(t, imapAddr)
	odd := "From: old@example.com\r\nTo: keep@example.com\r\nSubject: Old mailer\r\nMessage-ID: <old1@example.com>\r\nMIME-Version: 1.0\r\n" +
		"Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nSee attached.\r\n--b\r\n" +
		"Content-Type: application/octet-stream; name=\"a.bin\"\r\nContent-Transfer-Encoding: x-uuencode\r\n\r\nbegin 644 a.bin\r\n#86)C\r\n`\r\nend\r\n--b--\r\n"
	rebuild(t, imapAddr, "Old", odd, withAttachment("Next", "hello", "n.txt", "text/csv", []byte("a,b\n")))
	got := folder(t, reg, "Old")
	if len(got) != 2 || str(got[0]["text"]) == "" || got[1]["subject"] != "Next" {
		t.Fatalf("search: %v", got)
	}
	atts := got[0]["attachments"].([]any)
	if len(atts) != 1 || atts[0].(map[string]any)["name"] != "a.bin" {
		t.Fatalf("the odd attachment: %v", atts)
	}
	if a := got[1]["attachments"].([]any); len(a) != 1 || a[0].(map[string]any)["size"] != int64(4) {
		t.Fatalf("the attachment beside it: %v", a)
	}
}
