package googlefake

import (
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/mail"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

type message struct {
	ID, ThreadID          string
	Labels                []string // label ids
	From, To, Cc, Subject string
	Text, HTML            string
	MessageID             string // the RFC 822 Message-ID header
	Date                  int64  // internalDate, ms
	HistoryID             uint64 // the last history record that changed it
	Raw                   string
	// Extra are the headers a sent message carried beyond those above
	// (In-Reply-To, References, X-…), in order.
	Extra [][2]string
}

type label struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
}

func (m *message) headers() []map[string]string {
	h := []map[string]string{{"name": "From", "value": m.From}, {"name": "To", "value": m.To}, {"name": "Subject", "value": m.Subject}}
	if m.Cc != "" {
		h = append(h, map[string]string{"name": "Cc", "value": m.Cc})
	}
	h = append(h, map[string]string{"name": "Date", "value": fmtDate(m.Date)}, map[string]string{"name": "Message-ID", "value": m.MessageID})
	for _, x := range m.Extra {
		h = append(h, map[string]string{"name": x[0], "value": x[1]})
	}
	return h
}

// only keeps the headers named (format metadata with metadataHeaders, as
// Gmail answers: case-insensitive; none named is all).
func only(h []map[string]string, names []string) []map[string]string {
	if len(names) == 0 {
		return h
	}
	out := []map[string]string{}
	for _, x := range h {
		for _, n := range names {
			if strings.EqualFold(x["name"], n) {
				out = append(out, x)
			}
		}
	}
	return out
}

func b64(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) }

// json renders a message as users.messages.get does in format full.
func (m *message) json(format string, metadataHeaders ...string) map[string]any {
	snippet := m.Text
	if len(snippet) > 100 {
		snippet = snippet[:100]
	}
	out := map[string]any{"id": m.ID, "threadId": m.ThreadID, "labelIds": m.Labels, "snippet": snippet,
		"internalDate": strconv.FormatInt(m.Date, 10), "historyId": strconv.FormatUint(m.HistoryID, 10), "sizeEstimate": len(m.Text) + len(m.HTML) + 200}
	if format == "minimal" {
		return out
	}
	payload := map[string]any{"partId": "", "headers": m.headers(), "filename": ""}
	if m.HTML == "" {
		payload["mimeType"] = "text/plain"
		payload["body"] = map[string]any{"size": len(m.Text), "data": b64(m.Text)}
	} else {
		payload["mimeType"] = "multipart/alternative"
		payload["body"] = map[string]any{"size": 0}
		payload["parts"] = []map[string]any{
			{"partId": "0", "mimeType": "text/plain", "filename": "", "headers": []map[string]string{{"name": "Content-Type", "value": "text/plain; charset=UTF-8"}}, "body": map[string]any{"size": len(m.Text), "data": b64(m.Text)}},
			{"partId": "1", "mimeType": "text/html", "filename": "", "headers": []map[string]string{{"name": "Content-Type", "value": "text/html; charset=UTF-8"}}, "body": map[string]any{"size": len(m.HTML), "data": b64(m.HTML)}},
		}
	}
	if format == "metadata" {
		payload = map[string]any{"headers": only(m.headers(), metadataHeaders), "mimeType": payload["mimeType"]}
	}
	out["payload"] = payload
	return out
}

func (s *Server) addMessage(m *message) *message {
	s.nextMsg++
	m.ID = fmt.Sprintf("18c%013x", s.nextMsg)
	if m.ThreadID == "" {
		m.ThreadID = m.ID
	}
	if m.Date == 0 {
		m.Date = s.now().UnixMilli()
	}
	if m.MessageID == "" {
		m.MessageID = "<" + m.ID + "@mail.example.com>"
	}
	s.messages = append(s.messages, m)
	s.record(historyRecord{added: []string{m.ID}}, m)
	return m
}

// historyRecord is one change of the mailbox, as users.history.list
// lists it: messages added, or labels added to or removed from messages.
type historyRecord struct {
	id            uint64
	added         []string
	labelsAdded   map[string][]string // message id → label ids
	labelsRemoved map[string][]string
}

// historyStep is how far apart two history ids are: Gmail's increase but
// are "not contiguous with random gaps in between valid IDs".
const historyStep = 7

// record stamps a change with the next history id, and the messages it
// changed with it (s.mu is held).
func (s *Server) record(h historyRecord, changed ...*message) {
	s.historyID += historyStep
	h.id = s.historyID
	s.history = append(s.history, h)
	for _, m := range changed {
		m.HistoryID = h.id
	}
}

func (s *Server) gmailProfile(w http.ResponseWriter, r *http.Request) bool {
	threads := map[string]bool{}
	for _, m := range s.messages {
		threads[m.ThreadID] = true
	}
	writeJSON(w, http.StatusOK, map[string]any{"emailAddress": s.account, "messagesTotal": len(s.messages), "threadsTotal": len(threads),
		"historyId": strconv.FormatUint(s.historyID, 10)})
	return false
}

