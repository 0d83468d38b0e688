package email

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-message/charset"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// What email.search holds of a mailbox at once is bounded whatever the
// mailbox holds: it fetches each message's envelope and structure, then
// its text and HTML parts, each cut at rawTextBound — never a whole
// message, never an attachment's bytes (email.attachment reads one by
// its ref, bounded by MaxAttachment).
const (
	// searchAnswerBudget bounds the texts of one answer: the messages
	// returned stop before it is passed (the cursor stops at the last one
	// returned, and more says the rest waits), so an answer fits in what
	// one call may move between keep and a script (kt.MaxHostCallBytes).
	searchAnswerBudget = 8 << 20
	// rawTextBound bounds the bytes fetched of one text part: MaxText
	// decoded from quoted-printable (three bytes a byte at worst) or
	// base64 fits, and so does the HTML an HTML-only message's text is
	// made from (textSource).
	rawTextBound = 3 * textSource
	// textSource is how much of a decoded HTML body its text is made from.
	textSource = 4 * MaxText
	// headerBound bounds the header read of a message without a
	// Message-ID, which its id is made from.
	headerBound = 64 << 10
	// textBatch is how many messages' texts one round of FETCHes reads.
	textBatch = 20
)

// found is one message of a search: what its envelope and structure say,
// then its texts.
type found struct {
	uid        imap.UID
	env        *imap.Envelope
	date       time.Time
	size       int64
	id         string
	text, html *imap.BodyStructureSinglePart
	textPath   []int
	htmlPath   []int
	// attachments are the parts that are neither body: name, type, size, part.
	attachments []attachmentInfo
	textOut     string
	htmlOut     string
}

type attachmentInfo struct {
	name, mediaType, part, encoding string
	size                            int64
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
	res, err := cl.UIDSearch(searchCriteria(a, after), nil).Wait()
	if err != nil {
		return connector.Result{Err: kt.Errorf(kt.ClassTransient, "email.search in %s: %v", folder, err)}
	}
	var uids []imap.UID
	for _, u := range res.AllUIDs() {
		if uint32(u) > after { // "N:*" always matches the last message
			uids = append(uids, u)
		}
	}
	slices.Sort(uids)
	more := len(uids) > max
	if more {
		uids = uids[:max] // the oldest: the cursor stops at the last one returned
	}
	fail := func(what string, err error) connector.Result {
		return connector.Result{Err: kt.Errorf(kt.ClassTransient, "email.search in %s: %s: %v", folder, what, err)}
	}
	msgs, err := fetchStructure(cl, uids)
	if err != nil {
		return fail("fetch", err)
	}
	if err := identify(cl, msgs); err != nil {
		return fail("fetch the headers of messages without a Message-ID", err)
	}
	items := []any{}
	cursor, budget := after, searchAnswerBudget
	for start := 0; start < len(msgs); start += textBatch {
		batch := msgs[start:min(start+textBatch, len(msgs))]
		if err := readTexts(cl, batch); err != nil {
			return fail("fetch the texts", err)
		}
		for i, m := range batch {
			item, n := m.summary(folder, sel.UIDValidity)
			if len(items) > 0 && n > budget {
				more = true // the rest comes with the next search, after this cursor
				return done(items, sel.UIDValidity, cursor, more)
			}
			budget -= n
			items = append(items, item)
			cursor = uint32(m.uid)
			batch[i] = nil // its texts are in the answer now
		}
	}
	return done(items, sel.UIDValidity, cursor, more)
}

// searchCriteria is what email.search's arguments a ask for, among the
// messages after the cursor's UID.
func searchCriteria(a map[string]any, after uint32) *imap.SearchCriteria {
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
	return crit
}

func done(items []any, validity, cursor uint32, more bool) connector.Result {
	return connector.Result{More: more, Value: connector.ListWith(items, map[string]any{"lastCursor": fmt.Sprintf("%d:%d", validity, cursor), "more": more})}
}

