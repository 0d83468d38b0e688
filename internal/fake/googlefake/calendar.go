package googlefake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // the calendars' time zone, wherever the fake runs
)

type event struct {
	ID        string
	Summary   string
	Start     map[string]any
	End       map[string]any
	Attendees []map[string]any
	Created   time.Time
	Updated   time.Time
	Extra     map[string]any // description, location
}

// at answers an event's start or end as Calendar does: a time in the
// calendar's time zone (whatever offset it was given with), a date as it is.
func at(v map[string]any, zone *time.Location) map[string]any {
	out := map[string]any{}
	for k, x := range v {
		out[k] = x
	}
	if t, ok := timeOf(v); ok && v["dateTime"] != nil {
		out["dateTime"] = t.In(zone).Format(time.RFC3339)
		if out["timeZone"] == nil {
			out["timeZone"] = zone.String()
		}
	}
	return out
}

func (e *event) json(cal string, zone *time.Location) map[string]any {
	out := map[string]any{"kind": "calendar#event", "etag": fmt.Sprintf("\"%d\"", e.Updated.UnixMicro()), "id": e.ID, "status": "confirmed",
		"htmlLink": "https://www.google.com/calendar/event?eid=" + e.ID, "created": e.Created.UTC().Format(time.RFC3339Nano),
		"updated": e.Updated.UTC().Format(time.RFC3339Nano), "summary": e.Summary, "start": at(e.Start, zone), "end": at(e.End, zone),
		"iCalUID": e.ID + "@google.com", "sequence": 0, "organizer": map[string]any{"email": cal, "self": true}}
	if len(e.Attendees) > 0 {
		out["attendees"] = e.Attendees
	}
	for k, v := range e.Extra {
		out[k] = v
	}
	return out
}

// CalendarZone is the time zone of every calendar of the fake: Calendar
// answers times in the calendar's zone, not in the offset they were sent with.
const CalendarZone = "America/Los_Angeles"

func (s *Server) zone() *time.Location {
	loc, err := time.LoadLocation(CalendarZone)
	if err != nil {
		panic(err) // time/tzdata is linked in
	}
	return loc
}

// notify records the invitations or updates Calendar would mail the
// attendees: sendUpdates all (or the older sendNotifications=true), or
// externalOnly (guests outside the account's domain); none by default.
func (s *Server) notify(r *http.Request, e *event) {
	q := r.URL.Query()
	mode := q.Get("sendUpdates")
	if mode == "" && q.Get("sendNotifications") == "true" {
		mode = "all"
	}
	_, domain, _ := strings.Cut(s.account, "@")
	for _, a := range e.Attendees {
		addr, _ := a["email"].(string)
		if mode == "all" || (mode == "externalOnly" && !strings.HasSuffix(addr, "@"+domain)) {
			s.notified = append(s.notified, e.ID+" "+addr)
		}
	}
}

func (s *Server) cal(id string) (string, map[string]*event) {
	if id == "primary" {
		id = s.account
	}
	c, ok := s.calendar[id]
	if !ok {
		c = map[string]*event{}
		s.calendar[id] = c
	}
	return id, c
}

// eventIDRe is Calendar's rule for client-chosen ids: base32hex, 5 to 1024.
var eventIDRe = regexp.MustCompile(`^[a-v0-9]{5,}$`)

type eventBody struct {
	ID          string           `json:"id"`
	Summary     *string          `json:"summary"`
	Description *string          `json:"description"`
	Location    *string          `json:"location"`
	Start       map[string]any   `json:"start"`
	End         map[string]any   `json:"end"`
	Attendees   []map[string]any `json:"attendees"`
}

func timeOf(v map[string]any) (time.Time, bool) {
	if s, ok := v["dateTime"].(string); ok {
		t, err := time.Parse(time.RFC3339, s)
		return t, err == nil
	}
	if s, ok := v["date"].(string); ok {
		t, err := time.Parse("2006-01-02", s)
		return t, err == nil
	}
	return time.Time{}, false
}

func (s *Server) calInsert(w http.ResponseWriter, r *http.Request) bool {
	var b eventBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		badRange(w, "Invalid JSON payload received. "+err.Error())
		return false
	}
	calID, c := s.cal(r.PathValue("cal"))
	start, ok1 := timeOf(b.Start)
	end, ok2 := timeOf(b.End)
	switch {
	case !ok1 || !ok2:
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "required", "Missing time zone definition for start time.")
		return false
	case end.Before(start):
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "timeRangeEmpty", "The specified time range is empty.")
		return false
	case b.ID != "" && (!eventIDRe.MatchString(b.ID) || len(b.ID) > 1024):
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "invalid", "Invalid resource id value.")
		return false
	}
	if b.ID == "" {
		b.ID = fmt.Sprintf("%026x", time.Now().UnixNano())[:26]
	}
	if _, dup := c[b.ID]; dup {
		apiError(w, http.StatusConflict, "ALREADY_EXISTS", "duplicate", "The requested identifier already exists.")
		return false
	}
	now := s.now()
	e := &event{ID: b.ID, Start: b.Start, End: b.End, Attendees: attendees(b.Attendees), Created: now, Updated: now, Extra: map[string]any{}}
	apply(e, b)
	c[e.ID] = e
	s.writes["calendar.createEvent"]++
	s.notify(r, e)
	writeJSON(w, http.StatusOK, e.json(calID, s.zone()))
	return true
}

