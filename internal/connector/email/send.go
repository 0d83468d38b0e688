package email

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// filedHeader marks the copy keep itself files into Sent, so that a copy
// the server filed (without it) shows that server_keeps_sent holds.
const filedHeader = "X-Keep-Filed"

// messageID is a send's Message-ID: the same for every attempt of one
// write. The key is the engine's, mixed with the installation's id, so two
// installations never make the same Message-ID.
func messageID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "<keep." + hex.EncodeToString(sum[:16]) + "@keep.run>"
}

// evidence is what a person looks for to tell whether a send happened:
// its Message-ID, which every attempt of the write shares.
func evidence(call connector.Call) (mark, where string) {
	return "Message-ID " + messageID(call.IdempotencyKey), "in the recipient's mailbox or in Sent"
}

func (c *conn) build(a map[string]any, key string) ([]byte, error) {
	to, _ := list(a["to"])
	cc, _ := list(a["cc"])
	from, err := formatAddresses("from (keep.toml [connectors.email])", []string{c.cfg.From})
	if err != nil {
		return nil, err
	}
	toLine, err := formatAddresses("to", to)
	if err != nil {
		return nil, err
	}
	ccLine, err := formatAddresses("cc", cc)
	if err != nil {
		return nil, err
	}
	if err := oneLine("subject", str(a["subject"])); err != nil {
		return nil, err
	}
	inReplyTo, refs, err := threading(a)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("From", from)
	h("To", toLine)
	if len(cc) > 0 {
		h("Cc", ccLine)
	}
	h("Subject", mime.QEncoding.Encode("utf-8", str(a["subject"])))
	h("Date", time.Now().UTC().Format(time.RFC1123Z))
	h("Message-ID", messageID(key))
	if inReplyTo != "" {
		h("In-Reply-To", inReplyTo)
	}
	if refs != "" {
		h("References", refs)
	}
	h(keyHeader, key)
	h("MIME-Version", "1.0")
	body := func(s string) string {
		var q bytes.Buffer
		w := quotedprintable.NewWriter(&q)
		w.Write([]byte(s))
		w.Close()
		return q.String()
	}
	if html := str(a["html"]); html != "" {
		boundary := "keep-" + hex.EncodeToString([]byte(key))[:16]
		h("Content-Type", `multipart/alternative; boundary="`+boundary+`"`)
		for _, p := range []struct{ typ, s string }{{"text/plain", str(a["text"])}, {"text/html", html}} {
			b.WriteString("\r\n--" + boundary + "\r\nContent-Type: " + p.typ + "; charset=UTF-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n" + body(p.s))
		}
		b.WriteString("\r\n--" + boundary + "--\r\n")
		return []byte(b.String()), nil
	}
	h("Content-Type", "text/plain; charset=UTF-8")
	h("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n" + body(str(a["text"])))
	return []byte(b.String()), nil
}

// threading reads inReplyTo and references: Message-IDs ("<id@host>").
// References defaults to inReplyTo, so a reply threads in every reader.
func threading(a map[string]any) (inReplyTo, refs string, err error) {
	bracket := func(id string) (string, error) {
		if err := oneLine("a Message-ID", id); err != nil {
			return "", err
		}
		bare := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(id), "<"), ">")
		if bare == "" || strings.ContainsAny(bare, "<> ") || !strings.Contains(bare, "@") {
			return "", fmt.Errorf("email.send: %q is not a Message-ID (one like \"abc@mail.example.com\", a message's id from email.search)", id)
		}
		return "<" + bare + ">", nil
	}
	if s := str(a["inReplyTo"]); s != "" {
		if inReplyTo, err = bracket(s); err != nil {
			return "", "", err
		}
	}
	ids, _ := list(a["references"])
	if len(ids) == 0 && inReplyTo != "" {
		ids = []string{inReplyTo}
	}
	for i, id := range ids {
		if ids[i], err = bracket(id); err != nil {
			return "", "", err
		}
	}
	return inReplyTo, strings.Join(ids, " "), nil
}