// fetchStructure reads each message's envelope, date, size and structure,
// oldest first: nothing of its content.
func fetchStructure(cl *imapclient.Client, uids []imap.UID) ([]*found, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	cmd := cl.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, Envelope: true, InternalDate: true, RFC822Size: true,
		BodyStructure: &imap.FetchItemBodyStructure{Extended: true}})
	var out []*found
	if err := eachFetched(cmd, func(buf *imapclient.FetchMessageBuffer) {
		m := &found{uid: buf.UID, env: buf.Envelope, date: buf.InternalDate, size: buf.RFC822Size}
		m.parts(buf.BodyStructure)
		out = append(out, m)
	}); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *found) int { return int(int64(a.uid) - int64(b.uid)) })
	return out, nil
}

// parts finds the message's first text/plain and text/html bodies (inline,
// no file name) and lists every other leaf part as an attachment.
func (m *found) parts(bs imap.BodyStructure) {
	if bs == nil {
		return
	}
	bs.Walk(func(path []int, p imap.BodyStructure) bool {
		sp, ok := p.(*imap.BodyStructureSinglePart)
		if !ok {
			return true // a multipart: its children
		}
		mt, name := sp.MediaType(), filename(sp)
		disp := ""
		if d := sp.Disposition(); d != nil {
			disp = strings.ToLower(d.Value)
		}
		if disp != "attachment" && name == "" {
			switch {
			case mt == "text/plain" && m.text == nil:
				m.text, m.textPath = sp, slices.Clone(path)
				return true
			case mt == "text/html" && m.html == nil:
				m.html, m.htmlPath = sp, slices.Clone(path)
				return true
			}
		}
		m.attachments = append(m.attachments, attachmentInfo{name: name, mediaType: mt, part: partName(path), encoding: sp.Encoding, size: decodedSize(sp)})
		return true
	})
}

// filename is a part's file name, RFC 2047 and RFC 2231 decoded.
func filename(sp *imap.BodyStructureSinglePart) string {
	params := map[string]string{}
	if d := sp.Disposition(); d != nil {
		for k, v := range d.Params {
			params[strings.ToLower(k)] = v
		}
	}
	for _, key := range []string{"filename", "name"} {
		src := params
		if key == "name" {
			src = sp.Params
		}
		if v := src[key]; v != "" {
			if d, err := words.DecodeHeader(v); err == nil {
				return d
			}
			return v
		}
		if v := src[key+"*"]; v != "" { // RFC 2231, as the server passed it on
			if _, p, err := mime.ParseMediaType("x; " + key + "*=" + v); err == nil && p[key] != "" {
				return p[key]
			}
		}
	}
	return ""
}

func partName(path []int) string {
	s := make([]string, len(path))
	for i, n := range path {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ".")
}

func parsePart(s string) ([]int, bool) {
	var out []int
	for _, f := range strings.Split(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, false
		}
		out = append(out, n)
	}
	return out, len(out) > 0
}

// decodedSize is a part's size once decoded, estimated from its encoded
// size where the server cannot say it (BINARY.SIZE, readTexts): base64
// holds three bytes in four characters, in lines of 76 (RFC 2045), which
// the estimate takes out; other encodings are counted as they are.
func decodedSize(sp *imap.BodyStructureSinglePart) int64 {
	n := int64(sp.Size)
	if strings.EqualFold(sp.Encoding, "base64") {
		n -= 2 * ((n + 77) / 78) // CRLF after each line of 76
		return max(n, 0) * 3 / 4
	}
	return n
}

