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