// dialSMTP connects, says hello and logs in. Nothing of a message has
// gone out yet, so every error here means "not sent". The connection is
// closed when ctx ends ([policy] tool_timeout bounds the whole send:
// go-smtp sets a deadline of its own for each command); stop ends that.
func (c *conn) dialSMTP(ctx context.Context) (cl *smtp.Client, stop func() bool, err error) {
	if c.cfg.SMTP == "" || c.cfg.From == "" {
		return nil, nil, kt.Errorf(kt.ClassLogic, "email.send: set [connectors.email] smtp = \"smtp://user:password@host:587\" and from = \"me@example.com\" in keep.toml")
	}
	u, err := url.Parse(c.cfg.SMTP)
	if err != nil {
		return nil, nil, kt.Errorf(kt.ClassLogic, "email: [connectors.email] smtp: %v", err)
	}
	tc, err := c.tlsConfig(u.Hostname())
	if err != nil {
		return nil, nil, err
	}
	d := &net.Dialer{Timeout: 15 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", withPort(u.Host, u.Scheme == "smtps", "465", "587"))
	if err != nil {
		return nil, nil, kt.Errorf(kt.ClassTransient, "email.send: the SMTP server is unreachable: %v", err)
	}
	stop = context.AfterFunc(ctx, func() { raw.Close() })
	fail := func(e *kt.Error) (*smtp.Client, func() bool, error) {
		stop()
		raw.Close()
		return nil, nil, e
	}
	switch {
	case u.Scheme == "smtps":
		conn := tls.Client(raw, tc)
		if err := conn.HandshakeContext(ctx); err != nil {
			return fail(tlsFailed("SMTP", u.Host, err))
		}
		cl = smtp.NewClient(conn)
	case loopback(u.Hostname()) && !c.cfg.StartTLS:
		// A relay on this machine: no TLS needed (nor, usually, offered).
		cl = smtp.NewClient(raw)
		if err := cl.Hello("keep"); err != nil {
			return fail(smtpErr(ctx, "hello", err))
		}
	default:
		// Credentials never cross a network in the clear: STARTTLS or nothing.
		if cl, err = smtp.NewClientStartTLS(raw, tc); err != nil {
			return fail(tlsFailed("SMTP", u.Host, err))
		}
	}
	if u.User != nil && u.User.Username() != "" {
		pass, _ := u.User.Password()
		if err := cl.Auth(sasl.NewPlainClient("", u.User.Username(), pass)); err != nil {
			cl.Close()
			var se *smtp.SMTPError
			switch {
			case errors.As(err, &se):
				return fail(kt.Errorf(kt.ClassPermission, "email.send: the SMTP server refused the login of %s: %v", u.User.Username(), err))
			case untrusted(err):
				return fail(tlsFailed("SMTP", u.Host, err)) // STARTTLS shakes hands at the first write
			}
			return fail(smtpErr(ctx, "login", err))
		}
	}
	return cl, stop, nil
}

// smtpErr classifies an SMTP error that came before the message's end:
// nothing was sent.
func smtpErr(ctx context.Context, step string, err error) *kt.Error {
	var se *smtp.SMTPError
	if errors.As(err, &se) && se.Code >= 500 {
		return kt.Errorf(kt.ClassLogic, "email.send: the server refused %s: %d %s", step, se.Code, se.Message)
	}
	return kt.Errorf(kt.ClassTransient, "email.send: %s: %v%s", step, err, limitNote(ctx))
}

// limitNote says that the call's time limit cut the conversation.
func limitNote(ctx context.Context) string {
	if ctx.Err() != nil {
		return " (the call's time limit, [policy] tool_timeout, passed, and keep closed the connection)"
	}
	return ""
}

func (c *conn) send(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	what := "email.send to " + addrList(a["to"])
	id := messageID(call.IdempotencyKey)
	failed := func(e *kt.Error) connector.Result { return connector.Result{Outcome: connector.OutcomeFailed, Err: e} }
	msg, err := c.build(a, call.IdempotencyKey)
	if err != nil {
		return failed(kt.Errorf(kt.ClassLogic, "%v", err))
	}
	cl, stop, err := c.dialSMTP(ctx)
	if err != nil {
		return failed(asKt(err))
	}
	defer stop()
	defer cl.Close()
	if err := cl.Mail(c.cfg.From, nil); err != nil {
		e := smtpErr(ctx, "the sender "+c.cfg.From, err)
		if e.Class == kt.ClassLogic {
			e.Class, e.Message = kt.ClassPermission, e.Message+"; nothing was sent. The sender is keep.toml's [connectors.email] from: the server must let this login send as it"
		}
		return failed(e)
	}
	to, _ := list(a["to"])
	cc, _ := list(a["cc"])
	for _, rcpt := range append(to, cc...) {
		addr, _ := mail.ParseAddress(rcpt)
		if err := cl.Rcpt(addr.Address, nil); err != nil {
			e := smtpErr(ctx, "the recipient "+addr.Address, err)
			if e.Class == kt.ClassLogic {
				// The address, not the script: a person skips this message or fixes the address.
				e.Class, e.Message = kt.ClassPrecondition, e.Message+"; nothing was sent. Skip this message, or fix the address where it comes from and retry"
			}
			return failed(e)
		}
	}
	w, err := cl.Data()
	if err != nil {
		return failed(smtpErr(ctx, "DATA", err))
	}
	if _, err := w.Write(msg); err != nil {
		// The end of the message (the lone dot) never went out: a server
		// never delivers a message it did not get whole.
		return failed(kt.Errorf(kt.ClassTransient, "%s was not sent: the connection broke while sending it (%v)%s", what, err, limitNote(ctx)))
	}
	if err := w.Close(); err != nil {
		var se *smtp.SMTPError
		if errors.As(err, &se) {
			class := kt.ClassTransient
			if se.Code >= 500 {
				class = kt.ClassLogic
			}
			return failed(kt.Errorf(class, "%s: the server refused the message: %d %s", what, se.Code, se.Message))
		}
		return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate,
			"%s: the message went out but the server's answer did not come back (%v)%s; it may have been sent: look for Message-ID %s in the recipient's mailbox or in Sent", what, err, limitNote(ctx), id)}
	}
	cl.Quit()
	stop()
	return connector.Result{Outcome: connector.OutcomeApplied, Value: c.file(ctx, msg, id)}
}

