package sqldb

import (
	"encoding/json"
	"fmt"

	kt "github.com/keep-run/keep/internal/keeptype"
)

const secretCols = `name, sealed, created_at, updated_at, hosts, digest`

func scanSecret(s interface{ Scan(...any) error }) (kt.Secret, error) {
	var x kt.Secret
	var hosts, digest string
	if err := s.Scan(&x.Name, &x.Sealed, &x.CreatedAt, &x.UpdatedAt, &hosts, &digest); err != nil {
		return x, err
	}
	if err := checkSecret(x.Name, hosts, digest); err != nil {
		return x, err
	}
	if err := json.Unmarshal([]byte(hosts), &x.Hosts); err != nil {
		return x, kt.UndecodableJSON(fmt.Sprintf("the hosts the secret %s may be sent to", x.Name), "secrets", "name="+x.Name, err)
	}
	return x, nil
}

func (t *Tx) SecretGet(name string) (kt.Secret, error) {
	if err := t.shared(); err != nil {
		return kt.Secret{}, err
	}
	x, err := scanSecret(t.r.QueryRow(`SELECT `+secretCols+` FROM secrets WHERE name=?`, name))
	if err != nil {
		return x, notFound("secret", name, err)
	}
	return x, nil
}

func (t *Tx) SecretPut(x kt.Secret) error {
	if err := t.shared(); err != nil {
		return err
	}
	hosts := x.Hosts
	if hosts == nil {
		hosts = []string{}
	}
	h, err := json.Marshal(hosts)
	if err != nil {
		return err
	}
	_, err = t.r.Exec(`INSERT INTO secrets(`+secretCols+`) VALUES(?,?,?,?,?,?)
ON CONFLICT(name) DO UPDATE SET sealed=excluded.sealed, updated_at=excluded.updated_at, hosts=excluded.hosts, digest=excluded.digest`,
		x.Name, x.Sealed, x.CreatedAt, x.UpdatedAt, string(h), secretDigest(x.Name, string(h)))
	if err != nil {
		return fmt.Errorf("save the secret %s: %w", x.Name, err)
	}
	return nil
}

func (t *Tx) SecretDelete(name string) error {
	if err := t.shared(); err != nil {
		return err
	}
	res, err := t.r.Exec(`DELETE FROM secrets WHERE name=?`, name)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("secret %s: %w", name, kt.ErrNotFound)
	}
	return nil
}

func (t *Tx) SecretList() ([]kt.Secret, error) {
	rows, err := t.r.Query(`SELECT ` + secretCols + ` FROM secrets ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kt.Secret
	for rows.Next() {
		x, err := scanSecret(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}