func attendees(in []map[string]any) []map[string]any {
	out := []map[string]any{}
	for _, a := range in {
		out = append(out, map[string]any{"email": a["email"], "responseStatus": "needsAction"})
	}
	return out
}

func apply(e *event, b eventBody) {
	if b.Summary != nil {
		e.Summary = *b.Summary
	}
	if b.Description != nil {
		e.Extra["description"] = *b.Description
	}
	if b.Location != nil {
		e.Extra["location"] = *b.Location
	}
	if b.Start != nil {
		e.Start = b.Start
	}
	if b.End != nil {
		e.End = b.End
	}
	if b.Attendees != nil {
		e.Attendees = attendees(b.Attendees)
	}
}

func (s *Server) calGet(w http.ResponseWriter, r *http.Request) bool {
	calID, c := s.cal(r.PathValue("cal"))
	e, ok := c[r.PathValue("id")]
	if !ok {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "Not Found")
		return false
	}
	writeJSON(w, http.StatusOK, e.json(calID, s.zone()))
	return false
}

func (s *Server) calPatch(w http.ResponseWriter, r *http.Request) bool {
	var b eventBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		badRange(w, "Invalid JSON payload received. "+err.Error())
		return false
	}
	calID, c := s.cal(r.PathValue("cal"))
	e, ok := c[r.PathValue("id")]
	if !ok {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "Not Found")
		return false
	}
	apply(e, b)
	e.Updated = s.now()
	s.writes["calendar.updateEvent"]++
	s.notify(r, e)
	writeJSON(w, http.StatusOK, e.json(calID, s.zone()))
	return true
}

func (s *Server) calList(w http.ResponseWriter, r *http.Request) bool {
	calID, c := s.cal(r.PathValue("cal"))
	q := r.URL.Query()
	var from, to time.Time
	var err error
	if v := q.Get("timeMin"); v != "" {
		if from, err = time.Parse(time.RFC3339, v); err != nil {
			apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "badRequest", "Bad Request")
			return false
		}
	}
	if v := q.Get("timeMax"); v != "" {
		if to, err = time.Parse(time.RFC3339, v); err != nil {
			apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "badRequest", "Bad Request")
			return false
		}
	}
	var es []*event
	for _, e := range c {
		st, _ := timeOf(e.Start)
		en, _ := timeOf(e.End)
		if (!from.IsZero() && !en.After(from)) || (!to.IsZero() && !st.Before(to)) {
			continue
		}
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool {
		a, _ := timeOf(es[i].Start)
		b, _ := timeOf(es[j].Start)
		return a.Before(b) || (a.Equal(b) && es[i].ID < es[j].ID)
	})
	items := []map[string]any{}
	for _, e := range es {
		items = append(items, e.json(calID, s.zone()))
	}
	writeJSON(w, http.StatusOK, s.calPage(q, calID, items))
	return false
}

// calPage cuts a listing into pages of maxResults (at most 2500, and at
// most the fake's page size): a page may be short, and, as Calendar may
// answer, the second page of a listing is empty while its nextPageToken
// says more follow.
func (s *Server) calPage(q url.Values, calID string, items []map[string]any) map[string]any {
	limit, err := strconv.Atoi(q.Get("maxResults"))
	if err != nil || limit <= 0 || limit > 2500 {
		limit = 250
	}
	limit = min(limit, s.pageMax)
	tok := q.Get("pageToken")
	start, _ := strconv.Atoi(strings.TrimLeft(tok, "ep"))
	out := map[string]any{"kind": "calendar#events", "summary": calID, "timeZone": CalendarZone, "items": []map[string]any{}}
	switch {
	case strings.HasPrefix(tok, "e"):
		out["nextPageToken"] = "p" + strconv.Itoa(start)
	default:
		end := min(start+limit, len(items))
		out["items"] = items[start:end]
		if end < len(items) && tok == "" {
			out["nextPageToken"] = "e" + strconv.Itoa(end)
		} else if end < len(items) {
			out["nextPageToken"] = "p" + strconv.Itoa(end)
		}
	}
	return out
}
