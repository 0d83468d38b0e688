// Package email is the email connector for any mailbox that is not Gmail:
// search over IMAP (github.com/emersion/go-imap/v2), send over SMTP
// (github.com/emersion/go-smtp). A send's Message-ID is made from the
// write's idempotency key, so reconcile can look for it in the Sent folder.
//
// It may import keeptype, config and connector.
package email

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// keyHeader carries a sent message's idempotency key.
const keyHeader = "X-Keep-Idempotency-Key"

// MaxText bounds the text of a message handed to a script.
const MaxText = 64 << 10

type conn struct{ cfg config.Email }

// New returns the email connector for the mailbox of [connectors.email].
func New(cfg config.Email) *connector.Connector {
	c := &conn{cfg: cfg}
	return &connector.Connector{
		Name: "email",
		Doc: "Any mailbox over IMAP (reading) and SMTP (sending), set in keep.toml: `[connectors.email] imap = \"imaps://user:password@host:993\"`, " +
			"`smtp = \"smtp://user:password@host:587\"` (STARTTLS when offered; `smtps://` for TLS), `from = \"me@example.com\"`, `sent_folder = \"Sent\"`, " +
			"and `server_keeps_sent = true` when the SMTP server files a copy of what it sends into the Sent folder itself (Gmail, Exchange, Fastmail do). Credentials stay in keep.toml.",
		Sources: map[string][]string{"email": {"message"}},
		Methods: map[string]*connector.Method{
			"search": {Name: "search", Kind: connector.KindRead, Validate: validateSearch, Do: c.search, Doc: connector.MethodDoc{
				Summary: "Lists messages of a folder, oldest first.",
				Params: []connector.Param{
					{Name: "folder", Type: "string", Doc: "the folder (default `INBOX`)"},
					{Name: "after", Type: "string", Doc: "a cursor: a previous result's `lastCursor`; only messages that arrived after it come back"},
					{Name: "from", Type: "string", Doc: "only messages whose From contains this"},
					{Name: "subject", Type: "string", Doc: "only messages whose Subject contains this"},
					{Name: "unseen", Type: "boolean", Doc: "only unread messages"},
					{Name: "max", Type: "number", Doc: "at most this many, 1 to 500 (default 100)"},
				},
				Result: "an array of `{ id, uid, from, to, subject, date, text }` (`id` the Message-ID: register inputs by it; `text` the plain body, at most 64 KiB) with a property `lastCursor` to pass as the next `after`",
				Errors: "a folder that does not exist: logic; login refused: permission; the server unreachable: transient.",
			}},
			"send": {Name: "send", Kind: connector.KindMutate, Identity: []string{"to"}, Validate: validateSend, Do: c.send,
				Reconcile: c.reconcile, ComparePayload: connector.ComparePayloadOf("subject", "text", "html", "cc"), Target: func(a map[string]any) string { return "email.send to " + addrList(a["to"]) },
				Doc: connector.MethodDoc{
					Summary: "Sends a message over SMTP from `from`. Its Message-ID is made from the write's idempotency key (the same for every attempt of the same write) and the key travels in `X-Keep-Idempotency-Key`. Unless the server keeps sent copies, keep files one into the Sent folder after sending.",
					Params: []connector.Param{
						{Name: "to", Type: "string or array of strings", Required: true, Doc: "recipients (identity)"},
						{Name: "subject", Type: "string", Required: true, Doc: "the subject"},
						{Name: "text", Type: "string", Required: true, Doc: "the plain-text body"},
						{Name: "html", Type: "string", Doc: "an HTML body sent beside the text"},
						{Name: "cc", Type: "string or array of strings", Doc: "copies"},
						{Name: "subkey", Type: "string", Doc: "tells apart two sends of one run to the same recipients"},
					},
					Result: "`{ messageId }`; a reconciled send adds `reconciled: true`",
					Reconcile: "searches the Sent folder for the Message-ID. Found means sent. Not found means not sent only where the server keeps a copy of everything it sends (`server_keeps_sent = true`); " +
						"elsewhere keep cannot tell (it files its own copy after sending, and a send cut off before that leaves none), and a person decides.",
					Errors: "a recipient or sender refused (5xx): logic, nothing sent; 4xx and a server unreachable before the message went out: transient; the connection lost after the message's end was sent: unknown, settled by reconcile.",
				}},
		},
	}
}

