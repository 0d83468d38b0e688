package sqldb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// deliveryCols leave a held delivery's request out: up to webhook_max_body
// each, it is read only to take the delivery (DeliveryHeldGet).
const deliveryCols = `id, workflow, webhook, delivery_id, status, reason, inputs, events, received_at, held_for`

func scanDelivery(s interface{ Scan(...any) error }) (kt.Delivery, error) {
	var d kt.Delivery
	var status string
	err := s.Scan(&d.ID, &d.Workflow, &d.Webhook, &d.DeliveryID, &status, &d.Reason, &d.Inputs, &d.Events, &d.ReceivedAt, &d.HeldFor)
	d.Status = kt.DeliveryStatus(status)
	return d, err
}

func (t *Tx) DeliveryAdd(d *kt.Delivery) error {
	err := t.r.QueryRow(`INSERT INTO deliveries(workflow, webhook, delivery_id, status, reason, inputs, events, received_at, held_for, request) VALUES(?,?,?,?,?,?,?,?,?,?) RETURNING id`,
		d.Workflow, d.Webhook, d.DeliveryID, string(d.Status), d.Reason, d.Inputs, d.Events, d.ReceivedAt, d.HeldFor, string(d.Request)).Scan(&d.ID)
	if err != nil {
		return fmt.Errorf("record delivery %s of webhook %s of %s: %w", d.DeliveryID, d.Webhook, d.Workflow, err)
	}
	return nil
}

func (t *Tx) DeliveryAccepted(workflow, webhook, deliveryID string) (kt.Delivery, error) {
	d, err := scanDelivery(t.r.QueryRow(`SELECT `+deliveryCols+` FROM deliveries WHERE workflow=? AND webhook=? AND delivery_id=? AND status=?`,
		workflow, webhook, deliveryID, string(kt.DeliveryAccepted)))
	if err != nil {
		return d, notFound("accepted delivery", workflow+"/"+webhook+"/"+deliveryID, err)
	}
	return d, nil
}

func (t *Tx) DeliveryList(workflow string, limit int) ([]kt.Delivery, error) {
	q := `SELECT ` + deliveryCols + ` FROM deliveries WHERE workflow=? ORDER BY id DESC`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	return t.deliveries(q, workflow)
}