// file makes sure a copy of the sent message is in the Sent folder, where
// reconcile looks: the server's own copy (server_keeps_sent, looked for)
// or one keep files. The message is sent either way; the result says
// where it was filed, or why it was not.
func (c *conn) file(ctx context.Context, msg []byte, id string) map[string]any {
	out := map[string]any{"messageId": id}
	cl, err := c.dialIMAP(ctx)
	if err != nil {
		out["notFiled"] = fmt.Sprintf("sent, but not filed into Sent: %v", err)
		return out
	}
	defer cl.Close()
	folder, err := c.sentFolder(cl, true)
	if err == nil && c.cfg.ServerKeepsSent {
		if n, ferr := c.count(cl, folder, imap.SearchCriteriaHeaderField{Key: "Message-ID", Value: id}); ferr == nil && n > 0 {
			out["sentFolder"], out["filedBy"] = folder, "server"
			return out
		}
	}
	if err == nil {
		err = appendTo(cl, folder, append([]byte(filedHeader+": keep\r\n"), msg...))
	}
	if err != nil {
		out["notFiled"] = fmt.Sprintf("sent, but not filed into Sent: %v", err)
		return out
	}
	out["sentFolder"], out["filedBy"] = folder, "keep"
	return out
}

// appendTo files a message; a folder the server says to create first
// (NO [TRYCREATE]) is created and the APPEND tried once more.
func appendTo(cl *imapclient.Client, folder string, msg []byte) error {
	for try := 0; ; try++ {
		cmd := cl.Append(folder, int64(len(msg)), &imap.AppendOptions{Flags: []imap.Flag{imap.FlagSeen}})
		_, werr := cmd.Write(msg)
		cerr := cmd.Close()
		_, err := cmd.Wait()
		if err == nil {
			err = errors.Join(werr, cerr)
		}
		if err == nil {
			return nil
		}
		if try > 0 || imapCode(err) != imap.ResponseCodeTryCreate {
			return fmt.Errorf("APPEND to %q: %v", folder, err)
		}
		if err := cl.Create(folder, nil).Wait(); err != nil {
			return fmt.Errorf("the server asked to create %q first, and refused: %v", folder, err)
		}
	}
}

