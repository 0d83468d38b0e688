package google

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	sheets "google.golang.org/api/sheets/v4"

	"github.com/keep-run/keep/internal/connector"
)

var (
	sheetsRead  = []string{Scope("spreadsheets.readonly"), Scope("spreadsheets"), Scope("drive")}
	sheetsWrite = []string{Scope("spreadsheets"), Scope("drive")}
)

// rowMark is the note an appended row's first cell carries: how reconcile
// tells keep's row from an identical one a person typed (docs/scripts.md).
func rowMark(key string) string { return "keep:" + key }

// sheetsLimits is what each Sheets method says of Google's quota.
var sheetsLimits = fmt.Sprintf("Google allows each user %d read requests and %d write requests a minute; keep paces its requests so that no minute holds more (a call waits its turn; one whose turn comes after its time limit is not sent and is retried), per keep process.", SheetsPerMinute, SheetsPerMinute)

type sheetsConn struct{ auth *Auth }

// service is the Sheets client, its requests paced under Google's
// per-user quota (pace.go).
func (s *sheetsConn) service(ctx context.Context, hc *http.Client) (*sheets.Service, error) {
	hc = &http.Client{Transport: paced{base: hc.Transport, p: s.auth.sheetsPace}, CheckRedirect: hc.CheckRedirect}
	return sheets.NewService(ctx, s.auth.options(hc, "")...)
}

func newSheets(auth *Auth) *connector.Connector {
	s := &sheetsConn{auth: auth}
	sheetParam := connector.Param{Name: "sheet", Type: "string", Doc: "the sheet's (tab's) title (default: the first sheet)"}
	idParam := connector.Param{Name: "spreadsheetId", Type: "string", Required: true, Doc: "the spreadsheet's id (from its URL: /spreadsheets/d/ID/edit)"}
	return &connector.Connector{
		Name:    "sheets",
		Doc:     "Google Sheets, through the Sheets API with the account of `keep connect google`. Rows are numbered as Sheets numbers them (the first row is 1).",
		Sources: map[string][]string{"sheets": {"row"}},
		Methods: map[string]*connector.Method{
			"getRows": {Name: "getRows", Kind: connector.KindRead, Scopes: sheetsRead, Validate: validateSheet("sheets.getRows", false), Do: s.getRows, Doc: connector.MethodDoc{
				Summary:  "Reads rows as Sheets shows them (formatted values).",
				Params:   []connector.Param{idParam, sheetParam, {Name: "range", Type: "string", Doc: "A1 cells within the sheet, like `A2:D` (default: the whole sheet)"}},
				ResultTS: "Array<{ rowId: number; values: string[] }>",
				Result:   "an array of `{ rowId, values }`: `rowId` the row's number, `values` its cells as strings (empty rows come as `values: []`)",
				Errors:   "a spreadsheet or sheet that does not exist, or a bad range: logic; 401/403: permission (403 `accessNotConfigured`: enable the Google Sheets API in the OAuth client's Cloud project); 429, 403 usage limits and 5xx: transient.",
				Limits:   sheetsLimits + " A read costs one or two read requests.",
			}},
			"appendRow": {Name: "appendRow", Kind: connector.KindMutate, Scopes: sheetsWrite, Identity: []string{"spreadsheetId", "sheet"},
				Validate: validateSheet("sheets.appendRow", true), Do: s.appendRow, Reconcile: s.reconcileAppend, ComparePayload: connector.ComparePayloadOf("values"),
				Target: func(a map[string]any) string {
					return "sheets.appendRow to " + str(a["spreadsheetId"]) + sheetSuffix(a)
				}, Doc: connector.MethodDoc{
					Summary: "Appends one row after the last row of the sheet. Values are written as they are (a text starting with `=` stays text, never a formula). " +
						"The Sheets API has no idempotency key, so the row's first cell carries a note `keep:<key>` written in the same request as the row: that note is how keep finds its own row again. Leave it in place.",
					Params: []connector.Param{idParam, sheetParam,
						{Name: "values", Type: "array of strings, numbers or booleans", Required: true, Doc: "the row's cells, from column A"},
						{Name: "subkey", Type: "string", Doc: "tells apart two appends of one run to the same sheet"}},
					ResultTS:  "{ rowId: number; range: string; reconciled?: boolean }",
					Result:    "`{ rowId, range }`: the new row's number and its A1 range, like `Sheet1!A5:B5`; a reconciled append adds `reconciled: true`",
					Reconcile: "reads the sheet's first column looking for the note `keep:<key>`. A row with the same values but without that note — one a person typed, or another run's — is never taken for keep's: it answers \"not applied\" (after the settle time, twice), and keep appends.",
					Errors:    "a spreadsheet or sheet that does not exist: precondition; 401 after a refresh or a revoked grant: permission (Reconnect Google); a missing scope names it; 403 `accessNotConfigured`: permission, enable the Google Sheets API in the OAuth client's Cloud project; 429 and 403 usage limits: transient, nothing written; 5xx or no answer after the request went out: unknown, settled by reconcile.",
					Limits:    sheetsLimits + " An append costs three requests: two reads (the sheet's id, then its row number) and one write; its reconcile one read.",
				}},
			"updateRow": {Name: "updateRow", Kind: connector.KindMutate, Scopes: sheetsWrite, Identity: []string{"spreadsheetId", "sheet", "rowId"},
				Validate: validateUpdate, Do: s.updateRow, Reconcile: s.reconcileUpdate, ComparePayload: connector.ComparePayloadOf("values"),
				Target: func(a map[string]any) string {
					return fmt.Sprintf("sheets.updateRow %v of %s%s", a["rowId"], str(a["spreadsheetId"]), sheetSuffix(a))
				}, Doc: connector.MethodDoc{
					Summary: "Overwrites the cells of one row from column A (cells past `values` are left as they are).",
					Params: []connector.Param{idParam, sheetParam,
						{Name: "rowId", Type: "number", Required: true, Doc: "the row's number (from appendRow or getRows)"},
						{Name: "values", Type: "array of strings, numbers or booleans", Required: true, Doc: "the new cells"},
						{Name: "subkey", Type: "string", Doc: "tells apart two updates of one run to the same row"}},
					Result:    "`{ rowId, range }`",
					ResultTS:  "{ rowId: number; range: string; reconciled?: boolean }",
					Reconcile: "reads the row: the same values mean applied, others not.",
					Errors:    "as appendRow.",
					Limits:    sheetsLimits + " An update costs one read (the sheet) and one write; its reconcile two reads.",
				}},
		},
	}
}

