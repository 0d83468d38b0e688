package email

import (
	"context"
	"crypto/tls"
	"errors"
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
	"golang.org/x/net/html"

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
