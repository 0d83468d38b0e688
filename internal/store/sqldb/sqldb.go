// Package sqldb is what keep's SQL backends share: the ledger's statements
// (Tx, store.Tx over a Runner) and the versioned migrations. The SQLite and
// PostgreSQL backends own their connections, transactions and schema files;
// the SQL that reads and writes the ledgers is written once, here.
//
// It may import store and keeptype.
package sqldb

import "database/sql"

// Runner runs the statements of one transaction.
type Runner interface {
	Exec(q string, args ...any) (sql.Result, error)
	Query(q string, args ...any) (*sql.Rows, error)
	QueryRow(q string, args ...any) Row
}

// Row is one row of a QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// SharedLocker is what a backend's Runner implements when write
// transactions of different workflows may run at once (PostgreSQL): the
// rows that belong to no workflow (connections, secrets, notices, the
// installation) are read and written only after LockShared, which
// serializes those transactions on them. A Runner without it (SQLite's
// single writer) needs nothing.
type SharedLocker interface {
	LockShared() error
}

// shared takes the backend's lock on the rows of no workflow, if it has one.
func (t *Tx) shared() error {
	if l, ok := t.r.(SharedLocker); ok {
		return l.LockShared()
	}
	return nil
}
