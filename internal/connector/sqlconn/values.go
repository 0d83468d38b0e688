package sqlconn

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// How values travel between a database and a script (docs/scripts.md,
// "How values travel"): each arrives as JSON can hold it without loss.
//   - integers within ±2^53 are numbers; beyond, decimal strings (a
//     JavaScript number would round them); NUMERIC/DECIMAL are strings;
//   - NaN and ±Infinity floats are the strings "NaN", "Infinity", "-Infinity";
//   - bytes (bytea, BLOB, BINARY, SQLite blobs) are {"base64": "…"}, and an
//     argument of that shape binds as bytes;
//   - JSON/JSONB are parsed; DATE is "2006-01-02"; a time with a zone
//     (timestamptz) is RFC 3339 in UTC; one without (timestamp, DATETIME,
//     and MariaDB's TIMESTAMP, read in a UTC session) has no zone suffix,
//     in a form the database takes back.

// MaxResultBytes bounds the size of what one call hands a script, as
// every connector's largest answer (a file, an HTTP body) is bounded:
// within keeptype.MaxHostCallBytes once bytes are base64 and text escaped.
const MaxResultBytes = 8 << 20

// maxExact is the largest integer a JavaScript number holds exactly.
const maxExact = 1 << 53

// bytesKey names the one property of a bytes object.
const bytesKey = "base64"

// checkArg says why a script's argument cannot be bound, or nil.
func checkArg(method string, i int, x any) error {
	switch t := x.(type) {
	case nil, string, bool:
		return nil
	case float64:
		if t == math.Trunc(t) && math.Abs(t) > maxExact {
			return fmt.Errorf("%s: args[%d] is %.0f, beyond 2^53, where JavaScript numbers stop being exact (2**63 is the largest bigint read back as a number): pass the integer as a string, like \"9223372036854775807\", and the database converts it exactly", method, i, t)
		}
		return nil
	case map[string]any:
		if s, ok := t[bytesKey].(string); ok && len(t) == 1 {
			if _, err := base64.StdEncoding.DecodeString(s); err != nil {
				return fmt.Errorf("%s: args[%d].base64 is not base64: %v", method, i, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: args[%d] is an %T; bind numbers, strings, booleans, null or bytes as { base64: \"…\" } (JSON.stringify other objects first)", method, i, x)
}

// bind turns JSON values into driver values: whole numbers as integers,
// bytes objects as bytes.
func bind(a map[string]any) []any {
	args, _ := a["args"].([]any)
	out := make([]any, len(args))
	for i, v := range args {
		switch t := v.(type) {
		case float64:
			if t == math.Trunc(t) && math.Abs(t) <= maxExact {
				out[i] = int64(t)
				continue
			}
		case map[string]any:
			b, _ := base64.StdEncoding.DecodeString(str(t[bytesKey]))
			out[i] = b
			continue
		}
		out[i] = v
	}
	return out
}

// budget counts what a result holds, against MaxRows and MaxResultBytes.
type budget struct{ rows, bytes int }

func (b *budget) add(row map[string]any) error {
	b.rows++
	if b.rows > MaxRows {
		return refusal{fmt.Sprintf("the statement returned more than %d rows; add a LIMIT (or page with WHERE id > last one)", MaxRows)}
	}
	for k, v := range row {
		b.bytes += len(k) + sizeOf(v)
	}
	if b.bytes > MaxResultBytes {
		return tooBig(fmt.Sprintf("the statement's result at row %d", b.rows), MaxResultBytes)
	}
	return nil
}

func sizeOf(v any) int {
	switch t := v.(type) {
	case string:
		return len(t)
	case map[string]any:
		n := 0
		for k, x := range t {
			n += len(k) + sizeOf(x)
		}
		return n
	case []any:
		n := 0
		for _, x := range t {
			n += sizeOf(x)
		}
		return n
	}
	return 8
}

// scan reads a database/sql result, each value as it travels (value).
func scan(rows *sql.Rows, driver string) ([]any, error) {
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	var b budget
	out := []any{}
	for rows.Next() {
		vals := make([]any, len(types))
		ptrs := make([]any, len(types))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := map[string]any{}
		for i, ct := range types {
			row[ct.Name()] = value(driver, ct.DatabaseTypeName(), vals[i])
		}
		if err := b.add(row); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// scanPG reads a pgx result (keep's own transaction of sql.exec); a value
// of a type value does not know travels as PostgreSQL writes it in text.
func scanPG(rows pgx.Rows, tm *pgtype.Map) ([]any, error) {
	fields := rows.FieldDescriptions()
	var b budget
	out := []any{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		row := map[string]any{}
		for i, f := range fields {
			typ := ""
			if t, ok := tm.TypeForOID(f.DataTypeOID); ok {
				typ = strings.ToUpper(t.Name)
			}
			v := vals[i]
			switch v.(type) {
			case nil, string, []byte, bool, int64, int32, int16, float64, float32, time.Time, map[string]any, []any:
			default:
				if txt, err := tm.Encode(f.DataTypeOID, pgtype.TextFormatCode, v, nil); err == nil {
					v = string(txt)
				}
			}
			row[f.Name] = value("pgx", typ, v)
		}
		if err := b.add(row); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// binaryTypes are the column types whose []byte is bytes, not text.
var binaryTypes = map[string]bool{"BYTEA": true, "BLOB": true, "TINYBLOB": true, "MEDIUMBLOB": true, "LONGBLOB": true, "BINARY": true, "VARBINARY": true, "BIT": true, "GEOMETRY": true}

// value is one scanned value as a script receives it.
func value(driver, typ string, v any) any {
	switch t := v.(type) {
	case nil, bool:
		return t
	case []byte:
		switch {
		case driver == "sqlite" || binaryTypes[typ] || !utf8.Valid(t):
			return map[string]any{bytesKey: base64.StdEncoding.EncodeToString(t)}
		}
		return value(driver, typ, string(t))
	case string:
		if typ == "JSON" || typ == "JSONB" {
			var x any
			if json.Unmarshal([]byte(t), &x) == nil {
				return x
			}
		}
		if strings.Contains(typ, "INT") && !strings.Contains(typ, "POINT") && !strings.Contains(typ, "INTERVAL") {
			if n, err := strconv.ParseInt(t, 10, 64); err == nil {
				return integer(n)
			}
		}
		return t
	case int64:
		return integer(t)
	case int32:
		return int64(t)
	case int16:
		return int64(t)
	case uint64:
		if t > maxExact {
			return strconv.FormatUint(t, 10)
		}
		return int64(t)
	case float32:
		return float(float64(t))
	case float64:
		return float(t)
	case time.Time:
		return timeValue(driver, typ, t)
	}
	if b, err := json.Marshal(v); err == nil {
		var x any
		if json.Unmarshal(b, &x) == nil {
			return x
		}
	}
	return fmt.Sprint(v)
}

func integer(n int64) any {
	if n > maxExact || n < -maxExact {
		return strconv.FormatInt(n, 10)
	}
	return n
}

func float(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return f
}

// timeValue writes a time with its zone only where the column has one.
func timeValue(driver, typ string, t time.Time) string {
	switch {
	case typ == "DATE":
		return t.Format(time.DateOnly)
	case typ == "TIMESTAMPTZ" || driver == "sqlite":
		return t.UTC().Format(time.RFC3339Nano)
	}
	// timestamp without time zone, DATETIME, MariaDB's TIMESTAMP (in the
	// session's UTC): the wall clock as stored, which the database takes back.
	return t.Format("2006-01-02T15:04:05.999999999")
}
