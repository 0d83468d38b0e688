package sqlconn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

// A declared database never reaches keep's own store or another
// connection (issue 38). Before each statement, on the connection that
// runs it, keep asks the database what its session may reach, from the
// database's own catalog:
//
//   - PostgreSQL: whether the role, or any role it is a member of (it
//     may SET ROLE to it in a DO block), has superuser rights (superuser,
//     CREATEROLE, the rights of pg_execute_server_program,
//     pg_read_server_files, pg_write_server_files, pg_signal_backend, or
//     EXECUTE granted on the server-file functions pg_read_file,
//     pg_read_binary_file, pg_ls_dir, pg_stat_file, lo_import, lo_export),
//     with which a statement reaches files (keep's own, where the server
//     runs as the same user), programs and other sessions; and
//     which extensions are installed (dblink and postgres_fdw open
//     connections elsewhere, an untrusted language does anything). An
//     extension not on knownPGExtensions is refused: keep cannot judge it.
//     An exec is asked again after its statement, before COMMIT, so a
//     statement that installs one is rolled back.
//   - MariaDB/MySQL: whether the user may use a role at all (a role's
//     rights are shown to an administrator only), and whether the user
//     (or its current role) holds SUPER,
//     FILE, CONNECTION ADMIN or FEDERATED ADMIN globally, and
//     which storage engines the server offers (FEDERATED, CONNECT, SPIDER
//     and S3 tables read and write other servers). An engine not on
//     knownMyEngines is refused.
//   - SQLite: ATTACH is refused by the vetter (sqlitevet.go).
//
// What keep cannot judge is refused by default; a person allows it
// knowingly in keep.toml: [connectors.sql.allow] NAME = ["superuser",
// "dblink", "FEDERATED"].

// knownPGExtensions are extensions that act inside their database only:
// none opens a connection, reads a server file or runs a program.
var knownPGExtensions = map[string]bool{
	"plpgsql": true, "pg_trgm": true, "pgcrypto": true, "uuid-ossp": true, "citext": true, "hstore": true,
	"ltree": true, "intarray": true, "cube": true, "earthdistance": true, "fuzzystrmatch": true, "unaccent": true,
	"btree_gin": true, "btree_gist": true, "isn": true, "seg": true, "tablefunc": true, "tsm_system_rows": true,
	"tsm_system_time": true, "dict_int": true, "dict_xsyn": true, "lo": true, "intagg": true, "bloom": true,
	"pg_stat_statements": true, "postgis": true, "vector": true,
}

// knownMyEngines are MariaDB/MySQL storage engines whose tables live in
// the server's own files.
var knownMyEngines = map[string]bool{
	"InnoDB": true, "MyISAM": true, "Aria": true, "MEMORY": true, "CSV": true, "MRG_MyISAM": true, "SEQUENCE": true,
	"PERFORMANCE_SCHEMA": true, "ARCHIVE": true, "BLACKHOLE": true,
}

// AllowSuperuser is the [connectors.sql.allow] item that lets keep run a
// script's statements as a role with superuser rights.
const AllowSuperuser = "superuser"

// pgServerQ says which server a session is on: its system identifier
// where the role may read it, and the server's start time in
// microseconds since the epoch (independent of the session's TimeZone
// and DateStyle), which any role may read.
const pgServerQ = `CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE') THEN (SELECT system_identifier::text FROM pg_control_system()) ELSE '' END,
  (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint, (SELECT oid FROM pg_database WHERE datname = current_database())::bigint`

// pgReachQ judges every role the session may become, not only the one it
// logs in as: superuser and CREATEROLE are never inherited, and a member
// of a role without INHERIT has none of its rights until it SETs it, yet a
// DO block (one statement) may SET ROLE to a superuser role it is a member
// of, read keep's files or dblink to keep's store, and RESET ROLE before
// keep asks again (issue 38, attack: GRANT postgres TO app, a laptop's
// way of giving an application "everything").
const pgReachQ = `WITH reach AS (SELECT m.oid, m.rolname, m.rolsuper, m.rolcreaterole FROM pg_roles m WHERE pg_has_role(current_user, m.oid, 'MEMBER'))
SELECT ARRAY(SELECT rolname::text FROM reach WHERE rolsuper OR rolcreaterole ORDER BY 1),
  ARRAY(SELECT x.rolname::text FROM reach x WHERE x.rolname IN ('pg_execute_server_program', 'pg_read_server_files', 'pg_write_server_files', 'pg_signal_backend')
        UNION SELECT 'EXECUTE on ' || p.proname FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace
        AND p.proname IN ('pg_read_file', 'pg_read_binary_file', 'pg_ls_dir', 'pg_stat_file', 'lo_import', 'lo_export')
        AND EXISTS (SELECT 1 FROM reach y WHERE has_function_privilege(y.oid, p.oid, 'EXECUTE')) ORDER BY 1),
  ARRAY(SELECT extname::text FROM pg_extension ORDER BY 1),
  current_user::text, ` + pgServerQ

