package email

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-message"
	"github.com/emersion/go-message/charset"
	gomail "github.com/emersion/go-message/mail"
	"golang.org/x/net/html"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// words decodes RFC 2047 words in every charset go-message knows.
var words = &mime.WordDecoder{CharsetReader: charset.Reader}

func init() { message.CharsetReader = charset.Reader }

// dialIMAP connects and logs in: imaps:// is TLS, imap:// is STARTTLS
// (plain only to a server on this machine, unless starttls = true).
func (c *conn) dialIMAP(ctx context.Context) (*imapclient.Client, error) {
	if c.cfg.IMAP == "" {
		return nil, kt.Errorf(kt.ClassLogic, "email: no IMAP server: set [connectors.email] imap = \"imaps://user:password@host:993\" in keep.toml")
	}
	u, err := url.Parse(c.cfg.IMAP)
	if err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "email: [connectors.email] imap: %v", err)
	}
	tc, err := c.tlsConfig(u.Hostname())
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 15 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", withPort(u.Host, u.Scheme == "imaps", "993", "143"))
	if err != nil {
		return nil, kt.Errorf(kt.ClassTransient, "email: the IMAP server is unreachable: %v", err)
	}
	// go-imap sets a deadline of its own for each command and response, so
	// the call's end closes the connection (closing it twice is harmless).
	context.AfterFunc(ctx, func() { raw.Close() })
	opts := &imapclient.Options{WordDecoder: words, TLSConfig: tc}
	var cl *imapclient.Client
	switch {
	case u.Scheme == "imaps":
		conn := tls.Client(raw, tc)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, tlsFailed("IMAP", u.Host, err)
		}
		cl = imapclient.New(conn, opts)
	case loopback(u.Hostname()) && !c.cfg.StartTLS:
		cl = imapclient.New(raw, opts)
	default:
		// Credentials never cross a network in the clear: STARTTLS or nothing.
		if cl, err = imapclient.NewStartTLS(raw, opts); err != nil {
			raw.Close()
			return nil, tlsFailed("IMAP", u.Host, err)
		}
	}
	pass, _ := u.User.Password()
	if err := cl.Login(u.User.Username(), pass).Wait(); err != nil {
		cl.Close()
		return nil, kt.Errorf(kt.ClassPermission, "email: the IMAP server refused the login of %s: %v", u.User.Username(), err)
	}
	return cl, nil
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
		uids = uids[:max] // the oldest: the cursor stops at the last one returned
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
			items = append(items, summary(m, folder, sel.UIDValidity))
			if uint32(m.UID) > cursor {
				cursor = uint32(m.UID)
			}
		}
	}
	return connector.Result{Value: connector.ListWith(items, map[string]any{"lastCursor": fmt.Sprintf("%d:%d", sel.UIDValidity, cursor)})}
}

// summary is one message as a script sees it. A message without a
// Message-ID gets an id of its place (folder, UIDVALIDITY, UID): stable
// for as long as the folder is, so registering inputs by id keeps working.
func summary(m *imapclient.FetchMessageBuffer, folder string, validity uint32) map[string]any {
	out := map[string]any{"uid": uint32(m.UID), "date": m.InternalDate.UTC().Format(time.RFC3339)}
	if e := m.Envelope; e != nil {
		out["id"], out["subject"] = e.MessageID, e.Subject
		out["from"], out["to"] = addresses(e.From), addresses(e.To)
	}
	if id, _ := out["id"].(string); id == "" {
		out["id"] = fmt.Sprintf("no-message-id.%d.%d.%s@keep", validity, uint32(m.UID), url.PathEscape(folder))
	}
	text, htm := "", ""
	if len(m.BodySection) > 0 {
		text, htm = bodies(m.BodySection[0].Bytes)
	}
	out["text"] = clip(text)
	if htm != "" {
		out["html"] = clip(htm)
	}
	return out
}

func clip(s string) string {
	if len(s) <= MaxText {
		return s
	}
	for i := MaxText; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return ""
}

// addresses writes each address with its display name decoded (the
// envelope's words were decoded by words), as "Name <addr>".
func addresses(as []imap.Address) string {
	var out []string
	for _, a := range as {
		addr := a.Addr()
		if a.Name != "" {
			addr = quoteName(a.Name) + " <" + addr + ">"
		}
		out = append(out, addr)
	}
	return strings.Join(out, ", ")
}

var plainName = regexp.MustCompile(`^[\p{L}\p{N} !#$%&'*+\-/=?^_{|}~.]*$`)

func quoteName(n string) string {
	if plainName.MatchString(n) {
		return n
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(n) + `"`
}

// bodies finds a message's text/plain and text/html bodies, decoded from
// their transfer encoding and charset into UTF-8. HTML-only mail gets a
// text made from its HTML.
func bodies(raw []byte) (text, htm string) {
	r, _ := gomail.CreateReader(bytes.NewReader(raw)) // an unknown charset still gives a reader
	if r == nil {
		return "", ""
	}
	for {
		p, err2 := r.NextPart()
		if err2 == io.EOF || (err2 != nil && !message.IsUnknownCharset(err2)) || p == nil {
			break
		}
		h, ok := p.Header.(*gomail.InlineHeader)
		if !ok {
			continue // an attachment
		}
		ct, _, _ := h.ContentType()
		if ct == "" {
			ct = "text/plain"
		}
		b, _ := io.ReadAll(io.LimitReader(p.Body, 4*MaxText))
		switch {
		case ct == "text/plain" && text == "":
			text = string(b)
		case ct == "text/html" && htm == "":
			htm = string(b)
		}
	}
	if text == "" && htm != "" {
		text = htmlText(htm)
	}
	return text, htm
}

// htmlText is the text a person reads in an HTML body: no tags, scripts
// or styles; a line break where a block ends.
func htmlText(s string) string {
	z := html.NewTokenizer(strings.NewReader(s))
	var b strings.Builder
	skip := 0
	for {
		switch z.Next() {
		case html.ErrorToken:
			lines := strings.Split(b.String(), "\n")
			for i, l := range lines {
				lines[i] = strings.TrimSpace(l)
			}
			return strings.TrimSpace(blankLines.ReplaceAllString(strings.Join(lines, "\n"), "\n\n"))
		case html.TextToken:
			if skip == 0 {
				b.WriteString(spaces.ReplaceAllString(string(z.Text()), " "))
			}
		case html.StartTagToken, html.EndTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			tok := z.Token()
			switch string(name) {
			case "script", "style", "head":
				if tok.Type == html.StartTagToken {
					skip++
				} else if tok.Type == html.EndTagToken && skip > 0 {
					skip--
				}
			case "br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "blockquote":
				b.WriteString("\n")
			case "td", "th":
				b.WriteString(" ")
			}
		}
	}
}

var (
	blankLines = regexp.MustCompile(`\n\n+`)
	spaces     = regexp.MustCompile(`\s+`)
)

// imapCode reads the response code of an IMAP NO/BAD answer.
func imapCode(err error) imap.ResponseCode {
	var ie *imap.Error
	if errors.As(err, &ie) {
		return ie.Code
	}
	return ""
}
