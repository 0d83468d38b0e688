package email

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime/quotedprintable"
	"strconv"
	"strings"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// MaxAttachment bounds the bytes of one attachment email.attachment
// returns (decoded): as base64 in JSON it stays under what one call may
// move between keep and a script (kt.MaxHostCallBytes).
const MaxAttachment = 10 << 20

// attachmentRef is what a ref of email.search names: a part of one
// message of a folder as it was (its UIDVALIDITY), written
// "UIDVALIDITY:UID:PART:FOLDER" (the folder last: it may hold a colon).
type attachmentRef struct {
	validity uint32
	uid      imap.UID
	part     []int
	folder   string
}

func (r attachmentRef) String() string {
	return fmt.Sprintf("%d:%d:%s:%s", r.validity, uint32(r.uid), partName(r.part), r.folder)
}

func parseRef(s string) (attachmentRef, error) {
	f := strings.SplitN(s, ":", 4)
	bad := fmt.Errorf("email.attachment: ref must be an attachment's ref from email.search (got %q)", s)
	if len(f) != 4 || f[3] == "" {
		return attachmentRef{}, bad
	}
	v, err1 := strconv.ParseUint(f[0], 10, 32)
	u, err2 := strconv.ParseUint(f[1], 10, 32)
	part, ok := parsePart(f[2])
	if err1 != nil || err2 != nil || !ok || u == 0 {
		return attachmentRef{}, bad
	}
	return attachmentRef{validity: uint32(v), uid: imap.UID(u), part: part, folder: f[3]}, nil
}

func validateAttachment(a map[string]any) error {
	ref, ok := a["ref"].(string)
	if !ok {
		return fmt.Errorf("email.attachment needs ref: an attachment's ref from email.search")
	}
	if _, err := parseRef(ref); err != nil {
		return err
	}
	if m, ok := a["max"]; ok && m != nil {
		if f, isNum := m.(float64); !isNum || f < 1 || f > MaxAttachment || f != float64(int64(f)) {
			return fmt.Errorf("email.attachment: max must be a whole number of bytes from 1 to %d", MaxAttachment)
		}
	}
	return nil
}

// attachment reads one attachment's bytes: the part as the message holds
// it, fetched at most as far as max decoded bytes can take, decoded as it
// arrives. An attachment over max is refused, saying its size.
func (c *conn) attachment(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	limit := int64(MaxAttachment)
	if f, ok := a["max"].(float64); ok {
		limit = int64(f)
	}
	ref, _ := parseRef(str(a["ref"]))
	cl, err := c.dialIMAP(ctx)
	if err != nil {
		return connector.Result{Err: asKt(err)}
	}
	defer cl.Close()
	at, kerr := findAttachment(cl, ref, str(a["ref"]))
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	b64, n, kerr := readAttachment(cl, ref, at, limit)
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	if n > limit {
		return connector.Result{Err: kt.Errorf(kt.ClassLogic, "email.attachment: %q (%s) is about %d bytes, over max %d: check an attachment's size (email.search gives it) before reading it, or ask for up to %d", at.name, at.mediaType, at.size, limit, MaxAttachment)}
	}
	return connector.Result{Value: map[string]any{"name": at.name, "type": at.mediaType, "size": n, "base64": b64}}
}

// findAttachment finds the attachment ref (refText as the script gave it)
// names: in its folder, still the one the search read (UIDVALIDITY), its
// message still there.
func findAttachment(cl *imapclient.Client, ref attachmentRef, refText string) (*attachmentInfo, *kt.Error) {
	folder := ref.folder
	sel, err := cl.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait()
	if err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "email.attachment: folder %q: %v", folder, err)
	}
	if sel.UIDValidity != ref.validity {
		return nil, kt.Errorf(kt.ClassPrecondition, "email.attachment: the folder %q was rebuilt since the search that gave ref %s (its UIDVALIDITY is %d now): search again and use the new ref", folder, refText, sel.UIDValidity)
	}
	msgs, err := fetchStructure(cl, []imap.UID{ref.uid})
	if err != nil {
		return nil, kt.Errorf(kt.ClassTransient, "email.attachment in %s: %v", folder, err)
	}
	if len(msgs) == 0 {
		return nil, kt.Errorf(kt.ClassPrecondition, "email.attachment: folder %q no longer holds the message of ref %s (deleted or moved)", folder, refText)
	}
	var at *attachmentInfo
	for i := range msgs[0].attachments {
		if msgs[0].attachments[i].part == partName(ref.part) {
			at = &msgs[0].attachments[i]
		}
	}
	if at == nil {
		return nil, kt.Errorf(kt.ClassLogic, "email.attachment: the message of ref %s has no attachment %s", refText, partName(ref.part))
	}
	return at, nil
}

// readAttachment fetches the attachment's part, at most as far as limit
// decoded bytes can take, decoded as it arrives, and returns it in
// base64 and its decoded size (over limit: it did not fit).
func readAttachment(cl *imapclient.Client, ref attachmentRef, at *attachmentInfo, limit int64) (string, int64, *kt.Error) {
	folder := ref.folder
	encoding := strings.ToLower(at.encoding)
	// The most raw bytes max decoded bytes take (base64: 4 for 3, and a
	// line break every 76); a larger part is over max whatever it holds.
	raw := limit + limit/2 + 1024
	if encoding == "quoted-printable" {
		raw = 3*limit + limit/25 + 1024
	}
	sec := &imap.FetchItemBodySection{Part: ref.part, Peek: true, Partial: &imap.SectionPartial{Size: raw}}
	cmd := cl.Fetch(imap.UIDSetNum(ref.uid), &imap.FetchOptions{UID: true, BodySection: []*imap.FetchItemBodySection{sec}})
	// Decoded as it arrives straight into its base64: the attachment is
	// held once, as the answer carries it.
	var out strings.Builder
	var n int64
	for msg := cmd.Next(); msg != nil; msg = cmd.Next() {
		for item := msg.Next(); item != nil; item = msg.Next() {
			body, ok := item.(imapclient.FetchItemDataBodySection)
			if !ok || body.Literal == nil {
				continue
			}
			var r io.Reader = body.Literal
			switch encoding {
			case "base64":
				r = base64.NewDecoder(base64.StdEncoding, r)
			case "quoted-printable":
				r = quotedprintable.NewReader(r)
			}
			out.Reset()
			out.Grow(int(min(at.size, limit)+2) / 3 * 4)
			enc := base64.NewEncoder(base64.StdEncoding, &out)
			var err error
			n, err = io.Copy(enc, io.LimitReader(r, limit+1))
			enc.Close()
			var corrupt base64.CorruptInputError
			if errors.As(err, &corrupt) {
				cmd.Close()
				return "", 0, kt.Errorf(kt.ClassLogic, "email.attachment: %q (%s) is not valid base64 in the message (%v): its sender's mailer wrote it so", at.name, at.mediaType, err)
			}
			if err != nil {
				cmd.Close()
				return "", 0, kt.Errorf(kt.ClassTransient, "email.attachment in %s: read the part: %v", folder, err)
			}
		}
	}
	if err := cmd.Close(); err != nil {
		return "", 0, kt.Errorf(kt.ClassTransient, "email.attachment in %s: %v", folder, err)
	}
	return out.String(), n, nil
}
