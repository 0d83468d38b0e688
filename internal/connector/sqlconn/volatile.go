package sqlconn

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A PostgreSQL read is judged by what it calls, as PostgreSQL's own
// catalog says (issue 38 #5): a read-only transaction still lets
// pg_terminate_backend, pg_advisory_xact_lock, pg_notify or dblink act.
// keep asks PostgreSQL to parse the statement as the body of a temporary
// SQL function (BEGIN ATOMIC, PostgreSQL 14 and later), in a transaction
// rolled back at once: PostgreSQL stores the body as its parse tree
// (pg_proc.prosqlbody), with every function, aggregate, window function
// and operator resolved to its oid and every relation to its oid. keep
// reads those oids from the tree, follows each view to its own tree
// (pg_rewrite.ev_action), each table to its row-level security policies
// for reads (pg_policy.polqual), each type to its domain checks
// (pg_constraint.conbin) and each aggregate to its own functions, and
// looks each function up in pg_proc: a read
// calls only IMMUTABLE and STABLE functions, and the few VOLATILE ones of
// allowedVolatile, which change nothing but their own answer. Nothing of
// the statement's text is read by keep; a function whose owner declared it
// STABLE is taken at its word.

// allowedVolatile are pg_catalog's VOLATILE functions a read may call:
// random numbers and the clock.
var allowedVolatile = map[string]bool{"random": true, "random_normal": true, "gen_random_uuid": true, "clock_timestamp": true, "timeofday": true}

// maxViewDepth bounds how deep keep follows views into views.
const maxViewDepth = 32

// judgeReadPG refuses a read that calls a VOLATILE function, on the
// session that will run it; paramOIDs are its parameters' types as
// PostgreSQL described them.
func judgeReadPG(ctx context.Context, pc *pgx.Conn, q string, paramOIDs []uint32) error {
	tx, err := pc.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	path, err := enterJudging(ctx, tx)
	if err != nil {
		return err
	}
	types, err := paramTypes(ctx, tx, paramOIDs)
	if err != nil {
		return err
	}
	tree, err := parsedRead(ctx, tx, q, types, path)
	if err != nil {
		return err
	}
	for _, o := range paramOIDs { // a parameter of a domain's type is checked as it binds
		tree += fmt.Sprintf(" :paramtype %d", o)
	}
	volatile, err := volatileCalls(ctx, tx, tree)
	if err != nil {
		return err
	}
	if len(volatile) > 0 {
		sort.Strings(volatile)
		volatile = compactStrings(volatile)
		return refusal{fmt.Sprintf("sql.query only reads, and this statement calls %s, which PostgreSQL's catalog marks VOLATILE (it may act: take a lock, change a setting, signal another session, reach another database); a read calls IMMUTABLE and STABLE functions only (and %s). Call it through sql.exec, which keep makes exactly once",
			strings.Join(volatile, ", "), allowedList())}
	}
	return nil
}