func str(v any) string { s, _ := v.(string); return s }

func list(v any) ([]string, bool) {
	switch t := v.(type) {
	case nil:
		return nil, true
	case string:
		return []string{t}, true
	case []any:
		var out []string
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func addrList(v any) string { l, _ := list(v); return strings.Join(l, ", ") }

func validateSearch(a map[string]any) error {
	for _, k := range []string{"folder", "after", "from", "subject"} {
		if v, ok := a[k]; ok && v != nil {
			if _, isStr := v.(string); !isStr {
				return fmt.Errorf("email.search: %s must be a string", k)
			}
		}
	}
	if v, ok := a["after"].(string); ok && v != "" {
		if _, _, err := parseCursor(v); err != nil {
			return err
		}
	}
	if m, ok := a["max"]; ok && m != nil {
		if f, isNum := m.(float64); !isNum || f < 1 || f > 500 {
			return fmt.Errorf("email.search: max must be a number from 1 to 500")
		}
	}
	return nil
}

func validateSend(a map[string]any) error {
	if strings.TrimSpace(str(a["subject"])) == "" || strings.ContainsAny(str(a["subject"]), "\r\n") {
		return fmt.Errorf("email.send needs subject: one line of text")
	}
	if err := oneLine("subject", str(a["subject"])); err != nil {
		return err
	}
	if _, ok := a["text"].(string); !ok {
		return fmt.Errorf("email.send needs text (the plain-text body, a string)")
	}
	for _, k := range []string{"to", "cc"} {
		l, ok := list(a[k])
		if !ok || (k == "to" && len(l) == 0) {
			return fmt.Errorf("email.send: %s must be an address or an array of addresses", k)
		}
		if _, err := formatAddresses(k, l); err != nil {
			return err
		}
	}
	return nil
}

// oneLine refuses a header value holding a control character: a line
// break would end the header early and start one of the sender's choosing
// (a Reply-To, a second Message-ID, a body), even inside an address's
// comment, which net/mail accepts.
func oneLine(field, v string) error {
	if i := strings.IndexFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
		return fmt.Errorf("email.send: %s %q holds a control character (%q at byte %d); a header is one line of text", field, v, v[i], i)
	}
	return nil
}

// formatAddresses parses each address and writes it back as net/mail
// formats it (a comment dropped, a name encoded): what goes into the
// header is the parsed address, never the script's text.
func formatAddresses(field string, l []string) (string, error) {
	out := make([]string, 0, len(l))
	for _, raw := range l {
		if err := oneLine(field, raw); err != nil {
			return "", err
		}
		addr, err := mail.ParseAddress(raw)
		if err != nil {
			return "", fmt.Errorf("email.send: %s %q is not an email address", field, raw)
		}
		out = append(out, addr.String())
	}
	return strings.Join(out, ", "), nil
}

// parseCursor reads "UIDVALIDITY:UID".
func parseCursor(s string) (uint32, uint32, error) {
	v, u, ok := strings.Cut(s, ":")
	validity, err1 := strconv.ParseUint(v, 10, 32)
	uid, err2 := strconv.ParseUint(u, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("email.search: after must be a previous result's lastCursor (got %q)", s)
	}
	return uint32(validity), uint32(uid), nil
}

// dialIMAP connects and logs in: imaps:// is TLS, imap:// is STARTTLS
// (plain only to a server on this machine).
func (c *conn) dialIMAP(ctx context.Context) (*imapclient.Client, error) {
	if c.cfg.IMAP == "" {
		return nil, kt.Errorf(kt.ClassLogic, "email: no IMAP server: set [connectors.email] imap = \"imaps://user:password@host:993\" in keep.toml")
	}
	u, err := url.Parse(c.cfg.IMAP)
	if err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "email: [connectors.email] imap: %v", err)
	}
	host := u.Host
	var cl *imapclient.Client
	d := &net.Dialer{Timeout: 15 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", withPort(host, u.Scheme == "imaps", "993", "143"))
	if err != nil {
		return nil, kt.Errorf(kt.ClassTransient, "email: the IMAP server is unreachable: %v", err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		raw.SetDeadline(deadline)
	}
	switch {
	case u.Scheme == "imaps":
		cl = imapclient.New(tls.Client(raw, &tls.Config{ServerName: u.Hostname()}), nil)
	case loopback(u.Hostname()):
		cl = imapclient.New(raw, nil)
	default:
		// Credentials never cross a network in the clear: STARTTLS or nothing.
		if cl, err = imapclient.NewStartTLS(raw, &imapclient.Options{TLSConfig: &tls.Config{ServerName: u.Hostname()}}); err != nil {
			raw.Close()
			return nil, kt.Errorf(kt.ClassTransient, "email: STARTTLS with %s: %v", u.Host, err)
		}
	}
	pass, _ := u.User.Password()
	if err := cl.Login(u.User.Username(), pass).Wait(); err != nil {
		cl.Close()
		return nil, kt.Errorf(kt.ClassPermission, "email: the IMAP server refused the login of %s: %v", u.User.Username(), err)
	}
	return cl, nil
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

func withPort(host string, secure bool, securePort, plainPort string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if secure {
		return net.JoinHostPort(host, securePort)
	}
	return net.JoinHostPort(host, plainPort)
}

func (c *conn) search(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	folder := str(a["folder"])
	if folder == "" {
		folder = "INBOX"
	}
	max := 100
	if f, ok := a["max"].(float64); ok {
		max = int(f)
	}
	cl, err := c.dialIMAP(ctx)
	if err != nil {
		return connector.Result{Err: asKt(err)}
	}
	defer cl.Close()
	sel, err := cl.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait()
	if err != nil {
		return connector.Result{Err: kt.Errorf(kt.ClassLogic, "email.search: folder %q: %v", folder, err)}
	}
	var after uint32
	if s := str(a["after"]); s != "" {
		validity, uid, _ := parseCursor(s)
		if validity == sel.UIDValidity {
			after = uid // else the folder was rebuilt: from the start again
		}
	}
	crit := &imap.SearchCriteria{UID: []imap.UIDSet{{imap.UIDRange{Start: imap.UID(after + 1), Stop: 0}}}}
	if f := str(a["from"]); f != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "From", Value: f})
	}
	if s := str(a["subject"]); s != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "Subject", Value: s})
	}
	if u, _ := a["unseen"].(bool); u {
		crit.NotFlag = append(crit.NotFlag, imap.FlagSeen)
	}
	found, err := cl.UIDSearch(crit, nil).Wait()
	if err != nil {
		return connector.Result{Err: kt.Errorf(kt.ClassTransient, "email.search in %s: %v", folder, err)}
	}
	var uids []imap.UID
	for _, u := range found.AllUIDs() {
		if uint32(u) > after { // "N:*" always matches the last message
			uids = append(uids, u)
		}
	}
	if len(uids) > max {
		uids = uids[:max]
	}
	items := []any{}
	cursor := after
	if len(uids) > 0 {
		msgs, err := cl.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, Envelope: true, InternalDate: true,
			BodySection: []*imap.FetchItemBodySection{{Peek: true}}}).Collect()
		if err != nil {
			return connector.Result{Err: kt.Errorf(kt.ClassTransient, "email.search in %s: fetch: %v", folder, err)}
		}
		for _, m := range msgs {
			items = append(items, summary(m))
			if uint32(m.UID) > cursor {
				cursor = uint32(m.UID)
			}
		}
	}
	return connector.Result{Value: connector.ListWith(items, map[string]any{"lastCursor": fmt.Sprintf("%d:%d", sel.UIDValidity, cursor)})}
}

