// Package email is the email connector for any mailbox that is not Gmail:
// search over IMAP (github.com/emersion/go-imap/v2), send over SMTP
// (github.com/emersion/go-smtp). A send's Message-ID is made from the
// write's idempotency key, so reconcile can look for it in the Sent folder.
package email

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// keyHeader carries a sent message's idempotency key.
const keyHeader = "X-Keep-Idempotency-Key"

// MaxText bounds the text of a message handed to a script.
const MaxText = 64 << 10

type conn struct{ cfg Config }

// New returns the email connector for the mailbox of [connectors.email].
func New(cfg Config) *connector.Connector {
	c := &conn{cfg: cfg}
	return &connector.Connector{
		Name: "email",
		Doc: "Any mailbox over IMAP (reading) and SMTP (sending), set in keep.toml: `[connectors.email] imap = \"imaps://user:password@host:993\"`, " +
			"`smtp = \"smtp://user:password@host:587\"` (STARTTLS; `smtps://` for TLS; plain only to a server on this machine unless `starttls = true`), `from = \"me@example.com\"`, " +
			"`ca_file = \"/path/ca.pem\"` to trust a private CA, `sent_folder` (default: the folder marked \\Sent, else `Sent`, created when absent), " +
			"and `server_keeps_sent = true` only when the SMTP server files a copy of what it sends into Sent itself (Gmail, Exchange, Fastmail do; Postfix does not): keep checks that before relying on it. Credentials stay in keep.toml.",
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
				ResultTS: "Array<{ id: string; uid: number; from: string; to: string; subject: string; date: string; text: string; html?: string; attachments: Array<{ name: string; type: string; size: number; ref: string }> }> & { lastCursor: string; more: boolean }",
				Result: "an array of `{ id, uid, from, to, subject, date, text, html?, attachments }` with properties `lastCursor` (pass it as the next `after`) and `more` (true when more messages matched than came back: the next search from `lastCursor` reads on, and a producer that returns the new cursor in its state runs again at once). " +
					"`id` is the Message-ID; a message without one gets an id made from the message itself (a digest of its header, Received lines included, and its size: the same after its folder is rebuilt, different for two deliveries): register inputs by it. `from`/`to` with display names decoded; `text` the plain body decoded to UTF-8, made from the HTML when there is only HTML; `html` the HTML body when there is one; each at most 64 KiB. " +
					"`attachments` lists every other part, `{ name, type, size, ref }` (`size` in bytes once decoded: as the server counts it where it can (BINARY, as Dovecot has), else estimated from the encoded size): their bytes are never downloaded by search — read one with `email.attachment({ ref })`. " +
					"An answer holds at most about 8 MiB of texts: past that the rest waits for the next search (`more`).",
				Limits: "keep fetches each message's envelope and structure, then its text and HTML parts, each cut at 768 KiB before decoding, 20 messages at a time: never a whole message, never an attachment's bytes, so keep's memory stays bounded whatever the mailbox holds.",
				Errors: "a folder that does not exist: logic; login refused, or a server certificate keep does not trust (set `ca_file`): permission; the server unreachable: transient.",
			}},
			"attachment": {Name: "attachment", Kind: connector.KindReadByID, Validate: validateAttachment, Do: c.attachment, Doc: connector.MethodDoc{
				Summary: "Reads one attachment's bytes, named by its `ref` from email.search.",
				Params: []connector.Param{
					{Name: "ref", Type: "string", Required: true, Doc: "an attachment's `ref` from email.search (it names the folder, the message and the part)"},
					{Name: "max", Type: "number", Doc: "the most bytes to read, 1 to 10485760 (10 MiB, the default): a larger attachment is refused, saying its size"},
				},
				ResultTS: "{ name: string; type: string; size: number; base64: string }",
				Result:   "`{ name, type, size, base64 }`: the attachment decoded from its transfer encoding (base64, quoted-printable; another, such as x-uuencode, as the message holds it), as base64",
				Errors:   "an attachment over `max`, or a ref that names no attachment: logic; the folder rebuilt since the search (a new UIDVALIDITY) or the message gone: precondition — search again; the server unreachable: transient.",
				Limits:   "keep fetches at most what `max` decoded bytes take and decodes as it reads.",
			}},
			"send": {Name: "send", Kind: connector.KindMutate, Identity: []string{"to"}, Validate: validateSend, Do: c.send,
				Reconcile: c.reconcile, Evidence: evidence, ComparePayload: connector.ComparePayloadOf("subject", "text", "html", "cc"), Target: func(a map[string]any) string { return "email.send to " + addrList(a["to"]) },
				Doc: connector.MethodDoc{
					Summary: "Sends a message over SMTP from `from`. Its Message-ID is made from the write's idempotency key (the same for every attempt of the same write, different in every installation) and the key travels in `X-Keep-Idempotency-Key`. After sending keep makes sure a copy is in Sent: the server's own (`server_keeps_sent`, looked for) or one keep files (APPEND, creating `Sent` when the mailbox has none). [policy] tool_timeout bounds the whole send.",
					Params: []connector.Param{
						{Name: "to", Type: "string or array of strings", Required: true, Doc: "recipients (identity)"},
						{Name: "subject", Type: "string", Required: true, Doc: "the subject"},
						{Name: "text", Type: "string", Required: true, Doc: "the plain-text body"},
						{Name: "html", Type: "string", Doc: "an HTML body sent beside the text"},
						{Name: "cc", Type: "string or array of strings", Doc: "copies"},
						{Name: "inReplyTo", Type: "string", Doc: "the Message-ID of the message this replies to (a message's `id` from email.search): sets In-Reply-To, so the reply threads"},
						{Name: "references", Type: "string or array of strings", Doc: "the Message-IDs of the thread, oldest first (default: `inReplyTo`)"},
						{Name: "subkey", Type: "string", Doc: "tells apart two sends of one run to the same recipients"},
					},
					ResultTS: `{ messageId: string; sentFolder?: string; filedBy?: "server" | "keep"; notFiled?: string; reconciled?: boolean }`,
					Result:   "`{ messageId, sentFolder, filedBy }` (`filedBy` is `server` or `keep`); when the copy could not be filed, `{ messageId, notFiled }` saying why (the message was sent); a reconciled send adds `reconciled: true`",
					Reconcile: "searches the Sent folder for the Message-ID and compares what it finds with this write (recipients, subject): the same means sent; a message of that id that differs is not taken for it. Not found means not sent only where the server keeps a copy of everything it sends (`server_keeps_sent = true`) and Sent shows it (a message keep sent that the server filed); " +
						"elsewhere keep cannot tell (it files its own copy after sending, and a send cut off before that leaves none), and a person decides, told which Message-ID to look for.",
					Errors: "a recipient the server refuses (5xx): precondition, nothing sent — a person skips the message or fixes the address; the sender refused: permission; the message refused (5xx at its end): logic; 4xx and a server unreachable before the message went out: transient; a server certificate keep does not trust: permission (set `ca_file`); the connection lost, or the time limit passed, after the message's end was sent: unknown, settled by reconcile, and the card names the Message-ID.",
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
	if _, _, err := threading(a); err != nil {
		return err
	}
	if v, ok := a["inReplyTo"]; ok && v != nil {
		if _, isStr := v.(string); !isStr {
			return fmt.Errorf("email.send: inReplyTo must be a string: the Message-ID of the message replied to")
		}
	}
	if _, ok := list(a["references"]); !ok {
		return fmt.Errorf("email.send: references must be a Message-ID or an array of them")
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

// tlsConfig trusts the system's CAs and the one of ca_file.
func (c *conn) tlsConfig(host string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: host}
	if c.cfg.CAFile == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(c.cfg.CAFile)
	if err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "email: [connectors.email] ca_file: %v", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, kt.Errorf(kt.ClassLogic, "email: [connectors.email] ca_file %s holds no PEM certificate", c.cfg.CAFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// untrusted reports whether err is a certificate keep does not trust.
func untrusted(err error) bool {
	var verr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var name x509.HostnameError
	return errors.As(err, &verr) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &name)
}

// tlsFailed says what a failed TLS handshake means: a certificate keep
// does not trust needs a person (ca_file, or the server's certificate
// fixed), never a retry; anything else is the network's.
func tlsFailed(server, host string, err error) *kt.Error {
	if untrusted(err) {
		return kt.Errorf(kt.ClassPermission, "email: the %s server's certificate at %s is not trusted (%v); keep sent it no password. If a private CA signed it, set ca_file = \"/path/to/ca.pem\" in [connectors.email]", server, host, err)
	}
	return kt.Errorf(kt.ClassTransient, "email: TLS with the %s server at %s: %v", server, host, err)
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
func Notify(ctx context.Context, cfg Config, to, subject, text string) error {
	c := &conn{cfg: cfg}
	from, err := formatAddresses("from (keep.toml [connectors.email])", []string{cfg.From})
	if err != nil {
		return err
	}
	toLine, err := formatAddresses("to", []string{to})
	if err != nil {
		return err
	}
	cl, stop, err := c.dialSMTP(ctx)
	if err != nil {
		return err
	}
	defer stop()
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
