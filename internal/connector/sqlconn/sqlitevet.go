package sqlconn

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// vetter judges an SQLite statement by compiling it — SQLite's own parser
// and authorizer, never a reading of its text — on a handle of its own
// opened on the same file, before keep runs it on the connection:
//
//   - one statement: the text after the first statement must hold no other;
//   - never ATTACH, DETACH, PRAGMA, BEGIN/COMMIT/ROLLBACK or SAVEPOINT
//     (ATTACH of keep's own keep.db is how a script would reach keep;
//     a PRAGMA could turn query_only or the journal off);
//   - a query is read-only (sqlite3_stmt_readonly);
//   - an exec never writes keep_mutations, the table that makes it exactly
//     once, nor makes a table, view or trigger of that name.
//
// The authorizer is called while a statement compiles, for the statement
// and for the triggers it would fire, so a trigger made earlier that
// writes keep_mutations is refused when the statement firing it compiles.
// modernc's database/sql driver does not expose the authorizer, so the
// vetter uses the same SQLite (modernc.org/sqlite/lib) directly.
type vetter struct {
	mu    sync.Mutex
	tls   *libc.TLS
	db    uintptr
	query bool   // vetting for sql.query
	why   string // what the authorizer refused, during one prepare
	// out receives SQLite's out-parameters (a handle, a statement, the
	// tail): the vetter lives on the heap, which Go never moves.
	out [2]uintptr
}

var (
	vettersMu sync.Mutex
	vetters   = map[uintptr]*vetter{} // by database handle, for the authorizer
)

// SQLite's authorizer action codes (sqlite3.h).
const (
	authCreateTempTable   = 4
	authCreateTempTrigger = 5
	authCreateTempView    = 6
	authCreateTrigger     = 7
	authCreateView        = 8
	authDelete            = 9
	authDropTable         = 11
	authCreateTable       = 2
	authInsert            = 18
	authPragma            = 19
	authTransaction       = 22
	authUpdate            = 23
	authAttach            = 24
	authDetach            = 25
	authAlterTable        = 26
	authSavepoint         = 32
)

func openVetter(path string) (*vetter, error) {
	tls := libc.NewTLS()
	zPath, err := libc.CString(path)
	if err != nil {
		tls.Close()
		return nil, err
	}
	defer libc.Xfree(tls, zPath)
	v := &vetter{tls: tls}
	rc := sqlite3.Xsqlite3_open_v2(tls, zPath, uintptr(unsafe.Pointer(&v.out[0])), sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE|sqlite3.SQLITE_OPEN_FULLMUTEX, 0)
	db := v.out[0]
	if rc != sqlite3.SQLITE_OK {
		msg := "cannot open the database file"
		if db != 0 {
			msg = libc.GoString(sqlite3.Xsqlite3_errmsg(tls, db))
			sqlite3.Xsqlite3_close_v2(tls, db)
		}
		tls.Close()
		return nil, errors.New(msg)
	}
	sqlite3.Xsqlite3_busy_timeout(tls, db, 5000)
	v.db = db
	vettersMu.Lock()
	vetters[db] = v
	vettersMu.Unlock()
	sqlite3.Xsqlite3_set_authorizer(tls, db, cFuncPointer(authorize), db)
	return v, nil
}

func (v *vetter) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.db == 0 {
		return
	}
	vettersMu.Lock()
	delete(vetters, v.db)
	vettersMu.Unlock()
	sqlite3.Xsqlite3_close_v2(v.tls, v.db)
	v.tls.Close()
	v.db = 0
}

// cFuncPointer turns a Go function into the function pointer the
// transpiled SQLite calls (what modernc.org/sqlite does for its hooks).
func cFuncPointer[T any](f T) uintptr { return *(*uintptr)(unsafe.Pointer(&struct{ f T }{f})) }

// authorize is SQLite's authorizer callback for every vetter.
func authorize(tls *libc.TLS, pArg uintptr, code int32, zArg1, zArg2, zArg3, zArg4 uintptr) int32 {
	vettersMu.Lock()
	v := vetters[pArg]
	vettersMu.Unlock()
	if v == nil {
		return sqlite3.SQLITE_DENY
	}
	arg1, arg2 := libc.GoString(zArg1), libc.GoString(zArg2)
	deny := func(why string) int32 {
		if v.why == "" {
			v.why = why
		}
		return sqlite3.SQLITE_DENY
	}
	switch code {
	case authAttach, authDetach:
		return deny("ATTACH and DETACH are refused: a script reaches only the database declared in keep.toml")
	case authPragma:
		return deny(fmt.Sprintf("PRAGMA %s is refused: it would change how keep's connection behaves", arg1))
	case authTransaction, authSavepoint:
		return deny("transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT) is keep's: each call runs in a transaction keep opens and ends")
	}
	if v.query {
		return sqlite3.SQLITE_OK // a write is refused by stmt_readonly after the compile
	}
	var table string
	switch code {
	case authInsert, authUpdate, authDelete, authDropTable, authCreateTable, authCreateTempTable, authCreateView, authCreateTempView:
		table = arg1
	case authAlterTable, authCreateTrigger, authCreateTempTrigger:
		table = arg2
	}
	if strings.EqualFold(table, Table) {
		return deny(Table + " is keep's record of the writes it made exactly once; a statement may not write it")
	}
	return sqlite3.SQLITE_OK
}

// vet compiles sqlText and says why it may not run, or nil.
func (v *vetter) vet(sqlText string, query bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.db == 0 {
		return errors.New("the database is closed")
	}
	z, err := libc.CString(sqlText)
	if err != nil {
		return err
	}
	defer libc.Xfree(v.tls, z)
	prepare := func(from uintptr) (stmt, tail uintptr, err error) {
		v.why = ""
		v.out = [2]uintptr{}
		rc := sqlite3.Xsqlite3_prepare_v2(v.tls, v.db, from, -1, uintptr(unsafe.Pointer(&v.out[0])), uintptr(unsafe.Pointer(&v.out[1])))
		stmt, tail = v.out[0], v.out[1]
		switch {
		case v.why != "":
			err = errors.New(v.why)
		case rc != sqlite3.SQLITE_OK:
			err = errors.New(libc.GoString(sqlite3.Xsqlite3_errmsg(v.tls, v.db)))
		}
		if err != nil && stmt != 0 {
			sqlite3.Xsqlite3_finalize(v.tls, stmt)
			stmt = 0
		}
		return stmt, tail, err
	}
	v.query = query
	stmt, tail, err := prepare(z)
	if err != nil {
		return err
	}
	if stmt == 0 {
		return errors.New("the text holds no statement")
	}
	readonly := sqlite3.Xsqlite3_stmt_readonly(v.tls, stmt) != 0
	sqlite3.Xsqlite3_finalize(v.tls, stmt)
	if query && !readonly {
		return errors.New("sql.query only reads; this statement writes (use sql.exec, which makes a write exactly once)")
	}
	// The rest may hold comments, blanks and semicolons, and no statement.
	for tail != 0 && libc.GoString(tail) != "" {
		next, rest, err := prepare(tail)
		if next != 0 {
			sqlite3.Xsqlite3_finalize(v.tls, next)
		}
		if next != 0 || err != nil {
			return errors.New("one statement at a time: the text holds more after the first statement")
		}
		if rest == tail {
			break
		}
		tail = rest
	}
	return nil
}