func sheetSuffix(a map[string]any) string {
	if t := str(a["sheet"]); t != "" {
		return " (" + t + ")"
	}
	return ""
}

func validateSheet(method string, write bool) func(map[string]any) error {
	return func(a map[string]any) error {
		if err := need(method, a, "spreadsheetId"); err != nil {
			return err
		}
		for _, k := range []string{"sheet", "range"} {
			if v, ok := a[k]; ok && v != nil {
				if _, isStr := v.(string); !isStr {
					return fmt.Errorf("%s: %s must be a string", method, k)
				}
			}
		}
		if !write {
			return nil
		}
		return validateValues(method, a)
	}
}

func validateValues(method string, a map[string]any) error {
	vals, ok := a["values"].([]any)
	if !ok || len(vals) == 0 {
		return fmt.Errorf("%s needs values: a non-empty array of cells, like values: [\"Alice\", \"Hello\"]", method)
	}
	for i, v := range vals {
		switch v.(type) {
		case string, float64, bool, nil:
		default:
			return fmt.Errorf("%s: values[%d] is an %T; a cell is a string, a number or a boolean", method, i, v)
		}
	}
	return nil
}

func validateUpdate(a map[string]any) error {
	if err := validateSheet("sheets.updateRow", true)(a); err != nil {
		return err
	}
	if n, ok := a["rowId"].(float64); !ok || n < 1 || n != float64(int64(n)) {
		return fmt.Errorf("sheets.updateRow needs rowId: a row number (1 or more) from appendRow or getRows")
	}
	return nil
}

// sheetOf finds the sheet named title (the first when empty).
func sheetOf(ctx context.Context, svc *sheets.Service, id, title string) (*sheets.SheetProperties, error) {
	sp, err := svc.Spreadsheets.Get(id).Fields("sheets.properties").Context(ctx).Do()
	if err != nil {
		return nil, err
	}
	for _, sh := range sp.Sheets {
		if title == "" || sh.Properties.Title == title {
			return sh.Properties, nil
		}
	}
	return nil, errNoSheet{id: id, title: title}
}

type errNoSheet struct{ id, title string }

func (e errNoSheet) Error() string {
	return fmt.Sprintf("spreadsheet %s has no sheet titled %q", e.id, e.title)
}

func quoteTitle(t string) string { return "'" + strings.ReplaceAll(t, "'", "''") + "'" }