// enterJudging sets up the judging transaction: it returns the session's
// search path (the read's body is parsed with it) and sets keep's own
// (keepsPath), and refuses a role without the TEMPORARY privilege the
// judging needs.
func enterJudging(ctx context.Context, tx pgx.Tx) (path string, err error) {
	// keep's own catalog queries run with PostgreSQL's catalog first
	// (keepsPath): a role that set its own search path to a schema of its
	// before pg_catalog (ALTER ROLE … SET search_path, in an earlier exec)
	// shadowed pg_proc with a view saying every function is STABLE (issue
	// 38, attack). The read's body is parsed with the session's path.
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_setting('search_path')`).Scan(&path); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, keepsPath); err != nil {
		return "", err
	}
	var temp bool
	var db string
	if err := tx.QueryRow(ctx, `SELECT has_database_privilege(current_database(), 'TEMPORARY'), current_database()::text`).Scan(&temp, &db); err != nil {
		return "", err
	}
	if !temp {
		return "", refusal{fmt.Sprintf("keep judges a read by having PostgreSQL parse it as a temporary function's body (rolled back at once), which needs the role's TEMPORARY privilege on the database: GRANT TEMPORARY ON DATABASE %s TO the role", pgx.Identifier{db}.Sanitize())}
	}
	return path, nil
}

// paramTypes names the types of the read's parameters, text where
// PostgreSQL left one unknown.
func paramTypes(ctx context.Context, tx pgx.Tx, paramOIDs []uint32) ([]string, error) {
	if len(paramOIDs) == 0 {
		return nil, nil
	}
	oids := make([]int64, len(paramOIDs))
	for i, o := range paramOIDs {
		oids[i] = int64(o)
	}
	rows, err := tx.Query(ctx, `SELECT CASE WHEN t IN (0, 705) THEN 'text' ELSE format_type(t, NULL) END FROM unnest($1::oid[]) WITH ORDINALITY AS u(t, n) ORDER BY n`, oids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// parsedRead has PostgreSQL parse the read q as the body of a temporary
// function taking types, with the session's search path, and returns the
// parsed tree (the function is gone with the judging transaction).
func parsedRead(ctx context.Context, tx pgx.Tx, q string, types []string, path string) (string, error) {
	// The statement ends on its own line: text that closed the body early
	// leaves "END" as a second statement, which the extended protocol
	// refuses, or an open comment, a syntax error.
	ddl := "CREATE FUNCTION pg_temp.keep_judged_read(" + strings.Join(types, ", ") + ") RETURNS SETOF record LANGUAGE sql BEGIN ATOMIC\n" + q + "\n;\nEND"
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', $1, true)`, path); err != nil {
		return "", err
	}
	_, err := tx.Exec(ctx, ddl, pgx.QueryExecModeExec)
	if _, perr := tx.Exec(ctx, keepsPath); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		var pg *pgconn.PgError
		if errors.As(err, &pg) && (pg.Code == "0A000" || pg.Code == "42601" || pg.Code == "42P13") {
			return "", refusal{fmt.Sprintf("keep judges a read by the functions PostgreSQL resolves it to call, and PostgreSQL cannot take this statement as a read's body (%s): sql.query runs SELECT, VALUES and WITH … SELECT (EXPLAIN, SHOW, CALL and the like are refused; PostgreSQL 14 or later is needed)", pg.Message)}
		}
		return "", onePG(err)
	}
	var tree string
	if err := tx.QueryRow(ctx, `SELECT prosqlbody::text FROM pg_proc WHERE pronamespace = pg_my_temp_schema() AND proname = 'keep_judged_read'`).Scan(&tree); err != nil {
		return "", err
	}
	return tree, nil
}

// volatileCalls names the VOLATILE functions (those not allowed) a parsed
// read calls, through the views it reads, the row-level security
// policies of its tables and the checks of its domains, to maxViewDepth.
func volatileCalls(ctx context.Context, tx pgx.Tx, tree string) ([]string, error) {
	seenViews, seenTypes := map[int64]bool{}, map[int64]bool{}
	var volatile []string
	trees := []string{tree}
	for depth := 0; len(trees) > 0; depth++ {
		if depth > maxViewDepth {
			return nil, refusal{fmt.Sprintf("the statement reads views nested deeper than %d; keep cannot judge what it calls", maxViewDepth)}
		}
		var funcs, ops, rels, types []int64
		for _, t := range trees {
			f, o, r, ty := nodeOIDs(t)
			funcs, ops, rels, types = append(funcs, f...), append(ops, o...), append(rels, r...), append(types, ty...)
		}
		v, err := volatileOf(ctx, tx, funcs, ops)
		if err != nil {
			return nil, err
		}
		volatile = append(volatile, v...)
		var fresh, freshTypes []int64
		for _, r := range rels {
			if !seenViews[r] {
				seenViews[r] = true
				fresh = append(fresh, r)
			}
		}
		for _, ty := range types {
			if !seenTypes[ty] {
				seenTypes[ty] = true
				freshTypes = append(freshTypes, ty)
			}
		}
		if trees, err = runsWith(ctx, tx, fresh, freshTypes); err != nil {
			return nil, err
		}
	}
	return volatile, nil
}

