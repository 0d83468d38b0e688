package sqlconn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// A result's bytes are bounded before they are in keep's memory (issue
// 38: one 300 MB value took keep to 636 MiB, SQLite's randomblob to 254
// MiB). The drivers read a whole row before keep sees it, so a bound is
// set where each reads:
//   - PostgreSQL: pgx refuses a protocol message (one row is one message)
//     longer than maxWireBytes from its length header, before it reads the
//     body (MaxProtocolMessageBodyLen);
//   - MariaDB/MySQL: the connection's reader stops once it has read more
//     than maxWireBytes (boundedNet); the driver buffers at most one 16 MiB
//     packet beyond;
//   - SQLite, which runs in keep's process: SQLITE_LIMIT_LENGTH bounds any
//     string or blob a read makes or reads.
//
// Then the rows as decoded count against MaxResultBytes (budget). Every
// connection serves one call and is closed after it (SetMaxIdleConns(0)):
// nothing a statement leaves in its session (an advisory lock, a setting,
// GET_LOCK) outlives the call, and each connection's count is one call's.

// maxWireBytes bounds what one connection reads, and one PostgreSQL
// message: what one call may move (keeptype.MaxHostCallBytes), and room
// for the statement's other messages. It is above MaxResultBytes, which
// the decoded rows count against, so that an exec's recorded result
// (JSON of a result within MaxResultBytes, its escapes included) is read
// back on a replay.
const maxWireBytes = kt.MaxHostCallBytes + 1<<20

// sqliteLimitLength is SQLITE_LIMIT_LENGTH.
const sqliteLimitLength = 0

// boundedNet is the network name of MariaDB/MySQL connections whose reads
// are counted.
const boundedNet = "keep-bounded-tcp"

func init() {
	mysql.RegisterDialContext(boundedNet, func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		b, _ := ctx.Value(readBudgetKey{}).(*readBudget)
		if b == nil {
			b = &readBudget{}
		}
		return &countingConn{Conn: c, b: b, left: maxWireBytes}, nil
	})
}

func openDB(driverName, dsn string) (*sql.DB, error) {
	var db *sql.DB
	switch driverName {
	case "pgx":
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.MaxProtocolMessageBodyLen = maxWireBytes
		db = stdlib.OpenDB(*cfg)
	default:
		var err error
		if db, err = sql.Open(driverName, dsn); err != nil {
			return nil, err
		}
	}
	if driverName != "sqlite" {
		db.SetMaxIdleConns(0)
	}
	return db, nil
}

type readBudgetKey struct{}

// readBudget says whether a connection's reader passed the bound.
type readBudget struct{ over atomic.Bool }

// withReadBudget marks ctx so that a MariaDB/MySQL connection dialled
// under it reports there when its reads passed the bound.
func withReadBudget(ctx context.Context) (context.Context, *readBudget) {
	b := &readBudget{}
	return context.WithValue(ctx, readBudgetKey{}, b), b
}

var errReadBound = errors.New("the result passed keep's bound on what one sql call reads")

type countingConn struct {
	net.Conn
	b    *readBudget
	left int
}

func (c *countingConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		c.b.over.Store(true)
		return 0, errReadBound
	}
	if len(p) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= n
	return n, err
}

// tooBig is the refusal of a result past a bound.
func tooBig(where string, bound int) refusal {
	return refusal{fmt.Sprintf("%s passed %d MiB: one sql call hands a script at most %d MiB (keep's bound, checked before the bytes are in keep's memory; not a setting); select fewer or narrower columns (a substring, a length, a hash of a large value) or fewer rows (LIMIT)",
		where, bound>>20, MaxResultBytes>>20)}
}

// bounded turns a driver's error at the bound into the refusal that says
// so; b is the connection's read budget (MariaDB/MySQL), or nil.
func bounded(err error, b *readBudget) error {
	if err == nil {
		return nil
	}
	var big *pgproto3.ExceededMaxBodyLenErr
	var lite *sqlite.Error
	switch {
	case errors.As(err, &big):
		return tooBig("a row of the result", maxWireBytes)
	case b != nil && b.over.Load():
		return tooBig("the bytes read for the result", maxWireBytes)
	case errors.As(err, &lite) && lite.Code()&0xff == 18: // SQLITE_TOOBIG
		return tooBig("a value of the result", MaxResultBytes)
	}
	return err
}