func cellOf(v any) *sheets.CellData {
	ev := &sheets.ExtendedValue{}
	switch t := v.(type) {
	case string:
		ev.StringValue = &t
	case float64:
		ev.NumberValue = &t
	case bool:
		ev.BoolValue = &t
		ev.ForceSendFields = []string{"BoolValue"}
	default:
		empty := ""
		ev.StringValue = &empty
	}
	return &sheets.CellData{UserEnteredValue: ev}
}

// findMark returns the number of the row whose first cell carries mark, or 0.
func findMark(ctx context.Context, svc *sheets.Service, id, title, mark string) (int64, error) {
	sp, err := svc.Spreadsheets.Get(id).Ranges(quoteTitle(title) + "!A:A").IncludeGridData(true).
		Fields("sheets(properties(title),data(startRow,rowData(values(note))))").Context(ctx).Do()
	if err != nil {
		return 0, err
	}
	for _, sh := range sp.Sheets {
		if sh.Properties == nil || sh.Properties.Title != title {
			continue
		}
		for _, d := range sh.Data {
			for i, row := range d.RowData {
				if len(row.Values) > 0 && row.Values[0].Note == mark {
					return d.StartRow + int64(i) + 1, nil
				}
			}
		}
	}
	return 0, nil
}

// appliedUnread says an append went through but reading its row number
// failed: the outcome is unknown to the script, and reconcile settles it.
// It does not wrap the read's error, so the 401 retry never re-sends.
type appliedUnread struct{ msg string }

func (e appliedUnread) Error() string { return e.msg }

func (s *sheetsConn) appendRow(ctx context.Context, c connector.Call) connector.Result {
	id, title := str(c.Args["spreadsheetId"]), str(c.Args["sheet"])
	what := "sheets.appendRow to " + id + sheetSuffix(c.Args)
	vals, _ := c.Args["values"].([]any)
	mark := rowMark(c.IdempotencyKey)
	return s.auth.write(ctx, what, sheetsWrite, func(ctx context.Context, hc *http.Client) (any, error) {
		svc, err := s.service(ctx, hc)
		if err != nil {
			return nil, err
		}
		props, err := sheetOf(ctx, svc, id, title)
		if err != nil {
			return nil, err
		}
		row := &sheets.RowData{}
		for _, v := range vals {
			row.Values = append(row.Values, cellOf(v))
		}
		row.Values[0].Note = mark
		req := &sheets.BatchUpdateSpreadsheetRequest{Requests: []*sheets.Request{{AppendCells: &sheets.AppendCellsRequest{
			SheetId: props.SheetId, Rows: []*sheets.RowData{row}, Fields: "userEnteredValue,note", ForceSendFields: []string{"SheetId"}}}}}
		if _, err := svc.Spreadsheets.BatchUpdate(id, req).Context(ctx).Do(); err != nil {
			return nil, err
		}
		n, err := findMark(ctx, svc, id, props.Title, mark)
		if err != nil || n == 0 {
			return nil, appliedUnread{fmt.Sprintf("the row was appended, but reading its number failed (%v)", err)}
		}
		return rowResult(props.Title, n, len(vals)), nil
	})
}

func rowResult(title string, row int64, cols int) map[string]any {
	last := colName(max(cols, 1) - 1)
	return map[string]any{"rowId": row, "range": fmt.Sprintf("%s!A%d:%s%d", title, row, last, row)}
}

func colName(i int) string {
	s := ""
	for i++; i > 0; i = (i - 1) / 26 {
		s = string(rune('A'+(i-1)%26)) + s
	}
	return s
}

func (s *sheetsConn) reconcileAppend(ctx context.Context, c connector.Call) (connector.ReconcileStatus, any, error) {
	id, title := str(c.Args["spreadsheetId"]), str(c.Args["sheet"])
	vals, _ := c.Args["values"].([]any)
	var out map[string]any
	err := s.auth.read(ctx, "sheets.appendRow's reconcile", sheetsRead, func(ctx context.Context, hc *http.Client) error {
		svc, err := s.service(ctx, hc)
		if err != nil {
			return err
		}
		props, err := sheetOf(ctx, svc, id, title)
		if err != nil {
			return err
		}
		n, err := findMark(ctx, svc, id, props.Title, rowMark(c.IdempotencyKey))
		if err != nil || n == 0 {
			return err
		}
		out = rowResult(props.Title, n, len(vals))
		out["reconciled"] = true
		return nil
	})
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	if out == nil {
		return connector.ReconcileFailed, nil, nil
	}
	return connector.ReconcileApplied, out, nil
}