// deliveries runs q, a SELECT of deliveryCols, and scans every row.
func (t *Tx) deliveries(q string, args ...any) ([]kt.Delivery, error) {
	rows, err := t.r.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func (t *Tx) DeliveryCounts(workflow string) ([]kt.DeliveryCount, error) {
	rows, err := t.r.Query(`SELECT webhook, status, COUNT(*) FROM deliveries WHERE workflow=? GROUP BY webhook, status ORDER BY webhook, status`, workflow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.DeliveryCount
	for rows.Next() {
		var c kt.DeliveryCount
		var status string
		if err := rows.Scan(&c.Webhook, &status, &c.Count); err != nil {
			return nil, err
		}
		c.Status = kt.DeliveryStatus(status)
		out = append(out, c)
	}
	return out, rows.Err()
}

func (t *Tx) DeliveryPrune(workflow, webhook string, status kt.DeliveryStatus, keep int) error {
	if status == kt.DeliveryAccepted {
		return fmt.Errorf("forget deliveries of webhook %s of %s: accepted ones are never forgotten (a retry is found by them)", webhook, workflow)
	}
	// The status is written into the statement, as LIMIT is: it is one of
	// keeptype's few, and a plan made for a bound status (PostgreSQL's
	// generic plan, made once per connection) cannot know that it is a
	// rare one and may walk the webhook's accepted history instead of
	// deliveries_by_status.
	var lit string
	switch status {
	case kt.DeliveryDuplicate, kt.DeliveryRefused, kt.DeliveryFailed:
		lit = "'" + string(status) + "'"
	default:
		return fmt.Errorf("forget deliveries of webhook %s of %s: %q is not a status a delivery can have", webhook, workflow, status)
	}
	return t.write(fmt.Sprintf("forget old %s deliveries of webhook %s of %s", status, webhook, workflow),
		`DELETE FROM deliveries WHERE workflow=? AND webhook=? AND status=`+lit+` AND id < (SELECT COALESCE(MIN(id), 0) FROM (SELECT id FROM deliveries WHERE workflow=? AND webhook=? AND status=`+lit+` ORDER BY id DESC LIMIT `+fmt.Sprint(keep)+`) AS newest)`,
		workflow, webhook, workflow, webhook)
}

// The statements on held deliveries write status='held' into their text:
// the partial index deliveries_held is what they read, and a plan made
// for a bound status could not know it applies.

func (t *Tx) DeliveryHeld(workflow, webhook string, limit int) ([]kt.Delivery, error) {
	q := `SELECT ` + deliveryCols + ` FROM deliveries WHERE workflow=? AND status='held'`
	args := []any{workflow}
	if webhook != "" {
		q += ` AND webhook=?`
		args = append(args, webhook)
	}
	q += ` ORDER BY id`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	return t.deliveries(q, args...)
}

func (t *Tx) DeliveryHeldCount(workflow, webhook string) (int, int64, error) {
	// The requests are JSON with the body in base64: their length in
	// characters is their length in bytes, on either backend.
	q := `SELECT COUNT(*), COALESCE(SUM(LENGTH(request)), 0) FROM deliveries WHERE workflow=? AND status='held'`
	args := []any{workflow}
	if webhook != "" {
		q += ` AND webhook=?`
		args = append(args, webhook)
	}
	var n int
	var bytes int64
	err := t.r.QueryRow(q, args...).Scan(&n, &bytes)
	return n, bytes, err
}

func (t *Tx) DeliveryHeldGet(id int64) (kt.Delivery, error) {
	var request string
	var d kt.Delivery
	var status string
	err := t.r.QueryRow(`SELECT `+deliveryCols+`, request FROM deliveries WHERE id=? AND status='held'`, id).
		Scan(&d.ID, &d.Workflow, &d.Webhook, &d.DeliveryID, &status, &d.Reason, &d.Inputs, &d.Events, &d.ReceivedAt, &d.HeldFor, &request)
	if err != nil {
		return d, notFound("held delivery", fmt.Sprint(id), err)
	}
	d.Status, d.Request = kt.DeliveryStatus(status), json.RawMessage(request)
	return d, nil
}

func (t *Tx) DeliveryHeldWorkflows() ([]string, error) {
	rows, err := t.r.Query(`SELECT DISTINCT workflow FROM deliveries WHERE status='held' ORDER BY workflow`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var wf string
		if err := rows.Scan(&wf); err != nil {
			return nil, err
		}
		out = append(out, wf)
	}
	return out, rows.Err()
}

func (t *Tx) DeliverySettle(d *kt.Delivery) error {
	if d.Status == kt.DeliveryHeld && d.HeldFor == "" {
		return fmt.Errorf("hold delivery %d of webhook %s of %s: a held delivery says what it waits for", d.ID, d.Webhook, d.Workflow)
	}
	what := fmt.Sprintf("settle held delivery %d of webhook %s of %s as %s", d.ID, d.Webhook, d.Workflow, d.Status)
	if d.Status == kt.DeliveryHeld {
		// Held again: its request stays, unless d.Request is given (what
		// keep learned of it since: hookreq.Hook.Verified).
		if d.Request != nil {
			return t.writeChanging(what, store.ErrStale,
				`UPDATE deliveries SET delivery_id=?, reason=?, held_for=?, request=? WHERE id=? AND status='held'`,
				d.DeliveryID, d.Reason, d.HeldFor, string(d.Request), d.ID)
		}
		return t.writeChanging(what, store.ErrStale,
			`UPDATE deliveries SET delivery_id=?, reason=?, held_for=? WHERE id=? AND status='held'`,
			d.DeliveryID, d.Reason, d.HeldFor, d.ID)
	}
	d.HeldFor, d.Request = "", nil
	return t.writeChanging(what, store.ErrStale,
		`UPDATE deliveries SET delivery_id=?, status=?, reason=?, inputs=?, events=?, held_for='', request='' WHERE id=? AND status='held'`,
		d.DeliveryID, string(d.Status), d.Reason, d.Inputs, d.Events, d.ID)
}

func (t *Tx) Intake(workflow string, webhooks []string, apiSource string, from int64) (store.IntakeTally, error) {
	var out store.IntakeTally
	var err error
	// deliveries_received (workflow, received_at): today's, not the history.
	if out.Deliveries, err = queryAll(t, "deliveries", `SELECT webhook, status, count(*) FROM deliveries WHERE workflow=? AND received_at>=? GROUP BY 1, 2 ORDER BY 1, 2`,
		func(x *store.DeliveryTally) []any { return []any{&x.Webhook, &x.Status, &x.N} }, workflow, from); err != nil {
		return out, err
	}
	// deliveries_held, partial: the held ones only.
	if out.Held, err = queryAll(t, "held deliveries", `SELECT webhook, 'held', count(*) FROM deliveries WHERE workflow=? AND status='held' GROUP BY 1 ORDER BY 1`,
		func(x *store.DeliveryTally) []any { return []any{&x.Webhook, &x.Status, &x.N} }, workflow); err != nil {
		return out, err
	}
	// deliveries_recent (workflow, webhook, id): one row a webhook.
	out.Last = map[string]int64{}
	for _, h := range webhooks {
		var at int64
		err := t.r.QueryRow(`SELECT received_at FROM deliveries WHERE workflow=? AND webhook=? ORDER BY id DESC LIMIT 1`, workflow, h).Scan(&at)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("tally the last delivery of webhook %s: %w", h, err)
		}
		out.Last[h] = at
	}
	// items_page (workflow, created_at, id): the inputs the event API took.
	out.Posts, err = queryAll(t, "posts", `SELECT type, count(*) FROM items WHERE workflow=? AND created_at>=? AND kind='input' AND source=? GROUP BY 1 ORDER BY 1`,
		func(x *store.PostTally) []any { return []any{&x.Topic, &x.N} }, workflow, from, apiSource)
	return out, err
}