// identify gives each message its id: the Message-ID, or for a message
// without one an id made from the message itself — its header (Received
// lines, Date, From, To, Subject, as it was delivered) and its size — so
// that the same message has the same id after its folder is rebuilt (a new
// UIDVALIDITY, new UIDs: an id of its place would make it a new input,
// answered twice), and two deliveries differ by their Received lines.
func identify(cl *imapclient.Client, msgs []*found) error {
	byUID := map[imap.UID]*found{}
	var uids []imap.UID
	for _, m := range msgs {
		if m.env != nil && m.env.MessageID != "" {
			m.id = m.env.MessageID
			continue
		}
		byUID[m.uid] = m
		uids = append(uids, m.uid)
	}
	if len(uids) == 0 {
		return nil
	}
	sec := &imap.FetchItemBodySection{Specifier: imap.PartSpecifierHeader, Peek: true, Partial: &imap.SectionPartial{Size: headerBound}}
	cmd := cl.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, BodySection: []*imap.FetchItemBodySection{sec}})
	return eachFetched(cmd, func(buf *imapclient.FetchMessageBuffer) {
		if m := byUID[buf.UID]; m != nil {
			m.id = contentID(buf.FindBodySection(sec), m.size)
		}
	})
}

// eachFetched hands each message a FETCH answers to f, in the order they
// come, and ends the command: an error of the connection ends it at once.
func eachFetched(cmd *imapclient.FetchCommand, f func(*imapclient.FetchMessageBuffer)) error {
	for {
		msg := cmd.Next()
		if msg == nil {
			break
		}
		buf, err := msg.Collect()
		if err != nil {
			cmd.Close()
			return err
		}
		f(buf)
	}
	return cmd.Close()
}

// contentID is the id of a message without a Message-ID: a digest of its
// header and size (identify).
func contentID(header []byte, size int64) string {
	h := sha256.New()
	h.Write(header)
	fmt.Fprintf(h, "\x00%d", size)
	return "no-message-id." + hex.EncodeToString(h.Sum(nil)[:16]) + "@keep"
}