// gmailHistory answers users.history.list: the records after
// startHistoryId, oldest first, of the historyTypes asked (all when none)
// and, with labelId, only those whose messages carry that label now; in
// pages of maxResults records (default 100, at most 500) with a
// nextPageToken, and the mailbox's current historyId on every page. A
// startHistoryId older than the history the mailbox keeps is answered
// 404, as Gmail answers an expired one: the client does a full sync.
func (s *Server) gmailHistory(w http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query()
	start, err := strconv.ParseUint(q.Get("startHistoryId"), 10, 64)
	if err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", "Invalid startHistoryId: "+q.Get("startHistoryId"))
		return false
	}
	if start < s.historyFloor {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "Requested entity was not found.")
		return false
	}
	types := map[string]bool{}
	for _, t := range q["historyTypes"] {
		switch t {
		case "messageAdded", "messageDeleted", "labelAdded", "labelRemoved":
			types[t] = true
		default:
			apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", "Invalid value for historyTypes: "+t)
			return false
		}
	}
	want := func(t string) bool { return len(types) == 0 || types[t] }
	label := q.Get("labelId")
	ref := func(id string) (map[string]any, bool) {
		m := s.message(id)
		if m == nil || (label != "" && !slices.Contains(m.Labels, label)) {
			return nil, false
		}
		return map[string]any{"id": m.ID, "threadId": m.ThreadID, "labelIds": m.Labels}, true
	}
	var records []map[string]any
	for _, h := range s.history {
		if h.id <= start {
			continue
		}
		rec := map[string]any{"id": strconv.FormatUint(h.id, 10)}
		var msgs []map[string]any
		if want("messageAdded") {
			var added []map[string]any
			for _, id := range h.added {
				if m, ok := ref(id); ok {
					added = append(added, map[string]any{"message": m})
					msgs = append(msgs, map[string]any{"id": m["id"], "threadId": m["threadId"]})
				}
			}
			if added != nil {
				rec["messagesAdded"] = added
			}
		}
		for _, kind := range []struct {
			typ, field string
			changes    map[string][]string
		}{{"labelAdded", "labelsAdded", h.labelsAdded}, {"labelRemoved", "labelsRemoved", h.labelsRemoved}} {
			if !want(kind.typ) || len(kind.changes) == 0 {
				continue
			}
			var out []map[string]any
			for _, id := range sortedKeys(kind.changes) {
				if m, ok := ref(id); ok {
					out = append(out, map[string]any{"message": m, "labelIds": kind.changes[id]})
					msgs = append(msgs, map[string]any{"id": m["id"], "threadId": m["threadId"]})
				}
			}
			if out != nil {
				rec[kind.field] = out
			}
		}
		if msgs != nil {
			rec["messages"] = msgs
			records = append(records, rec)
		}
	}
	max := 100
	if n, err := strconv.Atoi(q.Get("maxResults")); err == nil && n > 0 && n <= 500 {
		max = n
	}
	max = min(max, s.pageMax)
	from, _ := strconv.Atoi(q.Get("pageToken"))
	if from < 0 || from > len(records) {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", "Invalid pageToken")
		return false
	}
	to := min(from+max, len(records))
	out := map[string]any{"historyId": strconv.FormatUint(s.historyID, 10)}
	if to > from {
		out["history"] = records[from:to]
	}
	if to < len(records) {
		out["nextPageToken"] = strconv.Itoa(to)
	}
	writeJSON(w, http.StatusOK, out)
	return false
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// matches applies the Gmail search operators the fake knows: after:,
// before: (epoch seconds or yyyy/mm/dd), rfc822msgid:, in:, label:, from:,
// to:, subject:, and words (anywhere). Spam and trash are left out unless
// asked for, as Gmail does.
func (s *Server) matches(m *message, q string) bool {
	has := func(id string) bool {
		for _, l := range m.Labels {
			if strings.EqualFold(l, id) {
				return true
			}
		}
		return false
	}
	if (has("SPAM") || has("TRASH")) && !strings.Contains(q, "in:spam") && !strings.Contains(q, "in:trash") {
		return false
	}
	for _, tok := range strings.Fields(q) {
		k, v, op := strings.Cut(tok, ":")
		v = strings.Trim(v, `"`)
		lc := strings.ToLower
		switch {
		case op && k == "after":
			if t, ok := parseWhen(v); !ok || m.Date/1000 < t {
				return false
			}
		case op && k == "before":
			if t, ok := parseWhen(v); !ok || m.Date/1000 >= t {
				return false
			}
		case op && k == "rfc822msgid":
			if strings.Trim(m.MessageID, "<>") != strings.Trim(v, "<>") {
				return false
			}
		case op && (k == "in" || k == "label"):
			id := s.labelID(v)
			if id == "" || !has(id) {
				return false
			}
		case op && k == "from":
			if !strings.Contains(lc(m.From), lc(v)) {
				return false
			}
		case op && k == "to":
			if !strings.Contains(lc(m.To+" "+m.Cc), lc(v)) {
				return false
			}
		case op && k == "subject":
			if !strings.Contains(lc(m.Subject), lc(v)) {
				return false
			}
		default:
			if !strings.Contains(lc(m.From+" "+m.To+" "+m.Subject+" "+m.Text), lc(strings.Trim(tok, `"`))) {
				return false
			}
		}
	}
	return true
}

