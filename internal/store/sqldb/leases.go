package sqldb

import (
	"fmt"

	"github.com/keep-run/keep/internal/clock"

	kt "github.com/keep-run/keep/internal/keeptype"
)

func (t *Tx) LeaseGet(workflow string) (kt.Lease, error) {
	l := kt.Lease{Workflow: workflow}
	err := t.r.QueryRow(`SELECT node, token, expires_at FROM leases WHERE workflow=?`, workflow).Scan(&l.Node, &l.Token, &l.ExpiresAt)
	if err != nil {
		return l, notFound("lease of", workflow, err)
	}
	return l, nil
}

func (t *Tx) LeasePut(l kt.Lease) error {
	return t.write(fmt.Sprintf("save the lease of %s", l.Workflow), `INSERT INTO leases(workflow, node, token, expires_at) VALUES(?,?,?,?)
ON CONFLICT(workflow) DO UPDATE SET node=excluded.node, token=excluded.token, expires_at=excluded.expires_at`,
		l.Workflow, l.Node, l.Token, l.ExpiresAt)
}

func (t *Tx) LeaseList() ([]kt.Lease, error) {
	rows, err := t.r.Query(`SELECT workflow, node, token, expires_at FROM leases ORDER BY workflow`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Lease
	for rows.Next() {
		var l kt.Lease
		if err := rows.Scan(&l.Workflow, &l.Node, &l.Token, &l.ExpiresAt); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func (t *Tx) NodePut(n kt.Node) error {
	return t.write(fmt.Sprintf("save node %s", n.ID), `INSERT INTO nodes(id, addr, started_at, seen_at, stopped_at) VALUES(?,?,?,?,?)
ON CONFLICT(id) DO UPDATE SET addr=excluded.addr, seen_at=excluded.seen_at, stopped_at=excluded.stopped_at`,
		n.ID, n.Addr, n.StartedAt, n.SeenAt, n.StoppedAt)
}

func (t *Tx) NodeForget(n kt.Node) error {
	// seen_at as read: a heartbeat committed meanwhile keeps the row (on
	// PostgreSQL the DELETE waits for it and then finds its row changed).
	return t.write(fmt.Sprintf("forget node %s", n.ID), `DELETE FROM nodes WHERE id=? AND seen_at=?`, n.ID, n.SeenAt)
}

func (t *Tx) NodeList() ([]kt.Node, error) {
	rows, err := t.r.Query(`SELECT id, addr, started_at, seen_at, stopped_at FROM nodes ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Node
	for rows.Next() {
		var n kt.Node
		if err := rows.Scan(&n.ID, &n.Addr, &n.StartedAt, &n.SeenAt, &n.StoppedAt); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// ServerClock is what a backend's Runner implements when its database
// has a clock every node sharing it reads (PostgreSQL): Tx.Now reads it.
type ServerClock interface {
	// ServerNowSQL is the statement that reads it, in ms since the epoch.
	ServerNowSQL() string
}

// Now is the store's clock: the database's when the runner has one that
// nodes share, else keep's own time (one process owns a SQLite file).
func (t *Tx) Now() (int64, bool, error) {
	if c, ok := t.r.(ServerClock); ok {
		var ms int64
		if err := t.r.QueryRow(c.ServerNowSQL()).Scan(&ms); err != nil {
			return 0, true, fmt.Errorf("read the database's clock: %w", err)
		}
		return ms, true, nil
	}
	return clock.Now().UnixMilli(), false, nil
}