// sentFolder finds the Sent folder: keep.toml's sent_folder, else the
// folder marked \Sent (SPECIAL-USE), else one of the usual names; with
// create, "Sent" is created when there is none (stock Dovecot has none).
// Without create, "" means there is none.
func (c *conn) sentFolder(cl *imapclient.Client, create bool) (string, error) {
	if c.cfg.SentFolder != "" {
		return c.cfg.SentFolder, nil
	}
	boxes, err := cl.List("", "*", &imap.ListOptions{ReturnSpecialUse: cl.Caps().Has(imap.CapSpecialUse)}).Collect()
	if err != nil {
		return "", fmt.Errorf("list the folders: %v", err)
	}
	byName := map[string]string{}
	for _, b := range boxes {
		for _, attr := range b.Attrs {
			if attr == imap.MailboxAttrSent {
				return b.Mailbox, nil
			}
		}
		byName[strings.ToLower(b.Mailbox)] = b.Mailbox
	}
	for _, n := range []string{"sent", "inbox.sent", "sent items", "sent messages", "inbox/sent"} {
		if name, ok := byName[n]; ok {
			return name, nil
		}
	}
	if !create {
		return "", nil
	}
	var opts *imap.CreateOptions
	if cl.Caps().Has(imap.CapCreateSpecialUse) {
		opts = &imap.CreateOptions{SpecialUse: []imap.MailboxAttr{imap.MailboxAttrSent}}
	}
	if err := cl.Create("Sent", opts).Wait(); err != nil && imapCode(err) != imap.ResponseCodeAlreadyExists {
		return "", fmt.Errorf("there is no Sent folder, and creating one was refused: %v", err)
	}
	return "Sent", nil
}

// count is how many messages of folder match every header field.
func (c *conn) count(cl *imapclient.Client, folder string, fields ...imap.SearchCriteriaHeaderField) (int, error) {
	if _, err := cl.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
		return 0, fmt.Errorf("the Sent folder %q: %v", folder, err)
	}
	found, err := cl.UIDSearch(&imap.SearchCriteria{Header: fields}, nil).Wait()
	if err != nil {
		return 0, fmt.Errorf("search %q: %v", folder, err)
	}
	return len(found.AllUIDs()), nil
}

// serverFiles reports whether Sent holds a message keep sent that the
// server filed (keep's key, without keep's filing mark): then the server
// keeps copies, and "not in Sent" means "not sent".
func serverFiles(cl *imapclient.Client, folder string) (bool, error) {
	if _, err := cl.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
		return false, err
	}
	found, err := cl.UIDSearch(&imap.SearchCriteria{Header: []imap.SearchCriteriaHeaderField{{Key: keyHeader, Value: ""}},
		Not: []imap.SearchCriteria{{Header: []imap.SearchCriteriaHeaderField{{Key: filedHeader, Value: ""}}}}}, nil).Wait()
	if err != nil {
		return false, err
	}
	return len(found.AllUIDs()) > 0, nil
}