// readTexts fetches the text and HTML parts of a batch of messages, each
// cut at rawTextBound, decoded, and — where the server has BINARY (RFC
// 3516: Dovecot, every IMAP4rev2 server) — each attachment's decoded size:
// one FETCH per shape of message (the same parts), so a batch costs a
// round trip or a few.
func readTexts(cl *imapclient.Client, batch []*found) error {
	binary := cl.Caps().Has(imap.CapBinary)
	groups := map[string]*textGroup{}
	var order []string
	byUID := map[imap.UID]*found{}
	for _, m := range batch {
		var parts []string
		if binary {
			for _, at := range m.attachments {
				if knownEncoding(at.encoding) {
					parts = append(parts, at.part)
				}
			}
		}
		if m.text == nil && m.html == nil && len(parts) == 0 {
			continue
		}
		byUID[m.uid] = m
		key := partName(m.textPath) + "|" + partName(m.htmlPath) + "|" + strings.Join(parts, ",")
		g := groups[key]
		if g == nil {
			g = &textGroup{}
			if m.text != nil {
				g.text = textSection(m.textPath)
			}
			if m.html != nil {
				g.html = textSection(m.htmlPath)
			}
			for _, p := range parts {
				path, _ := parsePart(p)
				g.sizes = append(g.sizes, &imap.FetchItemBinarySectionSize{Part: path})
			}
			groups[key] = g
			order = append(order, key)
		}
		g.uids = append(g.uids, m.uid)
	}
	for _, key := range order {
		g := groups[key]
		err := fetchTexts(cl, *g, byUID)
		if err != nil && len(g.sizes) > 0 {
			// A server that cannot decode a part for its size (NO
			// [UNKNOWN-CTE]) fails the whole FETCH: the sizes are then
			// estimated, and one odd attachment stops no mailbox.
			noSizes := *g
			noSizes.sizes = nil
			err = fetchTexts(cl, noSizes, byUID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// knownEncoding is a transfer encoding every server with BINARY decodes
// (RFC 3516); for another it may answer NO [UNKNOWN-CTE].
func knownEncoding(enc string) bool {
	switch strings.ToLower(enc) {
	case "", "7bit", "8bit", "binary", "base64", "quoted-printable":
		return true
	}
	return false
}

// textGroup is the messages of one shape (the same parts) readTexts reads
// with one FETCH, and the sections it asks for: text and HTML (nil for
// none), and the attachments' sizes.
type textGroup struct {
	uids       []imap.UID
	text, html *imap.FetchItemBodySection
	sizes      []*imap.FetchItemBinarySectionSize
}

// fetchTexts is one FETCH of readTexts: the text and HTML sections and the
// attachments' sizes of the messages of g.
func fetchTexts(cl *imapclient.Client, g textGroup, byUID map[imap.UID]*found) error {
	text, html := g.text, g.html
	opts := &imap.FetchOptions{UID: true, BinarySectionSize: g.sizes}
	for _, s := range []*imap.FetchItemBodySection{text, html} {
		if s != nil {
			opts.BodySection = append(opts.BodySection, s)
		}
	}
	cmd := cl.Fetch(imap.UIDSetNum(g.uids...), opts)
	return eachFetched(cmd, func(buf *imapclient.FetchMessageBuffer) {
		m := byUID[buf.UID]
		if m == nil {
			return
		}
		if text != nil {
			m.textOut = decodeText(m.text, buf.FindBodySection(text), MaxText)
		}
		if html != nil {
			m.htmlOut = decodeText(m.html, buf.FindBodySection(html), textSource)
		}
		for i := range m.attachments {
			path, _ := parsePart(m.attachments[i].part)
			if n, ok := buf.FindBinarySectionSize(path); ok {
				m.attachments[i].size = int64(n)
			}
		}
	})
}

func textSection(path []int) *imap.FetchItemBodySection {
	return &imap.FetchItemBodySection{Part: path, Peek: true, Partial: &imap.SectionPartial{Size: rawTextBound}}
}

// decodeText decodes a text part from its transfer encoding and charset
// into UTF-8, at most limit bytes. A part cut by the fetch's bound decodes
// up to the cut.
func decodeText(sp *imap.BodyStructureSinglePart, raw []byte, limit int) string {
	var r io.Reader = bytes.NewReader(raw)
	switch strings.ToLower(sp.Encoding) {
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, r)
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	}
	if cs := strings.ToLower(sp.Params["charset"]); cs != "" && cs != "utf-8" && cs != "us-ascii" {
		if cr, err := charset.Reader(cs, r); err == nil {
			r = cr
		}
	}
	b, _ := io.ReadAll(io.LimitReader(r, int64(limit))) // what decoded before a cut or a bad byte
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// summary is one message as a script sees it, and about how many bytes
// of the answer it takes.
func (m *found) summary(folder string, validity uint32) (map[string]any, int) {
	out := map[string]any{"id": m.id, "uid": uint32(m.uid), "date": m.date.UTC().Format(time.RFC3339)}
	if e := m.env; e != nil {
		out["subject"] = e.Subject
		out["from"], out["to"] = addresses(e.From), addresses(e.To)
	}
	text, htm := m.textOut, m.htmlOut
	if text == "" && htm != "" {
		text = htmlText(htm)
	}
	out["text"] = clip(text)
	n := 512 + jsonLen(str(out["subject"])) + jsonLen(str(out["from"])) + jsonLen(str(out["to"])) + jsonLen(str(out["text"]))
	if htm != "" {
		out["html"] = clip(htm)
		n += jsonLen(str(out["html"]))
	}
	atts := make([]any, 0, len(m.attachments))
	for _, at := range m.attachments {
		path, _ := parsePart(at.part)
		atts = append(atts, map[string]any{"name": at.name, "type": at.mediaType, "size": at.size,
			"ref": attachmentRef{validity: validity, uid: m.uid, part: path, folder: folder}.String()})
		n += 128 + jsonLen(at.name) + jsonLen(at.mediaType) + jsonLen(folder)
	}
	out["attachments"] = atts
	return out, n
}

// jsonLen is how many bytes s takes in the answer as JSON: keep encodes
// it with encoding/json, which writes <, > and & (an HTML body is full of
// them) and control characters as six bytes each.
func jsonLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '<' || c == '>' || c == '&' || (c < 0x20 && c != '\n' && c != '\r' && c != '\t'):
			n += 5
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n++
		}
	}
	return n
}