var startRowRe = regexp.MustCompile(`![A-Z]*(\d+)`)

func (s *sheetsConn) getRows(ctx context.Context, c connector.Call) connector.Result {
	id, title, rng := str(c.Args["spreadsheetId"]), str(c.Args["sheet"]), str(c.Args["range"])
	var out []any
	err := s.auth.read(ctx, "sheets.getRows of "+id+sheetSuffix(c.Args), sheetsRead, func(ctx context.Context, hc *http.Client) error {
		out = []any{}
		svc, err := s.service(ctx, hc)
		if err != nil {
			return err
		}
		props, err := sheetOf(ctx, svc, id, title)
		if err != nil {
			return err
		}
		full := quoteTitle(props.Title)
		if rng != "" {
			full += "!" + rng
		}
		vr, err := svc.Spreadsheets.Values.Get(id, full).Context(ctx).Do()
		if err != nil {
			return err
		}
		first := int64(1)
		if m := startRowRe.FindStringSubmatch(vr.Range); m != nil {
			first, _ = strconv.ParseInt(m[1], 10, 64)
		}
		for i, row := range vr.Values {
			cells := []any{}
			for _, v := range row {
				cells = append(cells, fmt.Sprint(v))
			}
			out = append(out, map[string]any{"rowId": first + int64(i), "values": cells})
		}
		return nil
	})
	if err != nil {
		return connector.Result{Err: err}
	}
	return connector.Result{Value: out}
}

func rowRange(title string, row int64) string { return fmt.Sprintf("%s!A%d", quoteTitle(title), row) }

func (s *sheetsConn) updateRow(ctx context.Context, c connector.Call) connector.Result {
	id, title := str(c.Args["spreadsheetId"]), str(c.Args["sheet"])
	row := int64(c.Args["rowId"].(float64))
	vals, _ := c.Args["values"].([]any)
	what := fmt.Sprintf("sheets.updateRow %d of %s%s", row, id, sheetSuffix(c.Args))
	return s.auth.write(ctx, what, sheetsWrite, func(ctx context.Context, hc *http.Client) (any, error) {
		svc, err := s.service(ctx, hc)
		if err != nil {
			return nil, err
		}
		props, err := sheetOf(ctx, svc, id, title)
		if err != nil {
			return nil, err
		}
		cells := make([]any, len(vals))
		for i, v := range vals {
			if v == nil {
				v = ""
			}
			cells[i] = v
		}
		if _, err := svc.Spreadsheets.Values.Update(id, rowRange(props.Title, row), &sheets.ValueRange{Values: [][]any{cells}}).ValueInputOption("RAW").Context(ctx).Do(); err != nil {
			return nil, err
		}
		return rowResult(props.Title, row, len(vals)), nil
	})
}

// formattedAs says how Sheets shows a value written RAW.
func formattedAs(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case bool:
		return strings.ToUpper(strconv.FormatBool(t))
	}
	return fmt.Sprint(v)
}

func (s *sheetsConn) reconcileUpdate(ctx context.Context, c connector.Call) (connector.ReconcileStatus, any, error) {
	id, title := str(c.Args["spreadsheetId"]), str(c.Args["sheet"])
	row := int64(c.Args["rowId"].(float64))
	vals, _ := c.Args["values"].([]any)
	same := false
	var props *sheets.SheetProperties
	err := s.auth.read(ctx, "sheets.updateRow's reconcile", sheetsRead, func(ctx context.Context, hc *http.Client) error {
		svc, err := s.service(ctx, hc)
		if err != nil {
			return err
		}
		if props, err = sheetOf(ctx, svc, id, title); err != nil {
			return err
		}
		vr, err := svc.Spreadsheets.Values.Get(id, fmt.Sprintf("%s!A%d:%s%d", quoteTitle(props.Title), row, colName(max(len(vals), 1)-1), row)).Context(ctx).Do()
		if err != nil {
			return err
		}
		var have []any
		if len(vr.Values) > 0 {
			have = vr.Values[0]
		}
		same = true
		for i, v := range vals {
			got := ""
			if i < len(have) {
				got = fmt.Sprint(have[i])
			}
			if got != formattedAs(v) {
				same = false
			}
		}
		return nil
	})
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	if !same {
		return connector.ReconcileFailed, nil, nil
	}
	out := rowResult(props.Title, row, len(vals))
	out["reconciled"] = true
	return connector.ReconcileApplied, out, nil
}

var _ = errors.New