func summary(m *imapclient.FetchMessageBuffer) map[string]any {
	out := map[string]any{"uid": uint32(m.UID), "date": m.InternalDate.UTC().Format(time.RFC3339)}
	if e := m.Envelope; e != nil {
		out["id"], out["subject"] = e.MessageID, e.Subject
		out["from"], out["to"] = addresses(e.From), addresses(e.To)
	}
	text := ""
	if len(m.BodySection) > 0 {
		text = plainText(m.BodySection[0].Bytes)
	}
	if len(text) > MaxText {
		text = text[:MaxText]
	}
	out["text"] = text
	return out
}

func addresses(as []imap.Address) string {
	var out []string
	for _, a := range as {
		addr := a.Addr()
		if a.Name != "" {
			addr = (&mail.Address{Name: a.Name, Address: addr}).String()
		}
		out = append(out, addr)
	}
	return strings.Join(out, ", ")
}

// plainText finds the text/plain body of an RFC 822 message.
func plainText(raw []byte) string {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return ""
	}
	return partText(msg.Header.Get("Content-Type"), msg.Header.Get("Content-Transfer-Encoding"), msg.Body)
}

func partText(ctype, enc string, body io.Reader) string {
	mt, params, err := mime.ParseMediaType(ctype)
	if ctype == "" {
		mt, err = "text/plain", nil
	}
	if err != nil {
		return ""
	}
	body = decoded(enc, body)
	if strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				return ""
			}
			if t := partText(p.Header.Get("Content-Type"), p.Header.Get("Content-Transfer-Encoding"), p); t != "" {
				return t
			}
		}
	}
	if mt != "text/plain" {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(body, MaxText+1))
	return string(b)
}