func (c *conn) reconcile(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
	id := messageID(call.IdempotencyKey)
	cl, err := c.dialIMAP(ctx)
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	defer cl.Close()
	folder, err := c.sentFolder(cl, false)
	if err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("email.send's reconcile: %v", err)
	}
	if folder != "" {
		st, v, err := c.lookIn(cl, folder, id, call.Args)
		if st != "" || err != nil {
			return st, v, err
		}
	}
	look := fmt.Sprintf("look for Message-ID %s in the recipient's mailbox", id)
	switch {
	case !c.cfg.ServerKeepsSent:
		return connector.ReconcileRetry, nil, fmt.Errorf("the message is not in Sent (%q), but this server keeps no copy of what it sends (server_keeps_sent is false), so that does not prove it was not sent: %s", folder, look)
	case folder == "":
		return connector.ReconcileRetry, nil, fmt.Errorf("the mailbox has no Sent folder, so server_keeps_sent = true cannot hold: %s", look)
	}
	shown, err := serverFiles(cl, folder)
	if err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("email.send's reconcile: search %q: %v", folder, err)
	}
	if !shown {
		return connector.ReconcileRetry, nil, fmt.Errorf("the message is not in %s, and keep.toml says the server files what it sends (server_keeps_sent = true), but no message keep sent was ever filed there by the server, so its absence proves nothing: %s", folder, look)
	}
	return connector.ReconcileFailed, nil, nil
}

// lookIn searches folder for the Message-ID and compares what it finds
// with what this write sends (recipients, subject): a message of the
// same id that is not this write's (another installation's, a changed
// write) never counts as it. "" means not found.
func (c *conn) lookIn(cl *imapclient.Client, folder, id string, a map[string]any) (connector.ReconcileStatus, any, error) {
	if _, err := cl.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("email.send's reconcile: the Sent folder %q: %v", folder, err)
	}
	found, err := cl.UIDSearch(&imap.SearchCriteria{Header: []imap.SearchCriteriaHeaderField{{Key: "Message-ID", Value: id}}}, nil).Wait()
	if err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("email.send's reconcile: search %q: %v", folder, err)
	}
	uids := found.AllUIDs()
	if len(uids) == 0 {
		return "", nil, nil
	}
	msgs, err := cl.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, Envelope: true}).Collect()
	if err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("email.send's reconcile: fetch from %q: %v", folder, err)
	}
	wantTo, wantSubject := recipients(a), str(a["subject"])
	var seen []string
	for _, m := range msgs {
		if m.Envelope == nil {
			continue
		}
		got := envelopeRecipients(m.Envelope)
		if got == wantTo && m.Envelope.Subject == wantSubject {
			return connector.ReconcileApplied, map[string]any{"messageId": id, "sentFolder": folder, "reconciled": true}, nil
		}
		seen = append(seen, fmt.Sprintf("to %s, subject %q", got, m.Envelope.Subject))
	}
	return connector.ReconcileRetry, nil, fmt.Errorf("%s holds a message with Message-ID %s, but %s, not this write's (to %s, subject %q): it is not this send; look in the recipient's mailbox",
		folder, id, strings.Join(seen, "; "), wantTo, wantSubject)
}

// recipients is the write's To and Cc as a sorted list of addresses.
func recipients(a map[string]any) string {
	to, _ := list(a["to"])
	cc, _ := list(a["cc"])
	var out []string
	for _, r := range append(to, cc...) {
		if addr, err := mail.ParseAddress(r); err == nil {
			out = append(out, strings.ToLower(addr.Address))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func envelopeRecipients(e *imap.Envelope) string {
	var out []string
	for _, a := range append(append([]imap.Address(nil), e.To...), e.Cc...) {
		out = append(out, strings.ToLower(a.Addr()))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
