package sqldb

import (
	"fmt"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
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
	c, err := scanConnection(t.r.QueryRow(`SELECT `+connectionCols+` FROM connections WHERE provider=?`, provider))
	if err != nil {
		return c, notFound("connection", provider, err)
	}
	return c, nil
}

func (t *Tx) ConnectionPut(c kt.Connection) error {
	_, err := t.r.Exec(`INSERT INTO connections(`+connectionCols+`) VALUES(?,?,?,?,?,?,?)
ON CONFLICT(provider) DO UPDATE SET account=excluded.account, scopes=excluded.scopes, sealed=excluded.sealed,
broken=excluded.broken, updated_at=excluded.updated_at`,
		c.Provider, c.Account, strings.Join(c.Scopes, " "), c.Sealed, c.Broken, c.CreatedAt, c.UpdatedAt)
	if err != nil {
		return fmt.Errorf("save the %s connection: %w", c.Provider, err)
	}
	return nil
}

func (t *Tx) ConnectionDelete(provider string) error {
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