// volatileOf names the VOLATILE functions, not allowed, among funcs, the
// operators' ops, and an aggregate's own (a user's aggregate is IMMUTABLE
// whatever its transition function does).
func volatileOf(ctx context.Context, tx pgx.Tx, funcs, ops []int64) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT n.nspname::text, p.proname::text, p.provolatile = 'v' FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE p.oid = ANY($1::oid[]) OR p.oid IN (SELECT oprcode FROM pg_operator WHERE oid = ANY($2::oid[]))
 OR p.oid IN (SELECT unnest(ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn, a.aggdeserialfn, a.aggmtransfn, a.aggminvtransfn, a.aggmfinalfn]::oid[])
              FROM pg_aggregate a WHERE a.aggfnoid = ANY($1::oid[]))`, funcs, ops)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var volatile []string
	for rows.Next() {
		var schema, name string
		var isVolatile bool
		if err := rows.Scan(&schema, &name, &isVolatile); err != nil {
			return nil, err
		}
		if isVolatile && !(schema == "pg_catalog" && allowedVolatile[name]) {
			volatile = append(volatile, schema+"."+name)
		}
	}
	return volatile, rows.Err()
}

// runsWith reads the parsed trees of what runs with a read of the
// relations rels and the types: a view's query, and a table's row-level
// security policies for reads (a policy's expression runs with the
// read); a domain's checks run where a value becomes one (a cast, a
// parameter). None when both are empty.
func runsWith(ctx context.Context, tx pgx.Tx, rels, types []int64) ([]string, error) {
	if len(rels) == 0 && len(types) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `SELECT r.ev_action::text FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class WHERE c.oid = ANY($1::oid[]) AND c.relkind = 'v' AND r.ev_type = '1'
 UNION ALL SELECT p.polqual::text FROM pg_policy p WHERE p.polrelid = ANY($1::oid[]) AND p.polqual IS NOT NULL AND p.polcmd IN ('r', '*')
 UNION ALL SELECT k.conbin::text FROM pg_constraint k WHERE k.contypid = ANY($2::oid[]) AND k.conbin IS NOT NULL`, rels, types)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func allowedList() string {
	names := make([]string, 0, len(allowedVolatile))
	for n := range allowedVolatile {
		names = append(names, n+"()")
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// nodeOIDs reads a PostgreSQL parse tree as nodeToString writes it
// (pg_node_tree) and returns the oids of the functions it calls (FuncExpr,
// Aggref, WindowFunc, an operator's function when set), of its operators,
// of the relations it reads and of the types its values become. Tokens are read as PostgreSQL's
// pg_strtok reads them: whitespace separates, ( ) { } stand alone, a
// backslash takes the next character literally; names never hide a
// field, since a field is a bare token.
func nodeOIDs(tree string) (funcs, ops, rels, types []int64) {
	var field string
	for _, tok := range pgTokens(tree) {
		if strings.HasPrefix(tok, ":") {
			field = tok
			continue
		}
		n, err := strconv.ParseInt(tok, 10, 64)
		if err != nil || n <= 0 {
			field = ""
			continue
		}
		switch field {
		case ":funcid", ":aggfnoid", ":winfnoid", ":opfuncid":
			funcs = append(funcs, n)
		case ":opno":
			ops = append(ops, n)
		case ":relid":
			rels = append(rels, n)
		case ":resulttype", ":paramtype", ":consttype":
			types = append(types, n)
		}
		field = ""
	}
	return funcs, ops, rels, types
}

func pgTokens(s string) []string {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f':
			i++
			continue
		case c == '(' || c == ')' || c == '{' || c == '}':
			toks = append(toks, string(c))
			i++
			continue
		}
		var b strings.Builder
		escaped := false
		for i < len(s) {
			c := s[i]
			if c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '(' || c == ')' || c == '{' || c == '}' {
				break
			}
			if c == '\\' && i+1 < len(s) {
				b.WriteByte(s[i+1])
				escaped = true
				i += 2
				continue
			}
			b.WriteByte(c)
			i++
		}
		if escaped {
			toks = append(toks, "\\"+b.String()) // a name: never a field or a number
		} else {
			toks = append(toks, b.String())
		}
	}
	return toks
}
