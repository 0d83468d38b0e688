package sqldb

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

const connectionCols = `provider, account, scopes, sealed, broken, created_at, updated_at`

func scanConnection(s interface{ Scan(...any) error }) (kt.Connection, error) {
	var c kt.Connection
	var scopes string
	if err := s.Scan(&c.Provider, &c.Account, &scopes, &c.Sealed, &c.Broken, &c.CreatedAt, &c.UpdatedAt); err != nil {
		return c, err
	}
	if scopes != "" {
		c.Scopes = strings.Split(scopes, " ")
	}
	return c, nil
}

func (t *Tx) ConnectionGet(provider string) (kt.Connection, error) {
	if err := t.shared(); err != nil {
		return kt.Connection{}, err
	}
	c, err := scanConnection(t.r.QueryRow(`SELECT `+connectionCols+` FROM connections WHERE provider=?`, provider))
	if err != nil {
		return c, notFound("connection", provider, err)
	}
	return c, nil
}

func (t *Tx) ConnectionPut(c kt.Connection) error {
	if err := t.shared(); err != nil {
		return err
	}
	return t.write(fmt.Sprintf("save the %s connection", c.Provider), `INSERT INTO connections(`+connectionCols+`) VALUES(?,?,?,?,?,?,?)
ON CONFLICT(provider) DO UPDATE SET account=excluded.account, scopes=excluded.scopes, sealed=excluded.sealed,
broken=excluded.broken, updated_at=excluded.updated_at`,
		c.Provider, c.Account, strings.Join(c.Scopes, " "), c.Sealed, c.Broken, c.CreatedAt, c.UpdatedAt)
}

func (t *Tx) ConnectionDelete(provider string) error {
	if err := t.shared(); err != nil {
		return err
	}
	_, err := t.r.Exec(`DELETE FROM connections WHERE provider=?`, provider)
	return err
}

func (t *Tx) ConnectionList() ([]kt.Connection, error) {
	rows, err := t.r.Query(`SELECT ` + connectionCols + ` FROM connections ORDER BY provider`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Connection
	for rows.Next() {
		c, err := scanConnection(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (t *Tx) NoticeSent(key, channel string) (int64, error) {
	if err := t.shared(); err != nil {
		return 0, err
	}
	var at int64
	err := t.r.QueryRow(`SELECT sent_at FROM notices WHERE key=? AND channel=?`, key, channel).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return at, err
}

func (t *Tx) NoticePut(key, channel string, at int64) error {
	if err := t.shared(); err != nil {
		return err
	}
	_, err := t.r.Exec(`INSERT INTO notices(key, channel, sent_at) VALUES(?,?,?) ON CONFLICT(key, channel) DO NOTHING`, key, channel, at)
	return err
}

func (t *Tx) NoticeList() ([]store.Notice, error) {
	rows, err := t.r.Query(`SELECT key, channel, sent_at FROM notices ORDER BY key, channel`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Notice
	for rows.Next() {
		var n store.Notice
		if err := rows.Scan(&n.Key, &n.Channel, &n.SentAt); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

func (t *Tx) GrantList(workflow string) ([]kt.Grant, error) {
	rows, err := t.r.Query(`SELECT workflow, item, granted_by, granted_at, digest FROM grants WHERE workflow=? ORDER BY item`, workflow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Grant
	var damaged error
	for rows.Next() {
		var g kt.Grant
		var digest string
		if err := rows.Scan(&g.Workflow, &g.Item, &g.GrantedBy, &g.GrantedAt, &digest); err != nil {
			return nil, err
		}
		if err := checkGrant(g, digest); err != nil && damaged == nil {
			damaged = err
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if damaged != nil {
		// A grant that does not match its digest widens nothing: the
		// list is not given, only the error naming the grant (issue 44).
		return nil, damaged
	}
	return out, nil
}

func (t *Tx) GrantAdd(g kt.Grant) error {
	return t.write(fmt.Sprintf("grant %s to %s", g.Item, g.Workflow), `INSERT INTO grants(workflow, item, granted_by, granted_at, digest) VALUES(?,?,?,?,?) ON CONFLICT(workflow, item) DO NOTHING`,
		g.Workflow, g.Item, g.GrantedBy, g.GrantedAt, grantDigest(g.Workflow, g.Item))
}

func (t *Tx) GrantRemove(workflow, item string) (bool, error) {
	res, err := t.r.Exec(`DELETE FROM grants WHERE workflow=? AND item=?`, workflow, item)
	if err != nil {
		return false, fmt.Errorf("revoke %s of %s: %w", item, workflow, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

const repairCols = `id, workflow, run_id, attempt, status, from_version, to_version, script, explanation, reason, tokens, decided_by, created_at, updated_at, digest`

func (t *Tx) RepairPut(r kt.Repair) error {
	return t.write(fmt.Sprintf("save repair %s", r.ID), `INSERT INTO repairs(`+repairCols+`) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(id) DO UPDATE SET status=excluded.status, to_version=excluded.to_version, script=excluded.script, explanation=excluded.explanation, reason=excluded.reason, tokens=excluded.tokens, decided_by=excluded.decided_by, updated_at=excluded.updated_at, digest=excluded.digest`,
		r.ID, r.Workflow, r.RunID, r.Attempt, string(r.Status), r.FromVersion, r.ToVersion, r.Script, r.Explanation, r.Reason, r.Tokens, r.DecidedBy, r.CreatedAt, r.UpdatedAt, repairDigest(r))
}

func (t *Tx) RepairList(workflow string) ([]kt.Repair, error) {
	rows, err := t.r.Query(`SELECT `+repairCols+` FROM repairs WHERE workflow=? ORDER BY created_at, attempt, id`, workflow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Repair
	for rows.Next() {
		var r kt.Repair
		var st, digest string
		if err := rows.Scan(&r.ID, &r.Workflow, &r.RunID, &r.Attempt, &st, &r.FromVersion, &r.ToVersion, &r.Script, &r.Explanation, &r.Reason, &r.Tokens, &r.DecidedBy, &r.CreatedAt, &r.UpdatedAt, &digest); err != nil {
			return nil, err
		}
		if err := checkRepair(r, digest); err != nil {
			return nil, err
		}
		r.Status = kt.RepairStatus(st)
		out = append(out, r)
	}
	return out, rows.Err()
}
