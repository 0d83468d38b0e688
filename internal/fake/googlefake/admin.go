package googlefake

import (
	"net/http"
	"sort"
	"strconv"
)

// adminAddMessage delivers a message to the inbox: {from, to, subject,
// text, html, date}. date (ms since 1970) is its internalDate when given:
// mail that comes into the mailbox later than its date, as mail Gmail
// indexes late, or delivers after a delay, does.
func (s *Server) adminAddMessage(w http.ResponseWriter, r *http.Request) {
	var b struct {
		From, To, Subject, Text, HTML string
		Date                          int64
	}
	if err := decode(r, &b); err != nil || b.From == "" {
		http.Error(w, `give {"from": "…", "to": "…", "subject": "…", "text": "…"}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.To == "" {
		b.To = s.account
	}
	m := s.addMessage(&message{From: b.From, To: b.To, Subject: b.Subject, Text: b.Text, HTML: b.HTML, Labels: []string{"INBOX", "UNREAD"}, Date: b.Date})
	writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "threadId": m.ThreadID, "historyId": strconv.FormatUint(m.HistoryID, 10)})
}

// adminExpireHistory forgets the mailbox's history so far, as Gmail does
// after a week or so: users.history.list answers 404 to every history id
// given out until now, and a client syncs afresh from the profile's new
// one (the mailbox's history moved on).
func (s *Server) adminExpireHistory(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.historyID += historyStep
	s.history, s.historyFloor = nil, s.historyID
	writeJSON(w, http.StatusOK, map[string]any{"historyId": strconv.FormatUint(s.historyID, 10)})
}

// adminMessages lists every message, oldest first, with its labels by name
// and its Message-ID: what a test counts.
func (s *Server) adminMessages(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, m := range s.messages {
		var names []string
		for _, id := range m.Labels {
			for _, l := range s.labels {
				if l.ID == id {
					names = append(names, l.Name)
				}
			}
		}
		sort.Strings(names)
		headers := map[string]string{}
		for _, x := range m.Extra {
			headers[x[0]] = x[1]
		}
		out = append(out, map[string]any{"id": m.ID, "threadId": m.ThreadID, "from": m.From, "to": m.To, "subject": m.Subject,
			"text": m.Text, "labels": names, "messageId": m.MessageID, "headers": headers})
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": out})
}

// adminSheet returns a sheet's rows ({"rows": [[…]], "notes": […]}); the
// first sheet unless ?sheet= names one.
func (s *Server) adminSheet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.spreadsheet(r.PathValue("id")).sheet(r.URL.Query().Get("sheet"))
	if sh == nil {
		http.Error(w, "no such sheet", http.StatusNotFound)
		return
	}
	rows, notes := [][]string{}, []string{}
	for _, row := range sh.rows {
		vals := []string{}
		note := ""
		for i, c := range row {
			vals = append(vals, c.value)
			if i == 0 {
				note = c.note
			}
		}
		rows = append(rows, vals)
		notes = append(notes, note)
	}
	writeJSON(w, http.StatusOK, map[string]any{"rows": rows, "notes": notes})
}

// adminAddRow appends a row as a person typing it would: {values, sheet?}.
func (s *Server) adminAddRow(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Sheet  string   `json:"sheet"`
		Values []string `json:"values"`
	}
	if err := decode(r, &b); err != nil {
		http.Error(w, `give {"values": ["…"]}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.spreadsheet(r.PathValue("id")).sheet(b.Sheet)
	if sh == nil {
		http.Error(w, "no such sheet", http.StatusNotFound)
		return
	}
	var row []cell
	for _, v := range b.Values {
		row = append(row, cell{value: v})
	}
	sh.rows = append(sh.rows, row)
	writeJSON(w, http.StatusOK, map[string]any{"row": len(sh.rows)})
}

func (s *Server) adminCalendar(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	calID, c := s.cal(r.PathValue("cal"))
	items := []map[string]any{}
	for _, e := range c {
		items = append(items, e.json(calID, s.zone()))
	}
	sort.Slice(items, func(i, j int) bool { return items[i]["id"].(string) < items[j]["id"].(string) })
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "notified": append([]string{}, s.notified...)})
}

// adminRevoke revokes every grant, as a person removing keep's access does.
func (s *Server) adminRevoke(w http.ResponseWriter, r *http.Request) {
	s.revokeAll()
	writeJSON(w, http.StatusOK, map[string]any{"revoked": true})
}

// adminExpire expires every access token (a refresh gets new ones).
func (s *Server) adminExpire(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.access = map[string]grant{}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"expired": true})
}

// adminWrites counts the writes each method applied.
func (s *Server) adminWrites(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.writes)
}

// adminPageMax sets the most items a page of a list holds: {"max": 3}.
func (s *Server) adminPageMax(w http.ResponseWriter, r *http.Request) {
	var b struct{ Max int }
	if err := decode(r, &b); err != nil || b.Max < 1 {
		http.Error(w, `give {"max": 3}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.pageMax = b.Max
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"max": b.Max})
}