// querier is a connection or a transaction on it.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgIdentity says which server and database a PostgreSQL session is on.
type pgIdentity struct {
	system  string // pg_control_system's identifier, "" where the role may not read it
	started int64  // the server's start, in microseconds
	db      int64  // the database's oid
	user    string // the session's role
}

// keepsStore is keep's own PostgreSQL store, as its sessions see it.
type keepsStore struct {
	url    string
	mu     sync.Mutex
	known  bool
	id     pgIdentity
	schema string
}

// identity reads keep's store's identity, again when fresh is set (the
// server's start time changes when it restarts).
func (k *keepsStore) identity(ctx context.Context, fresh bool) (pgIdentity, string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.known && !fresh {
		return k.id, k.schema, nil
	}
	conn, err := pgx.Connect(ctx, k.url)
	if err != nil {
		return pgIdentity{}, "", err
	}
	defer conn.Close(context.Background())
	var schema *string
	if err := conn.QueryRow(ctx, `SELECT `+pgServerQ+`, current_user::text, current_schema()`).Scan(&k.id.system, &k.id.started, &k.id.db, &k.id.user, &schema); err != nil {
		return pgIdentity{}, "", err
	}
	k.schema = ""
	if schema != nil {
		k.schema = *schema
	}
	k.known = true
	return k.id, k.schema, nil
}

// compare says whether a session whose identity is id is on keep's
// store's server, and on its database. Database oids repeat across
// servers, so the server decides: by its system identifier where both
// sides may read it, else by its start time, read afresh when it differs
// (the server may have restarted).
func (k *keepsStore) compare(ctx context.Context, id pgIdentity) (server, db bool, keep pgIdentity, schema string, err error) {
	keep, schema, err = k.identity(ctx, false)
	if err != nil {
		return false, false, keep, "", err
	}
	if keep.system != "" && id.system != "" {
		server = keep.system == id.system
	} else {
		if keep.started != id.started {
			if keep, schema, err = k.identity(ctx, true); err != nil {
				return false, false, keep, "", err
			}
		}
		server = keep.started == id.started
	}
	return server, server && keep.db == id.db, keep, schema, nil
}

// guardPGAlone is guardPG on a session outside keep's transaction: in a
// transaction of its own, rolled back, whose search path is PostgreSQL's
// catalog first (keepsPath), so that no view of the role's named like a
// catalog table answers for it.
func (d *database) guardPGAlone(ctx context.Context, pc *pgx.Conn) error {
	tx, err := pc.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, keepsPath); err != nil {
		return err
	}
	return d.guardPG(ctx, tx)
}