func decoded(enc string, r io.Reader) io.Reader {
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "base64":
		return base64.NewDecoder(base64.StdEncoding, r)
	case "quoted-printable":
		return quotedprintable.NewReader(r)
	}
	return r
}

// messageID is a send's Message-ID: the same for every attempt of one write.
func messageID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "<keep." + hex.EncodeToString(sum[:16]) + "@keep.run>"
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

// dialSMTP connects, says hello and logs in. Nothing of a message has
// gone out yet, so every error here means "not sent".
func (c *conn) dialSMTP(ctx context.Context) (*smtp.Client, error) {
	if c.cfg.SMTP == "" || c.cfg.From == "" {
		return nil, kt.Errorf(kt.ClassLogic, "email.send: set [connectors.email] smtp = \"smtp://user:password@host:587\" and from = \"me@example.com\" in keep.toml")
	}
	u, err := url.Parse(c.cfg.SMTP)
	if err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "email: [connectors.email] smtp: %v", err)
	}
	d := &net.Dialer{Timeout: 15 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", withPort(u.Host, u.Scheme == "smtps", "465", "587"))
	if err != nil {
		return nil, kt.Errorf(kt.ClassTransient, "email.send: the SMTP server is unreachable: %v", err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		raw.SetDeadline(deadline)
	}
	var cl *smtp.Client
	if u.Scheme == "smtps" {
		cl = smtp.NewClient(tls.Client(raw, &tls.Config{ServerName: u.Hostname()}))
	} else if loopback(u.Hostname()) {
		// A relay on this machine: no TLS needed (nor, usually, offered).
		cl = smtp.NewClient(raw)
		if err := cl.Hello("keep"); err != nil {
			cl.Close()
			return nil, smtpErr("hello", err)
		}
	} else {
		// Credentials never cross a network in the clear: STARTTLS or nothing.
		if cl, err = smtp.NewClientStartTLS(raw, &tls.Config{ServerName: u.Hostname()}); err != nil {
			raw.Close()
			return nil, kt.Errorf(kt.ClassTransient, "email.send: STARTTLS with %s: %v", u.Host, err)
		}
	}
	if u.User != nil && u.User.Username() != "" {
		pass, _ := u.User.Password()
		if err := cl.Auth(sasl.NewPlainClient("", u.User.Username(), pass)); err != nil {
			cl.Close()
			return nil, kt.Errorf(kt.ClassPermission, "email.send: the SMTP server refused the login of %s: %v", u.User.Username(), err)
		}
	}
	return cl, nil
}

// smtpErr classifies an SMTP error that came before the message's end.
func smtpErr(step string, err error) *kt.Error {
	var se *smtp.SMTPError
	if errors.As(err, &se) && se.Code >= 500 {
		return kt.Errorf(kt.ClassLogic, "email.send: the server refused %s: %d %s", step, se.Code, se.Message)
	}
	return kt.Errorf(kt.ClassTransient, "email.send: %s: %v", step, err)
}

func (c *conn) send(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	what := "email.send to " + addrList(a["to"])
	failed := func(e *kt.Error) connector.Result { return connector.Result{Outcome: connector.OutcomeFailed, Err: e} }
	msg, err := c.build(a, call.IdempotencyKey)
	if err != nil {
		return failed(kt.Errorf(kt.ClassLogic, "%v", err))
	}
	cl, err := c.dialSMTP(ctx)
	if err != nil {
		return failed(asKt(err))
	}
	defer cl.Close()
	if err := cl.Mail(c.cfg.From, nil); err != nil {
		return failed(smtpErr("the sender "+c.cfg.From, err))
	}
	to, _ := list(a["to"])
	cc, _ := list(a["cc"])
	for _, rcpt := range append(to, cc...) {
		addr, _ := mail.ParseAddress(rcpt)
		if err := cl.Rcpt(addr.Address, nil); err != nil {
			return failed(smtpErr("the recipient "+addr.Address, err))
		}
	}
	w, err := cl.Data()
	if err != nil {
		return failed(smtpErr("DATA", err))
	}
	if _, err := w.Write(msg); err != nil {
		// The end of the message (the lone dot) never went out: a server
		// never delivers a message it did not get whole.
		return failed(kt.Errorf(kt.ClassTransient, "%s was not sent: the connection broke while sending it (%v)", what, err))
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
			"%s: the message went out but the server's answer did not come back (%v); it may have been sent", what, err)}
	}
	cl.Quit()
	if !c.cfg.ServerKeepsSent {
		// File a copy in Sent, as mail programs do; a failure here does not
		// unsend the message.
		if imc, err := c.dialIMAP(ctx); err == nil {
			cmd := imc.Append(c.sentFolder(), int64(len(msg)), &imap.AppendOptions{Flags: []imap.Flag{imap.FlagSeen}})
			if _, err := cmd.Write(msg); err == nil && cmd.Close() == nil {
				cmd.Wait()
			}
			imc.Close()
		}
	}
	return connector.Result{Outcome: connector.OutcomeApplied, Value: map[string]any{"messageId": messageID(call.IdempotencyKey)}}
}

