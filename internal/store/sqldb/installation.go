package sqldb

import "fmt"

// InstallationID is the id the store was given when it was created.
func (t *Tx) InstallationID() (string, error) {
	if err := t.shared(); err != nil {
		return "", err
	}
	var id string
	if err := t.r.QueryRow(`SELECT id FROM installation`).Scan(&id); err != nil {
		return "", fmt.Errorf("read the installation id: %w", err)
	}
	return id, nil
}

// InstallationSet gives the store another installation's id (keep migrate).
func (t *Tx) InstallationSet(id string) error {
	if err := t.shared(); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("an installation id cannot be empty")
	}
	if _, err := t.r.Exec(`UPDATE installation SET id=?`, id); err != nil {
		return fmt.Errorf("set the installation id: %w", err)
	}
	return nil
}