func fmtDate(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC1123Z) }

func dateUnix(y, m, d int) int64 { return time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC).Unix() }

func parseWhen(v string) (int64, bool) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, true
	}
	var y, mo, d int
	if _, err := fmt.Sscanf(v, "%d/%d/%d", &y, &mo, &d); err == nil {
		return dateUnix(y, mo, d), true
	}
	return 0, false
}

func (s *Server) labelID(nameOrID string) string {
	for _, l := range s.labels {
		if strings.EqualFold(l.ID, nameOrID) || strings.EqualFold(l.Name, nameOrID) {
			return l.ID
		}
	}
	return ""
}

func (s *Server) gmailList(w http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query()
	max := 100
	if n, err := strconv.Atoi(q.Get("maxResults")); err == nil && n > 0 && n <= 500 {
		max = n
	}
	max = min(max, s.pageMax)
	start, _ := strconv.Atoi(q.Get("pageToken"))
	var found []*message
	for i := len(s.messages) - 1; i >= 0; i-- { // newest first
		if m := s.messages[i]; s.matches(m, q.Get("q")) && s.labelled(m, q["labelIds"]) {
			found = append(found, m)
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].Date > found[j].Date })
	out := map[string]any{"resultSizeEstimate": len(found)}
	var page []map[string]string
	for i := start; i < len(found) && i < start+max; i++ {
		page = append(page, map[string]string{"id": found[i].ID, "threadId": found[i].ThreadID})
	}
	if page != nil {
		out["messages"] = page
	}
	if start+max < len(found) {
		out["nextPageToken"] = strconv.Itoa(start + max)
	}
	writeJSON(w, http.StatusOK, out)
	return false
}

// labelled says m carries every label of ids (messages.list's labelIds).
func (s *Server) labelled(m *message, ids []string) bool {
	for _, id := range ids {
		if !slices.Contains(m.Labels, id) {
			return false
		}
	}
	return true
}

func (s *Server) message(id string) *message {
	for _, m := range s.messages {
		if m.ID == id {
			return m
		}
	}
	return nil
}

func (s *Server) gmailGet(w http.ResponseWriter, r *http.Request) bool {
	m := s.message(r.PathValue("id"))
	if m == nil {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "Requested entity was not found.")
		return false
	}
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "full"
	}
	writeJSON(w, http.StatusOK, m.json(format, r.URL.Query()["metadataHeaders"]...))
	return false
}

// gmailThread answers users.threads.get: the thread's messages, oldest first.
func (s *Server) gmailThread(w http.ResponseWriter, r *http.Request) bool {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "full"
	}
	msgs := []map[string]any{}
	var hist uint64
	for _, m := range s.messages {
		if m.ThreadID == r.PathValue("id") {
			msgs = append(msgs, m.json(format, r.URL.Query()["metadataHeaders"]...))
			hist = max(hist, m.HistoryID)
		}
	}
	if len(msgs) == 0 {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "Requested entity was not found.")
		return false
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "historyId": strconv.FormatUint(hist, 10), "messages": msgs})
	return false
}