func (c *conn) sentFolder() string {
	if c.cfg.SentFolder != "" {
		return c.cfg.SentFolder
	}
	return "Sent"
}

func (c *conn) reconcile(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
	cl, err := c.dialIMAP(ctx)
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	defer cl.Close()
	if _, err := cl.Select(c.sentFolder(), &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("email.send's reconcile: the Sent folder %q: %v", c.sentFolder(), err)
	}
	found, err := cl.UIDSearch(&imap.SearchCriteria{Header: []imap.SearchCriteriaHeaderField{{Key: "Message-ID", Value: messageID(call.IdempotencyKey)}}}, nil).Wait()
	if err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("email.send's reconcile: search Sent: %v", err)
	}
	if len(found.AllUIDs()) > 0 {
		return connector.ReconcileApplied, map[string]any{"messageId": messageID(call.IdempotencyKey), "reconciled": true}, nil
	}
	if !c.cfg.ServerKeepsSent {
		return connector.ReconcileRetry, nil, fmt.Errorf("the message is not in %s, but this server keeps no copy of what it sends (server_keeps_sent is false), so that does not prove it was not sent: look in the recipient's mailbox", c.sentFolder())
	}
	return connector.ReconcileFailed, nil, nil
}

func asKt(err error) *kt.Error {
	var ke *kt.Error
	if errors.As(err, &ke) {
		return ke
	}
	return kt.Errorf(kt.ClassTransient, "%v", err)
}

// Notify sends a plain message to one address through the mailbox's SMTP
// server (keep's notices, package notify). A notice may go twice after a
// crash; it has no Message-ID of keep's.
func Notify(ctx context.Context, cfg config.Email, to, subject, text string) error {
	c := &conn{cfg: cfg}
	from, err := formatAddresses("from (keep.toml [connectors.email])", []string{cfg.From})
	if err != nil {
		return err
	}
	toLine, err := formatAddresses("to", []string{to})
	if err != nil {
		return err
	}
	cl, err := c.dialSMTP(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	var b strings.Builder
	for _, h := range [][2]string{{"From", from}, {"To", toLine}, {"Subject", mime.QEncoding.Encode("utf-8", subject)},
		{"Date", time.Now().UTC().Format(time.RFC1123Z)}, {"MIME-Version", "1.0"}, {"Content-Type", "text/plain; charset=UTF-8"}, {"Content-Transfer-Encoding", "quoted-printable"}} {
		b.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	var q bytes.Buffer
	w := quotedprintable.NewWriter(&q)
	w.Write([]byte(text))
	w.Close()
	b.WriteString("\r\n" + q.String())
	return cl.SendMail(cfg.From, []string{to}, strings.NewReader(b.String()))
}
