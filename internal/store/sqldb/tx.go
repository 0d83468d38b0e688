package sqldb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Tx is store.Tx over SQL: the one implementation of the ledger's
// statements, for every SQL backend. The SQL is written once, with ?
// placeholders and what SQLite and PostgreSQL both accept; a backend's
// Runner adapts the placeholders (PostgreSQL's $1) and runs it inside the
// backend's own transaction.
type Tx struct{ r Runner }

// NewTx gives a backend's transaction the ledger's operations.
func NewTx(r Runner) *Tx { return &Tx{r: r} }

// Runner returns the transaction's runner, for a backend's own statements.
func (t *Tx) Runner() Runner { return t.r }

func notFound(what, id string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %q: %w", what, id, kt.ErrNotFound)
	}
	return fmt.Errorf("read %s %q: %w", what, id, err)
}

func jsonText(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

func rawJSON(s sql.NullString) json.RawMessage {
	if !s.Valid || s.String == "" {
		return nil
	}
	return json.RawMessage(s.String)
}

func strList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func parseList(s string) []string {
	var v []string
	_ = json.Unmarshal([]byte(s), &v)
	return v
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// --- workflows and versions ---

func (t *Tx) WorkflowGet(name string) (kt.Workflow, error) {
	var w kt.Workflow
	var paused int
	var digest string
	err := t.r.QueryRow(`SELECT name, active_version, paused, paused_reason, files_root, policy, created_at, updated_at, digest FROM workflows WHERE name=?`, name).
		Scan(&w.Name, &w.ActiveVersion, &paused, &w.PausedReason, &w.FilesRoot, &w.Policy, &w.CreatedAt, &w.UpdatedAt, &digest)
	if err != nil {
		return w, notFound("workflow", name, err)
	}
	w.Paused = paused != 0
	return w, checkWorkflow(w, digest)
}

func (t *Tx) WorkflowList() ([]kt.Workflow, error) {
	rows, err := t.r.Query(`SELECT name, active_version, paused, paused_reason, files_root, policy, created_at, updated_at FROM workflows ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Workflow
	for rows.Next() {
		var w kt.Workflow
		var paused int
		if err := rows.Scan(&w.Name, &w.ActiveVersion, &paused, &w.PausedReason, &w.FilesRoot, &w.Policy, &w.CreatedAt, &w.UpdatedAt); err != nil {
			return nil, err
		}
		w.Paused = paused != 0
		out = append(out, w)
	}
	return out, rows.Err()
}

func (t *Tx) WorkflowPut(w kt.Workflow) error {
	return t.write(fmt.Sprintf("save workflow %s", w.Name), `INSERT INTO workflows(name, active_version, paused, paused_reason, files_root, policy, created_at, updated_at, digest) VALUES(?,?,?,?,?,?,?,?,?)
ON CONFLICT(name) DO UPDATE SET active_version=excluded.active_version, paused=excluded.paused, paused_reason=excluded.paused_reason, files_root=excluded.files_root, policy=excluded.policy, updated_at=excluded.updated_at, digest=excluded.digest`,
		w.Name, w.ActiveVersion, b2i(w.Paused), w.PausedReason, w.FilesRoot, w.Policy, w.CreatedAt, w.UpdatedAt, workflowDigest(w.Name, w.FilesRoot, w.Policy))
}

func (t *Tx) VersionInsert(v *kt.Version) error {
	if err := t.r.QueryRow(`SELECT coalesce(max(id),0)+1 FROM versions WHERE workflow=?`, v.Workflow).Scan(&v.ID); err != nil {
		return err
	}
	return t.write(fmt.Sprintf("save version of %s", v.Workflow), `INSERT INTO versions(workflow, id, major, minor, script, file, test, created_at, digest) VALUES(?,?,?,?,?,?,?,?,?)`,
		v.Workflow, v.ID, v.Major, v.Minor, v.Script, v.File, v.Test, v.CreatedAt, versionDigest(*v))
}

const versionCols = `workflow, id, major, minor, script, file, test, created_at, digest`

// scanVersion reads a version and checks it against its digest: a
// damaged script is an error here, never run (issue 44).
func scanVersion(sc interface{ Scan(...any) error }) (kt.Version, error) {
	var v kt.Version
	var digest string
	if err := sc.Scan(&v.Workflow, &v.ID, &v.Major, &v.Minor, &v.Script, &v.File, &v.Test, &v.CreatedAt, &digest); err != nil {
		return v, err
	}
	return v, checkVersion(v, digest)
}

func (t *Tx) VersionGet(workflow string, id int64) (kt.Version, error) {
	v, err := scanVersion(t.r.QueryRow(`SELECT `+versionCols+` FROM versions WHERE workflow=? AND id=?`, workflow, id))
	if kt.IsDamaged(err) {
		return v, err
	}
	if err != nil {
		return v, notFound("version", fmt.Sprintf("%s@%d", workflow, id), err)
	}
	return v, nil
}

func (t *Tx) VersionList(workflow string) ([]kt.Version, error) {
	rows, err := t.r.Query(`SELECT `+versionCols+` FROM versions WHERE workflow=? ORDER BY id`, workflow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Version
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// --- handlers ---

const handlerCols = `workflow, name, type, state, dirty, wake_at, next_run_at, queued, updated_at, quiet_run`

func scanHandler(sc interface{ Scan(...any) error }) (kt.Handler, error) {
	var h kt.Handler
	var state sql.NullString
	var dirty, queued int
	err := sc.Scan(&h.Workflow, &h.Name, &h.Type, &state, &dirty, &h.WakeAt, &h.NextRunAt, &queued, &h.UpdatedAt, &h.QuietRun)
	h.State = rawJSON(state)
	h.Dirty, h.Queued = dirty != 0, queued != 0
	return h, err
}

func (t *Tx) HandlerGet(workflow, name string) (kt.Handler, error) {
	h, err := scanHandler(t.r.QueryRow(`SELECT `+handlerCols+` FROM handlers WHERE workflow=? AND name=?`, workflow, name))
	if err != nil {
		return h, notFound("handler", workflow+"/"+name, err)
	}
	return h, nil
}

func (t *Tx) HandlerList(workflow string) ([]kt.Handler, error) {
	rows, err := t.r.Query(`SELECT `+handlerCols+` FROM handlers WHERE workflow=? ORDER BY name`, workflow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Handler
	for rows.Next() {
		h, err := scanHandler(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

func (t *Tx) HandlerPut(h kt.Handler) error {
	return t.write(fmt.Sprintf("save handler %s/%s", h.Workflow, h.Name), `INSERT INTO handlers(`+handlerCols+`) VALUES(?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(workflow, name) DO UPDATE SET type=excluded.type, state=excluded.state, dirty=excluded.dirty, wake_at=excluded.wake_at,
 next_run_at=excluded.next_run_at, queued=excluded.queued, updated_at=excluded.updated_at, quiet_run=excluded.quiet_run`,
		h.Workflow, h.Name, h.Type, jsonText(h.State), b2i(h.Dirty), h.WakeAt, h.NextRunAt, b2i(h.Queued), h.UpdatedAt, h.QuietRun)
}

func (t *Tx) HandlerAdvance(workflow, name string, state json.RawMessage, wakeAt, now int64) error {
	// CASE, not max/GREATEST: one statement for SQLite and PostgreSQL.
	return t.writeChanging(fmt.Sprintf("save handler %s/%s", workflow, name), store.ErrStale,
		`UPDATE handlers SET state=COALESCE(?, state), wake_at=?, updated_at=CASE WHEN updated_at < ? THEN ? ELSE updated_at+1 END WHERE workflow=? AND name=?`,
		jsonText(state), wakeAt, now, now, workflow, name)
}

// --- events ---

const eventCols = `id, workflow, topic, message_id, payload, status, reserved_by, created_by, caused_by, attempt, created_at, updated_at, pruned_at`

func scanEvent(sc interface{ Scan(...any) error }) (kt.Event, error) {
	var e kt.Event
	var payload, caused string
	err := sc.Scan(&e.ID, &e.Workflow, &e.Topic, &e.MessageID, &payload, &e.Status, &e.ReservedBy, &e.CreatedBy, &caused, &e.Attempt, &e.CreatedAt, &e.UpdatedAt, &e.PrunedAt)
	e.Payload = json.RawMessage(payload)
	e.CausedBy = parseList(caused)
	return e, err
}

func (t *Tx) queryEvents(q string, args ...any) ([]kt.Event, error) {
	rows, err := t.r.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func (t *Tx) EventPublish(e *kt.Event) (bool, error) {
	// A new message is the common case: insert it, and read the stored one
	// only when the insert finds it there (one statement instead of a read
	// and a write). The unique (workflow, topic, message_id) makes the
	// insert a no-op then, and the stored event is merged as before.
	fresh := kt.Published(nil, *e)
	err := t.r.QueryRow(`INSERT INTO events(workflow, topic, message_id, payload, status, reserved_by, created_by, caused_by, attempt, created_at, updated_at) VALUES(?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(workflow, topic, message_id) DO NOTHING RETURNING id`,
		fresh.Workflow, fresh.Topic, fresh.MessageID, string(fresh.Payload), fresh.Status, fresh.ReservedBy, fresh.CreatedBy, strList(fresh.CausedBy), fresh.Attempt, fresh.CreatedAt, fresh.UpdatedAt).Scan(&fresh.ID)
	if err == nil {
		*e = fresh
		return true, t.setCauses(e.ID, e.CausedBy)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("insert event %s/%s: %w", e.Topic, e.MessageID, err)
	}
	existing, err := t.EventGet(e.Workflow, e.Topic, e.MessageID)
	if err != nil {
		return false, err
	}
	merged := kt.Published(&existing, *e)
	if !kt.PublishChanges(existing, merged) {
		// The same event again: nothing is written, and e is the event
		// as stored (its UpdatedAt the stored one's).
		*e = existing
		return false, nil
	}
	*e = merged
	if err := t.write(fmt.Sprintf("update event %s/%s", e.Topic, e.MessageID), `UPDATE events SET payload=?, caused_by=?, status=?, reserved_by=?, attempt=?, updated_at=?, pruned_at=? WHERE id=?`,
		string(e.Payload), strList(e.CausedBy), e.Status, e.ReservedBy, e.Attempt, e.UpdatedAt, e.PrunedAt, e.ID); err != nil {
		return false, err
	}
	return false, t.setCauses(e.ID, e.CausedBy)
}

// setCauses records an event's causes; they only grow (kt.UnionCauses), so
// nothing is deleted.
func (t *Tx) setCauses(eventID int64, causes []string) error {
	for _, c := range causes {
		if err := t.write(fmt.Sprintf("record a cause of event %d", eventID), `INSERT INTO event_causes(event_id, input_id) VALUES(?,?) ON CONFLICT DO NOTHING`, eventID, c); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tx) DecisionAdd(d kt.Decision) error {
	return t.write(fmt.Sprintf("record the decision %s on %s", d.Action, d.Workflow), `INSERT INTO decisions(workflow, run_id, mutation_id, item_id, action, by, detail, at) VALUES(?,?,?,?,?,?,?,?)`,
		d.Workflow, d.RunID, d.MutationID, d.ItemID, d.Action, d.By, d.Detail, d.At)
}

func (t *Tx) DecisionList(workflow, runID string) ([]kt.Decision, error) {
	q := `SELECT id, workflow, run_id, mutation_id, item_id, action, by, detail, at FROM decisions WHERE workflow=?`
	args := []any{workflow}
	if runID != "" {
		q += ` AND run_id=?`
		args = append(args, runID)
	}
	rows, err := t.r.Query(q+` ORDER BY id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Decision
	for rows.Next() {
		var d kt.Decision
		if err := rows.Scan(&d.ID, &d.Workflow, &d.RunID, &d.MutationID, &d.ItemID, &d.Action, &d.By, &d.Detail, &d.At); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func (t *Tx) EventGet(workflow, topic, messageID string) (kt.Event, error) {
	e, err := scanEvent(t.r.QueryRow(`SELECT `+eventCols+` FROM events WHERE workflow=? AND topic=? AND message_id=?`, workflow, topic, messageID))
	if err != nil {
		return e, notFound("event", topic+"/"+messageID, err)
	}
	return e, nil
}

const pendingSQL = `SELECT ` + eventCols + ` FROM events WHERE workflow=? AND topic=? AND status='pending' AND reserved_by='' ORDER BY id LIMIT `

func (t *Tx) EventsPending(workflow, topic string, limit int) ([]kt.Event, error) {
	return t.queryEvents(pendingSQL+limitSQL(limit), workflow, topic)
}

func (t *Tx) EventsPendingWithin(workflow, topic string, limit, maxBytes int) ([]kt.Event, bool, error) {
	rows, err := t.r.Query(pendingSQL+limitSQL(limit), workflow, topic)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var out []kt.Event
	size := 0
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, false, err
		}
		if size += len(e.Payload) + len(e.MessageID); size > maxBytes && len(out) > 0 {
			return out, true, nil
		}
		out = append(out, e)
	}
	return out, false, rows.Err()
}

func (t *Tx) EventsReservedBy(runID string) ([]kt.Event, error) {
	return t.queryEvents(`SELECT `+eventCols+` FROM events WHERE reserved_by=? ORDER BY id`, runID)
}

func (t *Tx) EventsByInput(inputID string) ([]kt.Event, error) {
	return t.queryEvents(`SELECT `+prefixed("e.", eventCols)+` FROM events e JOIN event_causes c ON c.event_id=e.id WHERE c.input_id=? ORDER BY e.id`, inputID)
}

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

func (t *Tx) EventUpdate(e kt.Event) error {
	return t.write(fmt.Sprintf("update event %d", e.ID), `UPDATE events SET payload=?, status=?, reserved_by=?, attempt=?, updated_at=? WHERE id=?`,
		string(e.Payload), e.Status, e.ReservedBy, e.Attempt, e.UpdatedAt, e.ID)
}

// EventReserve and EventSettle compare the event's content and causes as
// well as its updated_at: a publish merged into it keeps the publisher's
// time, which may be the very millisecond of the copy's.
func (t *Tx) EventReserve(e kt.Event, runID string, now int64) error {
	return t.writeChanging(fmt.Sprintf("reserve event %s/%s for run %s", e.Topic, e.MessageID, runID), store.ErrEventChanged,
		`UPDATE events SET reserved_by=?, updated_at=? WHERE id=? AND status='pending' AND reserved_by IN ('', ?) AND attempt=? AND updated_at=? AND caused_by=? AND payload=?`,
		runID, now, e.ID, runID, e.Attempt, e.UpdatedAt, strList(e.CausedBy), string(e.Payload))
}

func (t *Tx) EventSettle(e kt.Event, runID string, final kt.EventStatus, now int64) error {
	return t.writeChanging(fmt.Sprintf("settle event %s/%s of run %s as %s", e.Topic, e.MessageID, runID, final), store.ErrStale,
		`UPDATE events SET status=?, updated_at=? WHERE id=? AND status='pending' AND reserved_by=? AND updated_at=? AND attempt=? AND caused_by=?`,
		final, now, e.ID, runID, e.UpdatedAt, e.Attempt, strList(e.CausedBy))
}

func (t *Tx) OldestPending(workflow string, topics []string) (int64, bool, error) {
	if len(topics) == 0 {
		return 0, false, nil
	}
	args := make([]any, 0, 2*len(topics))
	for _, tp := range topics {
		args = append(args, workflow, tp)
	}
	// The first pending event of each topic by id (ids grow with creation):
	// one index probe per topic, however many events wait.
	var at sql.NullInt64
	err := t.r.QueryRow(`SELECT min(created_at) FROM (`+strings.Repeat(`SELECT (SELECT created_at FROM events WHERE workflow=? AND topic=? AND status='pending' AND reserved_by='' ORDER BY id LIMIT 1) AS created_at UNION ALL `, len(topics)-1)+
		`SELECT (SELECT created_at FROM events WHERE workflow=? AND topic=? AND status='pending' AND reserved_by='' ORDER BY id LIMIT 1) AS created_at) AS firsts`, args...).Scan(&at)
	if err != nil {
		return 0, false, err
	}
	return at.Int64, at.Valid, nil
}

func (t *Tx) CountPending(workflow string) (int, error) {
	var n int
	err := t.r.QueryRow(`SELECT count(*) FROM events WHERE workflow=? AND status='pending'`, workflow).Scan(&n)
	return n, err
}

func (t *Tx) EventList(workflow string, f store.EventFilter) ([]kt.Event, error) {
	q, args := `SELECT `+eventCols+` FROM events WHERE workflow=? AND id>?`, []any{workflow, f.AfterID}
	if f.Topic != "" {
		q, args = q+` AND topic=?`, append(args, f.Topic)
	}
	switch {
	case f.Status == "":
	case slices.Contains(kt.EventStatuses, f.Status):
		// Written into the statement, not bound, so that a plan for the
		// pending ones can go by events_pending, which holds only them.
		q += ` AND status='` + string(f.Status) + `'`
	default:
		return nil, fmt.Errorf("list events of %s: %q is not an event status (%v)", workflow, f.Status, kt.EventStatuses)
	}
	switch f.Held {
	case store.HeldReserved:
		q += ` AND reserved_by<>''`
	case store.HeldFree:
		q += ` AND reserved_by=''`
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	return t.queryEvents(q+` ORDER BY id LIMIT `+limitSQL(limit), args...)
}

// TopicCounts reads the tallies (a row per topic and state), not the events.
func (t *Tx) TopicCounts(workflow string) ([]store.TopicCount, error) {
	rows, err := t.r.Query(`SELECT topic, status, n FROM tallies WHERE workflow=? AND kind='event' ORDER BY topic, status`, workflow)
	if err != nil {
		return nil, fmt.Errorf("count events: %w", err)
	}
	defer rows.Close()
	var out []store.TopicCount
	for rows.Next() {
		var topic, state string
		var n int
		if err := rows.Scan(&topic, &state, &n); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Topic != topic {
			out = append(out, store.TopicCount{Topic: topic})
		}
		c := &out[len(out)-1]
		switch kt.EventStatus(state) {
		case "reserved":
			c.Reserved += n
		case kt.EventPending:
			c.Pending += n
		case kt.EventConsumed:
			c.Consumed += n
		case kt.EventSkipped:
			c.Skipped += n
		}
	}
	return out, rows.Err()
}

// limitSQL writes a LIMIT as a number in the statement's text. SQLite
// re-prepares a statement whose LIMIT is a bound parameter every time the
// parameter is bound (the planner looks at its value), which made peek
// parse its SQL on every call.
func limitSQL(n int) string { return strconv.Itoa(n) }

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// --- inputs (items) ---

const itemCols = `id, workflow, key, kind, source, type, external_id, title, status, current_attempt, created_by, last_run, last_version, created_at, updated_at`

func scanItem(sc interface{ Scan(...any) error }) (kt.Input, error) {
	var i kt.Input
	err := sc.Scan(&i.ID, &i.Workflow, &i.Key, &i.Kind, &i.Source, &i.Type, &i.ExternalID, &i.Title, &i.Status, &i.CurrentAttempt, &i.CreatedBy, &i.LastRun, &i.LastVersion, &i.CreatedAt, &i.UpdatedAt)
	return i, err
}

func (t *Tx) InputGet(id string) (kt.Input, error) {
	i, err := scanItem(t.r.QueryRow(`SELECT `+itemCols+` FROM items WHERE id=?`, id))
	if err != nil {
		return i, notFound("input", id, err)
	}
	return i, nil
}

func (t *Tx) InputGetByKey(workflow, key string) (kt.Input, error) {
	i, err := scanItem(t.r.QueryRow(`SELECT `+itemCols+` FROM items WHERE workflow=? AND key=?`, workflow, key))
	if err != nil {
		return i, notFound("input", key, err)
	}
	return i, nil
}

func (t *Tx) InputPut(i kt.Input) error {
	return t.write(fmt.Sprintf("save input %s", i.Key), `INSERT INTO items(`+itemCols+`) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(id) DO UPDATE SET title=excluded.title, status=excluded.status, current_attempt=excluded.current_attempt, last_run=excluded.last_run,
 last_version=excluded.last_version, updated_at=excluded.updated_at`,
		i.ID, i.Workflow, i.Key, i.Kind, i.Source, i.Type, i.ExternalID, i.Title, i.Status, i.CurrentAttempt, i.CreatedBy, i.LastRun, i.LastVersion, i.CreatedAt, i.UpdatedAt)
}

func (t *Tx) InputList(workflow string) ([]kt.Input, error) {
	return t.queryItems(`SELECT `+itemCols+` FROM items WHERE workflow=? ORDER BY created_at, key`, workflow)
}

func (t *Tx) queryItems(q string, args ...any) ([]kt.Input, error) {
	rows, err := t.r.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Input
	for rows.Next() {
		i, err := scanItem(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, rows.Err()
}

func (t *Tx) ItemAttemptPut(a kt.ItemAttempt) error {
	return t.write(fmt.Sprintf("save attempt %d of item %s", a.Attempt, a.ItemID), `INSERT INTO item_attempts(item_id, attempt, status, version, started_at, updated_at) VALUES(?,?,?,?,?,?)
ON CONFLICT(item_id, attempt) DO UPDATE SET status=excluded.status, version=excluded.version, updated_at=excluded.updated_at`,
		a.ItemID, a.Attempt, a.Status, a.Version, a.StartedAt, a.UpdatedAt)
}

func (t *Tx) ItemAttemptList(itemID string) ([]kt.ItemAttempt, error) {
	rows, err := t.r.Query(`SELECT item_id, attempt, status, version, started_at, updated_at FROM item_attempts WHERE item_id=? ORDER BY attempt`, itemID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.ItemAttempt
	for rows.Next() {
		var a kt.ItemAttempt
		if err := rows.Scan(&a.ItemID, &a.Attempt, &a.Status, &a.Version, &a.StartedAt, &a.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// --- runs ---

const runCols = `id, workflow, version, handler, handler_type, phase, status, retry_of, retry_count, prepare_result, mutation_result, pending_call,
 approved_hash, action, error_class, error_message, trace, next_attempt_at, created_at, updated_at, finished_at, rev, quiet_polls, quiet_since, pruned_at, blocked_at`

func scanRun(sc interface{ Scan(...any) error }) (kt.Run, error) {
	var r kt.Run
	var pr, mr, pc, tr sql.NullString
	err := sc.Scan(&r.ID, &r.Workflow, &r.Version, &r.Handler, &r.HandlerType, &r.Phase, &r.Status, &r.RetryOf, &r.RetryCount, &pr, &mr, &pc,
		&r.ApprovedHash, &r.Action, &r.ErrorClass, &r.ErrorMessage, &tr, &r.NextAttemptAt, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &r.Rev, &r.QuietPolls, &r.QuietSince, &r.PrunedAt, &r.BlockedAt)
	r.PrepareResult, r.MutationResult, r.PendingCall, r.Trace = rawJSON(pr), rawJSON(mr), rawJSON(pc), rawJSON(tr)
	return r, err
}

func (t *Tx) queryRuns(q string, args ...any) ([]kt.Run, error) {
	rows, err := t.r.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *Tx) RunGet(id string) (kt.Run, error) {
	r, err := scanRun(t.r.QueryRow(`SELECT `+runCols+` FROM runs WHERE id=?`, id))
	if err != nil {
		return r, notFound("run", id, err)
	}
	return r, nil
}

func (t *Tx) RunPut(r kt.Run) error {
	return t.write(fmt.Sprintf("save run %s", r.ID), `INSERT INTO runs(`+runCols+`, open) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(id) DO UPDATE SET phase=excluded.phase, status=excluded.status, retry_count=excluded.retry_count, prepare_result=excluded.prepare_result,
 mutation_result=excluded.mutation_result, pending_call=excluded.pending_call, approved_hash=excluded.approved_hash, action=excluded.action,
 error_class=excluded.error_class, error_message=excluded.error_message, trace=excluded.trace, next_attempt_at=excluded.next_attempt_at,
 updated_at=excluded.updated_at, finished_at=excluded.finished_at, rev=excluded.rev, open=excluded.open, quiet_polls=excluded.quiet_polls, quiet_since=excluded.quiet_since, pruned_at=excluded.pruned_at, blocked_at=excluded.blocked_at`,
		r.ID, r.Workflow, r.Version, r.Handler, r.HandlerType, r.Phase, r.Status, r.RetryOf, r.RetryCount, jsonText(r.PrepareResult), jsonText(r.MutationResult), jsonText(r.PendingCall),
		r.ApprovedHash, r.Action, r.ErrorClass, r.ErrorMessage, jsonText(r.Trace), r.NextAttemptAt, r.CreatedAt, r.UpdatedAt, r.FinishedAt, r.Rev, r.QuietPolls, r.QuietSince, r.PrunedAt, r.BlockedAt, b2i(!r.Status.Finished()))
}

func (t *Tx) RunSetIfRev(r kt.Run) error {
	return t.writeChanging(fmt.Sprintf("save run %s (as %s, from revision %d)", r.ID, r.Status, r.Rev), store.ErrConflict,
		`UPDATE runs SET phase=?, status=?, retry_count=?, prepare_result=?, mutation_result=?, pending_call=?, approved_hash=?, action=?,
 error_class=?, error_message=?, trace=?, next_attempt_at=?, created_at=?, updated_at=?, finished_at=?, open=?, quiet_polls=?, quiet_since=?, pruned_at=?, blocked_at=?, rev=? WHERE id=? AND rev=?`,
		r.Phase, r.Status, r.RetryCount, jsonText(r.PrepareResult), jsonText(r.MutationResult), jsonText(r.PendingCall), r.ApprovedHash, r.Action,
		r.ErrorClass, r.ErrorMessage, jsonText(r.Trace), r.NextAttemptAt, r.CreatedAt, r.UpdatedAt, r.FinishedAt, b2i(!r.Status.Finished()), r.QuietPolls, r.QuietSince, r.PrunedAt, r.BlockedAt, r.Rev+1, r.ID, r.Rev)
}

func (t *Tx) RunList(workflow string, limit int) ([]kt.Run, error) {
	if limit <= 0 {
		limit = 1 << 30
	}
	return t.queryRuns(`SELECT `+runCols+` FROM runs WHERE workflow=? ORDER BY created_at DESC, id DESC LIMIT `+limitSQL(limit), workflow)
}

func (t *Tx) RunsOfVersion(workflow string, version int64, status kt.Status, limit int) ([]kt.Run, error) {
	// The status is written into the statement (one of keeptype's, checked
	// here), as LIMIT is: a plan made for a bound status (PostgreSQL's
	// generic plan) cannot know that it is the common one and may walk
	// runs_status through every workflow's runs in it.
	if !slices.Contains(kt.RunStatuses, status) {
		return nil, fmt.Errorf("list runs of %s version %d: %q is not a run status", workflow, version, status)
	}
	if limit <= 0 {
		limit = 1 << 30
	}
	return t.queryRuns(`SELECT `+runCols+` FROM runs WHERE workflow=? AND version=? AND status='`+string(status)+`' ORDER BY created_at DESC, id DESC LIMIT `+limitSQL(limit), workflow, version)
}

func (t *Tx) RunsFinishedSince(workflow string, version int64, status kt.Status, since int64, limit int) ([]kt.Run, error) {
	// As in RunsOfVersion; pruned_at=0 and the range of finished_at are
	// runs_unpruned's, and workflow and status are compared as
	// expressions (||''), which no index serves: otherwise SQLite walks
	// runs_status or runs_workflow, every committed run or the workflow's
	// whole history, for the few runs finished since.
	if !slices.Contains(kt.RunStatuses, status) {
		return nil, fmt.Errorf("list runs of %s version %d finished since %d: %q is not a run status", workflow, version, since, status)
	}
	if limit <= 0 {
		limit = 1 << 30
	}
	return t.queryRuns(`SELECT `+runCols+` FROM runs WHERE pruned_at=0 AND finished_at>=? AND workflow||''=? AND version=? AND status||''='`+string(status)+`' ORDER BY finished_at, id LIMIT `+limitSQL(limit), since, workflow, version)
}

func (t *Tx) RunFirstOf(workflow string, versions []int64, handlerType kt.HandlerType, status kt.Status) (kt.Run, error) {
	// Status and handler type are written into the statement, as in
	// RunsOfVersion.
	if !slices.Contains(kt.RunStatuses, status) || !slices.Contains(kt.HandlerTypes, handlerType) {
		return kt.Run{}, fmt.Errorf("find the first run of %s: %q runs in status %q are none of keep's", workflow, handlerType, status)
	}
	what := fmt.Sprintf("first %s %s run of workflow", status, handlerType)
	if len(versions) == 0 {
		return kt.Run{}, notFound(what, workflow, sql.ErrNoRows)
	}
	args := []any{workflow}
	for _, v := range versions {
		args = append(args, v)
	}
	r, err := scanRun(t.r.QueryRow(`SELECT `+runCols+` FROM runs WHERE workflow=? AND handler_type='`+string(handlerType)+`' AND status='`+string(status)+
		`' AND version IN (`+strings.TrimSuffix(strings.Repeat("?,", len(versions)), ",")+`) ORDER BY created_at, id LIMIT 1`, args...))
	if err != nil {
		return r, notFound(what, workflow, err)
	}
	return r, nil
}

func (t *Tx) RunOpen(workflow string) (kt.Run, error) {
	r, err := scanRun(t.r.QueryRow(`SELECT `+runCols+` FROM runs WHERE workflow=? AND open=1 ORDER BY created_at LIMIT 1`, workflow))
	if err != nil {
		return r, notFound("open run of workflow", workflow, err)
	}
	return r, nil
}

func (t *Tx) RunsWithStatus(status kt.Status) ([]kt.Run, error) {
	return t.queryRuns(`SELECT `+runCols+` FROM runs WHERE status=? ORDER BY created_at`, status)
}

// --- mutations ---

const mutationCols = `id, workflow, run_id, handler, item_keys, attempt, tool, method, params, target, identity_key, payload_hash, idempotency_key, status,
 result, error_class, error_message, can_reconcile, reconcile_attempts, next_reconcile_at, resolved_by, created_at, updated_at, sent_at, not_found_at, pruned_at`

func scanMutation(sc interface{ Scan(...any) error }) (kt.Mutation, error) {
	var m kt.Mutation
	var items, params string
	var result sql.NullString
	var canRec int
	err := sc.Scan(&m.ID, &m.Workflow, &m.RunID, &m.Handler, &items, &m.Attempt, &m.Tool, &m.Method, &params, &m.Target, &m.IdentityKey, &m.PayloadHash, &m.IdempotencyKey, &m.Status,
		&result, &m.ErrorClass, &m.ErrorMessage, &canRec, &m.ReconcileAttempts, &m.NextReconcileAt, &m.ResolvedBy, &m.CreatedAt, &m.UpdatedAt, &m.SentAt, &m.NotFoundAt, &m.PrunedAt)
	m.ItemKeys = parseList(items)
	m.Params = json.RawMessage(params)
	m.Result = rawJSON(result)
	m.CanReconcile = canRec != 0
	return m, err
}

func (t *Tx) queryMutations(q string, args ...any) ([]kt.Mutation, error) {
	rows, err := t.r.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Mutation
	for rows.Next() {
		m, err := scanMutation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

func (t *Tx) MutationGet(id string) (kt.Mutation, error) {
	m, err := scanMutation(t.r.QueryRow(`SELECT `+mutationCols+` FROM mutations WHERE id=?`, id))
	if err != nil {
		return m, notFound("mutation", id, err)
	}
	return m, nil
}

func (t *Tx) MutationByIdentity(key string) (kt.Mutation, error) {
	m, err := scanMutation(t.r.QueryRow(`SELECT `+mutationCols+` FROM mutations WHERE identity_key=?`, key))
	if err != nil {
		return m, notFound("mutation with identity", key, err)
	}
	return m, nil
}

func (t *Tx) MutationByRun(runID string) (kt.Mutation, error) {
	m, err := scanMutation(t.r.QueryRow(`SELECT `+mutationCols+` FROM mutations WHERE run_id=? ORDER BY created_at DESC LIMIT 1`, runID))
	if err != nil {
		return m, notFound("mutation of run", runID, err)
	}
	return m, nil
}

func (t *Tx) MutationPut(m kt.Mutation) error {
	return t.write(fmt.Sprintf("save mutation %s", m.ID), `INSERT INTO mutations(`+mutationCols+`) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(id) DO UPDATE SET run_id=excluded.run_id, identity_key=excluded.identity_key, sent_at=excluded.sent_at, not_found_at=excluded.not_found_at, params=excluded.params, payload_hash=excluded.payload_hash, status=excluded.status, result=excluded.result,
 error_class=excluded.error_class, error_message=excluded.error_message, can_reconcile=excluded.can_reconcile, reconcile_attempts=excluded.reconcile_attempts,
 next_reconcile_at=excluded.next_reconcile_at, resolved_by=excluded.resolved_by, updated_at=excluded.updated_at`,
		m.ID, m.Workflow, m.RunID, m.Handler, strList(m.ItemKeys), m.Attempt, m.Tool, m.Method, string(m.Params), m.Target, m.IdentityKey, m.PayloadHash, m.IdempotencyKey, m.Status,
		jsonText(m.Result), m.ErrorClass, m.ErrorMessage, b2i(m.CanReconcile), m.ReconcileAttempts, m.NextReconcileAt, m.ResolvedBy, m.CreatedAt, m.UpdatedAt, m.SentAt, m.NotFoundAt, m.PrunedAt)
}

// MutationInsert is MutationPut's INSERT whose identity key must be new
// (the UNIQUE index on identity_key decides, under concurrent writers too).
func (t *Tx) MutationInsert(m kt.Mutation) error {
	return t.writeChanging(fmt.Sprintf("record mutation %s (%s)", m.ID, m.Target), store.ErrIdentityTaken,
		`INSERT INTO mutations(`+mutationCols+`) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(identity_key) DO NOTHING`,
		m.ID, m.Workflow, m.RunID, m.Handler, strList(m.ItemKeys), m.Attempt, m.Tool, m.Method, string(m.Params), m.Target, m.IdentityKey, m.PayloadHash, m.IdempotencyKey, m.Status,
		jsonText(m.Result), m.ErrorClass, m.ErrorMessage, b2i(m.CanReconcile), m.ReconcileAttempts, m.NextReconcileAt, m.ResolvedBy, m.CreatedAt, m.UpdatedAt, m.SentAt, m.NotFoundAt, m.PrunedAt)
}

func (t *Tx) MutationPutFrom(m kt.Mutation, from kt.MutationStatus) error {
	return t.writeChanging(fmt.Sprintf("save mutation %s (as %s, from %s)", m.ID, m.Status, from), store.ErrStale,
		`UPDATE mutations SET run_id=?, identity_key=?, sent_at=?, not_found_at=?, params=?, payload_hash=?, status=?, result=?, error_class=?, error_message=?,
 can_reconcile=?, reconcile_attempts=?, next_reconcile_at=?, resolved_by=?, updated_at=? WHERE id=? AND status=?`,
		m.RunID, m.IdentityKey, m.SentAt, m.NotFoundAt, string(m.Params), m.PayloadHash, m.Status, jsonText(m.Result), m.ErrorClass, m.ErrorMessage,
		b2i(m.CanReconcile), m.ReconcileAttempts, m.NextReconcileAt, m.ResolvedBy, m.UpdatedAt, m.ID, from)
}

func (t *Tx) MutationList(workflow string) ([]kt.Mutation, error) {
	return t.queryMutations(`SELECT `+mutationCols+` FROM mutations WHERE workflow=? ORDER BY created_at, id`, workflow)
}

func (t *Tx) MutationsWithStatus(status kt.MutationStatus) ([]kt.Mutation, error) {
	return t.queryMutations(`SELECT `+mutationCols+` FROM mutations WHERE status=? ORDER BY created_at`, status)
}

func (t *Tx) Counts() (store.Counts, error) {
	var c store.Counts
	var err error
	if c.Runs, err = t.tallies("run"); err != nil {
		return c, err
	}
	if c.Mutations, err = t.tallies("mutation"); err != nil {
		return c, err
	}
	err = t.r.QueryRow(`SELECT coalesce(sum(n),0) FROM tallies WHERE kind='event' AND status IN ('pending','reserved')`).Scan(&c.PendingEvents)
	return c, err
}

// --- scheduling ---

func (t *Tx) DueWorkflows(now int64) ([]string, error) {
	rows, err := t.r.Query(`
SELECT w.name FROM workflows w WHERE w.paused=0 AND (
  EXISTS (SELECT 1 FROM runs r WHERE r.workflow=w.name AND r.open=1 AND (
      r.action<>'' OR r.status IN (?,?) OR (r.status=? AND r.next_attempt_at>0 AND r.next_attempt_at<=?)
      OR (r.status=? AND r.version<w.active_version)
      OR (r.status=? AND EXISTS (SELECT 1 FROM mutations m WHERE m.run_id=r.id AND m.status=? AND m.next_reconcile_at<=?))))
  OR (NOT EXISTS (SELECT 1 FROM runs r WHERE r.workflow=w.name AND r.open=1) AND EXISTS (SELECT 1 FROM handlers h WHERE h.workflow=w.name AND (
      h.dirty=1 OR (h.wake_at>0 AND h.wake_at<=?) OR h.queued=1 OR (h.next_run_at>0 AND h.next_run_at<=?))))
) ORDER BY w.name`,
		// The statuses are keeptype's (the engine's handleOpen acts on the
		// same ones): the query only finds them.
		kt.StatusCrashed, kt.StatusActive, kt.StatusTransient, now, kt.StatusFailedLogic,
		kt.StatusReconciliation, kt.MutationNeedsReconcile, now, now, now)
	if err != nil {
		return nil, fmt.Errorf("find due workflows: %w", err)
	}
	return Strings(rows)
}

// Strings reads a query's one column of text, and closes its rows.
func Strings(rows Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// hourSQL is the start of the hour of a column of ms, in SQL both stores
// compute the same (integer division of BIGINTs).
func hourSQL(col string) string { return "(" + col + "/3600000)*3600000" }

func (t *Tx) Tally(workflow string, from, to int64) (store.HourTally, error) {
	var out store.HourTally
	var err error
	// runs_page (workflow, created_at, id): the range, not the history.
	if out.Runs, err = queryAll(t, "runs", `SELECT `+hourSQL("created_at")+`, handler, status, count(*) FROM runs WHERE workflow=? AND created_at>=? AND created_at<? GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
		func(x *store.RunTally) []any { return []any{&x.Hour, &x.Handler, &x.Status, &x.N} }, workflow, from, to); err != nil {
		return out, err
	}
	// mutations_page (workflow, created_at, id).
	if out.Writes, err = queryAll(t, "writes", `SELECT `+hourSQL("created_at")+`, tool, method, status, count(*) FROM mutations WHERE workflow=? AND created_at>=? AND created_at<? GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`,
		func(x *store.WriteTally) []any { return []any{&x.Hour, &x.Tool, &x.Method, &x.Status, &x.N} }, workflow, from, to); err != nil {
		return out, err
	}
	// items_page (workflow, created_at, id).
	if out.Inputs, err = queryAll(t, "inputs", `SELECT `+hourSQL("created_at")+`, count(*) FROM items WHERE workflow=? AND created_at>=? AND created_at<? AND kind='input' GROUP BY 1 ORDER BY 1`,
		func(x *store.HourCount) []any { return []any{&x.Hour, &x.N} }, workflow, from, to); err != nil {
		return out, err
	}
	// The waits for a person that overlap the range: those that ended
	// (blocked_spans by blocked_spans_to) and those still going (runs by
	// runs_blocked).
	if out.Blocked, err = queryAll(t, "blocked runs", `SELECT run_id, handler, from_at, to_at FROM blocked_spans WHERE workflow=? AND to_at>? AND from_at<?
 UNION ALL SELECT id, handler, blocked_at, 0 FROM runs WHERE workflow=? AND blocked_at>0 AND blocked_at<? ORDER BY 3, 1`,
		func(x *store.BlockedSpan) []any { return []any{&x.RunID, &x.Handler, &x.From, &x.To} }, workflow, from, to, workflow, to); err != nil {
		return out, err
	}
	return out, nil
}

// BlockedSpanAdd records a wait for a person that ended.
func (t *Tx) BlockedSpanAdd(workflow string, b store.BlockedSpan) error {
	return t.write(fmt.Sprintf("record run %s's wait for a person", b.RunID), `INSERT INTO blocked_spans(workflow, run_id, handler, from_at, to_at) VALUES(?,?,?,?,?)`,
		workflow, b.RunID, b.Handler, b.From, b.To)
}

// queryAll reads every row of q, each into a T through the fields dest gives.
func queryAll[T any](t *Tx, what, q string, dest func(*T) []any, args ...any) ([]T, error) {
	rows, err := t.r.Query(q, args...)
	if err != nil {
		return nil, fmt.Errorf("tally %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var x T
		if err := rows.Scan(dest(&x)...); err != nil {
			return nil, fmt.Errorf("tally %s: %w", what, err)
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// --- pages (issue 44) ---

// PageSQL completes a newest-first page's statement from its WHERE so far:
// the keyset condition on (created_at, id) of p's position, the order and
// the limit. Row values compare as a tuple in SQLite and PostgreSQL alike,
// and both walk the (workflow, created_at, id) index from the position:
// a page costs its rows, not the history before it. asc says the rows come
// oldest first (a previous page) and are to be reversed.
func PageSQL(q string, args []any, p store.Page) (string, []any, bool) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	switch {
	case p.Newer != nil:
		return q + ` AND (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT ` + limitSQL(limit), append(args, p.Newer.At, p.Newer.ID), true
	case p.Older != nil:
		q, args = q+` AND (created_at, id) < (?, ?)`, append(args, p.Older.At, p.Older.ID)
	}
	return q + ` ORDER BY created_at DESC, id DESC LIMIT ` + limitSQL(limit), args, false
}

// InputPageSQL is InputPage's statement. A search filters the window of
// store.SearchWindow inputs from the position, read along the index.
func InputPageSQL(workflow string, p store.Page) (string, []any, bool) {
	base, args := `SELECT `+itemCols+` FROM items WHERE workflow=?`, []any{workflow}
	if p.Search == "" {
		return PageSQL(base, args, p)
	}
	window, args, asc := PageSQL(base, args, store.Page{Limit: store.SearchWindow, Older: p.Older, Newer: p.Newer})
	// Written with LIKE on lower(): both databases have it, and a search
	// string's own % and _ are escaped to mean themselves.
	esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(strings.ToLower(p.Search))
	order := ` ORDER BY created_at DESC, id DESC`
	if asc {
		order = ` ORDER BY created_at, id`
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	return `SELECT ` + itemCols + ` FROM (` + window + `) w WHERE lower(id || ' ' || key || ' ' || external_id || ' ' || title) LIKE ? ESCAPE '\'` + order + ` LIMIT ` + limitSQL(limit),
		append(args, "%"+esc+"%"), asc
}

// InputWindowEndSQL is InputWindowEnd's statement: along the index, the
// window's last position (an offset within one window, never a page's).
func InputWindowEndSQL(workflow string, p store.Page) (string, []any) {
	q, args, _ := PageSQL(`SELECT created_at, id FROM items WHERE workflow=?`, []any{workflow}, store.Page{Limit: 1, Older: p.Older, Newer: p.Newer})
	return q + ` OFFSET ` + strconv.Itoa(store.SearchWindow-1), args
}

func (t *Tx) InputWindowEnd(workflow string, p store.Page) (store.Pos, bool, error) {
	q, args := InputWindowEndSQL(workflow, p)
	var end store.Pos
	err := t.r.QueryRow(q, args...).Scan(&end.At, &end.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return end, false, nil
	}
	if err != nil {
		return end, false, fmt.Errorf("find where a search of %s's inputs goes on: %w", workflow, err)
	}
	return end, true, nil
}

func (t *Tx) InputPage(workflow string, p store.Page) ([]kt.Input, error) {
	return readPage(workflow+"'s inputs", t.queryItems)(InputPageSQL(workflow, p))
}

// runPageCols are runCols without the trace: a list shows none, and a
// run's trace may be long.
var runPageCols = strings.Replace(runCols, " trace,", " NULL AS trace,", 1)

// RunPageSQL is RunPage's statement.
func RunPageSQL(workflow string, p store.Page) (string, []any, bool) {
	return PageSQL(`SELECT `+runPageCols+` FROM runs WHERE workflow=?`, []any{workflow}, p)
}

func (t *Tx) RunPage(workflow string, p store.Page) ([]kt.Run, error) {
	return readPage(workflow+"'s runs", t.queryRuns)(RunPageSQL(workflow, p))
}

// readPage runs a page's statement with query and puts its rows newest
// first.
func readPage[T any](what string, query func(string, ...any) ([]T, error)) func(string, []any, bool) ([]T, error) {
	return func(q string, args []any, asc bool) ([]T, error) {
		rows, err := query(q, args...)
		if err != nil {
			return nil, fmt.Errorf("list a page of %s: %w", what, err)
		}
		if asc {
			slices.Reverse(rows)
		}
		return rows, nil
	}
}

// MutationPageSQL is MutationPage's statement.
func MutationPageSQL(workflow string, p store.Page) (string, []any, bool) {
	return PageSQL(`SELECT `+mutationCols+` FROM mutations WHERE workflow=?`, []any{workflow}, p)
}

func (t *Tx) MutationPage(workflow string, p store.Page) ([]kt.Mutation, error) {
	return readPage(workflow+"'s outputs", t.queryMutations)(MutationPageSQL(workflow, p))
}

// TalliesSQL reads what the tallies hold of one kind, by workflow and
// status (the primary key's order; no row of the ledger is read).
const TalliesSQL = `SELECT workflow, status, n FROM tallies WHERE kind=? AND n<>0 ORDER BY workflow, status`

func (t *Tx) tallies(kind string) ([]store.Tally, error) {
	rows, err := t.r.Query(TalliesSQL, kind)
	if err != nil {
		return nil, fmt.Errorf("read the tallies of %ss: %w", kind, err)
	}
	defer rows.Close()
	var out []store.Tally
	for rows.Next() {
		var x store.Tally
		if err := rows.Scan(&x.Workflow, &x.Status, &x.N); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

func (t *Tx) WorkflowTotals(workflow string) (store.Totals, error) {
	rows, err := t.r.Query(`SELECT kind, sum(n) FROM tallies WHERE workflow=? AND kind IN ('input','run','mutation') GROUP BY kind`, workflow)
	if err != nil {
		return store.Totals{}, fmt.Errorf("count %s's inputs, runs and outputs: %w", workflow, err)
	}
	defer rows.Close()
	var tt store.Totals
	for rows.Next() {
		var kind string
		var n int
		if err := rows.Scan(&kind, &n); err != nil {
			return tt, err
		}
		switch kind {
		case "input":
			tt.Inputs = n
		case "run":
			tt.Runs = n
		case "mutation":
			tt.Mutations = n
		}
	}
	return tt, rows.Err()
}