// gmailSend takes users.messages.send's {raw, threadId}: raw is an RFC 822
// message, base64url encoded. Gmail may replace the Message-ID a client
// sets (the fake always does: a sender finds its mail by another header);
// other headers are kept. A message joins threadId only as Gmail's rule
// says: its In-Reply-To or References name a message of the thread, and
// the subjects match (Re:/Fwd: aside); otherwise it starts a new thread.
func (s *Server) gmailSend(w http.ResponseWriter, r *http.Request) bool {
	var body struct {
		Raw      string `json:"raw"`
		ThreadID string `json:"threadId"`
	}
	if err := decode(r, &body); err != nil || body.Raw == "" {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", "Invalid value for ByteString: raw is required")
		return false
	}
	raw, err := base64.URLEncoding.DecodeString(body.Raw)
	if err != nil {
		raw, err = base64.RawURLEncoding.DecodeString(body.Raw)
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", "Invalid value at 'message.raw' (TYPE_BYTES), Base64 decoding failed")
		return false
	}
	msg, err := mail.ReadMessage(strings.NewReader(string(raw)))
	if err != nil || msg.Header.Get("To") == "" {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", "Invalid To header")
		return false
	}
	text, _ := io.ReadAll(msg.Body)
	var extra [][2]string
	for k, vs := range msg.Header {
		switch k {
		case "To", "Cc", "Subject", "Message-Id", "From", "Date", "Mime-Version", "Content-Type", "Content-Transfer-Encoding":
			continue
		}
		for _, v := range vs {
			extra = append(extra, [2]string{k, v})
		}
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i][0] < extra[j][0] })
	subject := decodeHeader(msg.Header.Get("Subject"))
	thread := ""
	if body.ThreadID != "" && s.threads(body.ThreadID, msg.Header.Get("In-Reply-To")+" "+msg.Header.Get("References"), subject) {
		thread = body.ThreadID
	}
	m := s.addMessage(&message{ThreadID: thread, Labels: []string{"SENT"}, From: s.account, To: msg.Header.Get("To"),
		Cc: msg.Header.Get("Cc"), Subject: subject, Text: string(text), Raw: string(raw), Extra: extra})
	m.MessageID = "<CA" + m.ID + "@mail.gmail.com>"
	s.writes["gmail.send"]++
	writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "threadId": m.ThreadID, "labelIds": m.Labels})
	return true
}

// threads says a message whose In-Reply-To/References are refs and whose
// subject is subject joins thread id.
func (s *Server) threads(id, refs, subject string) bool {
	bare := func(t string) string {
		t = strings.TrimSpace(t)
		for {
			l := strings.ToLower(t)
			cut := false
			for _, p := range []string{"re:", "fwd:", "fw:"} {
				if strings.HasPrefix(l, p) {
					t, cut = strings.TrimSpace(t[len(p):]), true
					break
				}
			}
			if !cut {
				return t
			}
		}
	}
	named, sameSubject := false, false
	for _, m := range s.messages {
		if m.ThreadID != id {
			continue
		}
		if strings.Contains(refs, m.MessageID) {
			named = true
		}
		if strings.EqualFold(bare(m.Subject), bare(subject)) {
			sameSubject = true
		}
	}
	return named && sameSubject
}

func decodeHeader(v string) string {
	dec := new(mime.WordDecoder)
	if s, err := dec.DecodeHeader(v); err == nil {
		return s
	}
	return v
}

func (s *Server) gmailModify(w http.ResponseWriter, r *http.Request) bool {
	var body struct {
		Add    []string `json:"addLabelIds"`
		Remove []string `json:"removeLabelIds"`
	}
	if err := decode(r, &body); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", err.Error())
		return false
	}
	m := s.message(r.PathValue("id"))
	if m == nil {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "Requested entity was not found.")
		return false
	}
	for _, id := range append(append([]string{}, body.Add...), body.Remove...) {
		if s.labelID(id) != id {
			apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", "Invalid label: "+id)
			return false
		}
	}
	set := map[string]bool{}
	for _, l := range m.Labels {
		set[l] = true
	}
	h := historyRecord{labelsAdded: map[string][]string{}, labelsRemoved: map[string][]string{}}
	for _, l := range body.Add {
		if !set[l] {
			h.labelsAdded[m.ID] = append(h.labelsAdded[m.ID], l)
		}
		set[l] = true
	}
	for _, l := range body.Remove {
		if set[l] {
			h.labelsRemoved[m.ID] = append(h.labelsRemoved[m.ID], l)
		}
		delete(set, l)
	}
	m.Labels = m.Labels[:0]
	for l := range set {
		m.Labels = append(m.Labels, l)
	}
	sort.Strings(m.Labels)
	if len(h.labelsAdded)+len(h.labelsRemoved) > 0 {
		s.record(h, m)
	}
	s.writes["gmail.modifyLabels"]++
	writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "threadId": m.ThreadID, "labelIds": m.Labels})
	return true
}

func (s *Server) gmailLabels(w http.ResponseWriter, r *http.Request) bool {
	writeJSON(w, http.StatusOK, map[string]any{"labels": s.labels})
	return false
}

func (s *Server) gmailCreateLabel(w http.ResponseWriter, r *http.Request) bool {
	var body label
	if err := decode(r, &body); err != nil || strings.TrimSpace(body.Name) == "" {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalidArgument", "Invalid label name")
		return false
	}
	if s.labelID(body.Name) != "" {
		apiError(w, http.StatusConflict, "ALREADY_EXISTS", "duplicate", "Label name exists or conflicts")
		return false
	}
	l := label{ID: fmt.Sprintf("Label_%d", len(s.labels)), Name: body.Name, Type: "user"}
	s.labels = append(s.labels, l)
	writeJSON(w, http.StatusOK, l)
	return true
}