// guardPG refuses a session that reaches beyond its database, on the
// connection q the statement runs on.
func (d *database) guardPG(ctx context.Context, q querier) error {
	var supers, roles, exts []string
	var user string
	var id pgIdentity
	if err := q.QueryRow(ctx, pgReachQ).Scan(&supers, &roles, &exts, &user, &id.system, &id.started, &id.db); err != nil {
		return err
	}
	if (len(supers) > 0 || len(roles) > 0) && !d.allows(AllowSuperuser) {
		var rights string
		switch {
		case slices.Contains(supers, user):
			rights = "superuser or CREATEROLE"
		case len(supers) > 0:
			rights = "membership of " + strings.Join(supers, ", ") + ", which has superuser or CREATEROLE (one statement, a DO block, may SET ROLE to it)"
		default:
			rights = "the rights of " + strings.Join(roles, ", ") + " (its own, or a role's it may SET ROLE to)"
		}
		return setupRefusal{fmt.Sprintf("database %s: its role %q has %s, with which a statement reaches beyond the database (server files, programs, other sessions and databases, keep's store among them), so keep runs no script statement as it. Declare a role without them, or allow it knowingly in keep.toml: [connectors.sql.allow] %s = [%q]",
			d.name, user, rights, d.name, AllowSuperuser)}
	}
	var unknown []string
	for _, e := range exts {
		if !knownPGExtensions[e] && !d.allows(e) {
			unknown = append(unknown, e)
		}
	}
	if len(unknown) > 0 {
		return setupRefusal{fmt.Sprintf("database %s has the extension %s installed, which keep does not know to stay inside the database (dblink and postgres_fdw open connections to other databases, keep's store among them; an untrusted language runs anything), so keep runs no script statement there. Drop it, declare a database without it, or allow it knowingly in keep.toml: [connectors.sql.allow] %s = [%s]",
			d.name, strings.Join(unknown, ", "), d.name, quoted(unknown))}
	}
	if d.store == nil {
		return nil
	}
	server, sameDB, keep, schema, err := d.store.compare(ctx, id)
	if err != nil || !server {
		return nil // another server; or keep's store unreachable from here, which is keep's to report
	}
	if sameDB {
		var reach bool
		if err := q.QueryRow(ctx, `SELECT $1::text IS NULL OR has_schema_privilege(current_user, $1::text, 'USAGE')`, nilIfEmpty(schema)).Scan(&reach); err != nil {
			return err
		}
		if reach {
			return setupRefusal{fmt.Sprintf("database %s is keep's own store (the same PostgreSQL server and database, and its role may use keep's schema %q): a script's statements there would reach keep's grants and ledgers. Declare the application's database, or a role that cannot use keep's schema", d.name, schema)}
		}
	}
	if user == keep.user {
		return setupRefusal{fmt.Sprintf("database %s is on the PostgreSQL server of keep's own store, as the role keep's store uses (%q): a statement as that role could end keep's sessions (pg_terminate_backend) or change the settings they start with (ALTER ROLE … SET). Declare a role of its own for the application's database", d.name, user)}
	}
	return nil
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func (d *database) allows(item string) bool {
	for _, a := range d.allow {
		if strings.EqualFold(a, item) {
			return true
		}
	}
	return false
}

// sqlQuerier is a database/sql connection or transaction.
type sqlQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// guardMySQL refuses a MariaDB/MySQL session that reaches beyond its
// server's own files.
func (d *database) guardMySQL(ctx context.Context, q sqlQuerier) error {
	// The user's global privileges, and its current role's (MariaDB).
	privs, err := column(ctx, q, `SELECT DISTINCT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES
 WHERE (GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')
        OR GRANTEE = CONCAT('''', CURRENT_ROLE(), ''''))
 AND PRIVILEGE_TYPE IN ('SUPER', 'FILE', 'CONNECTION ADMIN', 'FEDERATED ADMIN') ORDER BY 1`)
	if err != nil {
		return err
	}
	if len(privs) > 0 && !d.allows(AllowSuperuser) {
		return setupRefusal{fmt.Sprintf("database %s: its user holds %s on the whole server, with which a statement reads and writes the server's files, ends other connections or reaches other servers, so keep runs no script statement as it. Declare a user without them, or allow it knowingly in keep.toml: [connectors.sql.allow] %s = [%q]",
			d.name, strings.Join(privs, " and "), d.name, AllowSuperuser)}
	}
	// A role's rights are shown to an administrator only: USER_PRIVILEGES
	// gives an ordinary user its own rows, never its roles' (a default
	// role holding FILE passed as ordinary), and a role not enabled is one
	// SET ROLE away in a compound statement (BEGIN NOT ATOMIC …, which
	// MariaDB prepares). keep cannot judge a role, so a user that may use
	// one is refused unless allowed knowingly.
	roles, err := column(ctx, q, `SELECT DISTINCT ROLE_NAME FROM information_schema.APPLICABLE_ROLES ORDER BY 1`)
	var my *mysql.MySQLError
	if errors.As(err, &my) && my.Number == 1109 { // a server without roles (MySQL 5.7)
		roles, err = nil, nil
	}
	if err != nil {
		return err
	}
	if len(roles) > 0 && !d.allows(AllowSuperuser) {
		return setupRefusal{fmt.Sprintf("database %s: its user may use the role %s, whose server-wide rights (SUPER, FILE, …: a statement then reads and writes the server's files or ends other connections) MariaDB shows only to an administrator, so keep cannot judge them and runs no script statement as it. Declare a user without roles, or allow it knowingly in keep.toml: [connectors.sql.allow] %s = [%q]",
			d.name, strings.Join(roles, ", "), d.name, AllowSuperuser)}
	}
	engines, err := column(ctx, q, `SELECT ENGINE FROM information_schema.ENGINES WHERE SUPPORT IN ('YES', 'DEFAULT') ORDER BY 1`)
	if err != nil {
		return err
	}
	var unknown []string
	for _, e := range engines {
		if !knownMyEngines[e] && !d.allows(e) {
			unknown = append(unknown, e)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return setupRefusal{fmt.Sprintf("database %s: the server offers the storage engine %s, which keep does not know to keep a table on this server (a FEDERATED, CONNECT, SPIDER or S3 table reads and writes another server), so keep runs no script statement there. Uninstall it, or allow it knowingly in keep.toml: [connectors.sql.allow] %s = [%s]",
			d.name, strings.Join(unknown, ", "), d.name, quoted(unknown))}
	}
	return nil
}

func column(ctx context.Context, q sqlQuerier, query string) ([]string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
