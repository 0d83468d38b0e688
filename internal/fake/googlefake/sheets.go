package googlefake

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

type spreadsheet struct {
	id     string
	sheets []*sheet
}

type sheet struct {
	id    int64
	title string
	rows  [][]cell
}

type cell struct {
	value string // as Sheets formats it (FORMATTED_VALUE)
	note  string
}

// spreadsheet returns a spreadsheet, created with one sheet "Sheet1" on
// first use (as if a person had made it).
func (s *Server) spreadsheet(id string) *spreadsheet {
	sp, ok := s.sheets[id]
	if !ok {
		sp = &spreadsheet{id: id, sheets: []*sheet{{id: 0, title: "Sheet1"}}}
		s.sheets[id] = sp
	}
	return sp
}

func (sp *spreadsheet) sheet(title string) *sheet {
	if title == "" {
		return sp.sheets[0]
	}
	for _, sh := range sp.sheets {
		if sh.title == title {
			return sh
		}
	}
	return nil
}

func (sp *spreadsheet) byID(id int64) *sheet {
	for _, sh := range sp.sheets {
		if sh.id == id {
			return sh
		}
	}
	return nil
}

// a1 is a parsed A1 range: Sheet1!A2:C5, 'My sheet'!A:A, Sheet1, A5:B5.
type a1 struct {
	sheet            string
	col0, row0, row1 int // 0-based first column and row; row1 exclusive, 0 = open
	col1             int // exclusive, 0 = open
}

var cellRe = regexp.MustCompile(`^([A-Z]*)(\d*)$`)

func parseA1(r string) (a1, error) {
	var out a1
	sh, cells, hasBang := strings.Cut(r, "!")
	if !hasBang {
		if cellRe.MatchString(strings.Split(r, ":")[0]) && r != "" && !strings.Contains(r, "'") {
			sh, cells = "", r
		} else {
			sh, cells = r, ""
		}
	}
	out.sheet = strings.ReplaceAll(strings.Trim(sh, "'"), "''", "'")
	if cells == "" {
		return out, nil
	}
	from, to, isSpan := strings.Cut(cells, ":")
	m := cellRe.FindStringSubmatch(from)
	if m == nil {
		return out, fmt.Errorf("Unable to parse range: %s", r)
	}
	out.col0 = colIndex(m[1])
	if m[2] != "" {
		n, _ := strconv.Atoi(m[2])
		out.row0 = n - 1
		out.row1 = n
	}
	if !isSpan {
		out.col1 = out.col0 + 1
		return out, nil
	}
	m = cellRe.FindStringSubmatch(to)
	if m == nil {
		return out, fmt.Errorf("Unable to parse range: %s", r)
	}
	if m[1] != "" {
		out.col1 = colIndex(m[1]) + 1
	}
	out.row1 = 0
	if m[2] != "" {
		n, _ := strconv.Atoi(m[2])
		out.row1 = n
	}
	return out, nil
}

func colIndex(letters string) int {
	n := 0
	for _, c := range letters {
		n = n*26 + int(c-'A') + 1
	}
	if n == 0 {
		return 0
	}
	return n - 1
}

func colName(i int) string {
	s := ""
	for i++; i > 0; i = (i - 1) / 26 {
		s = string(rune('A'+(i-1)%26)) + s
	}
	return s
}

func quoteSheet(t string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_]+$`).MatchString(t) {
		return t
	}
	return "'" + strings.ReplaceAll(t, "'", "''") + "'"
}

func notFound(w http.ResponseWriter, what string) {
	apiError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "Requested entity was not found. "+what)
}

func badRange(w http.ResponseWriter, msg string) {
	apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "badRequest", msg)
}

// sheetsGet is spreadsheets.get; with includeGridData the named ranges'
// sheets come with their cells (value and note).
func (s *Server) sheetsGet(w http.ResponseWriter, r *http.Request) bool {
	sp := s.spreadsheet(r.PathValue("id"))
	q := r.URL.Query()
	want := map[string]bool{}
	for _, rg := range q["ranges"] {
		a, err := parseA1(rg)
		if err != nil {
			badRange(w, err.Error())
			return false
		}
		if sp.sheet(a.sheet) == nil {
			badRange(w, "Unable to parse range: "+rg)
			return false
		}
		want[sp.sheet(a.sheet).title] = true
	}
	var sheets []map[string]any
	for i, sh := range sp.sheets {
		one := map[string]any{"properties": map[string]any{"sheetId": sh.id, "title": sh.title, "index": i, "sheetType": "GRID",
			"gridProperties": map[string]any{"rowCount": max(1000, len(sh.rows)), "columnCount": 26}}}
		if q.Get("includeGridData") == "true" && (len(want) == 0 || want[sh.title]) {
			var rows []map[string]any
			for _, row := range sh.rows {
				var vals []map[string]any
				for _, c := range row {
					v := map[string]any{}
					if c.value != "" {
						v["userEnteredValue"] = map[string]any{"stringValue": c.value}
						v["formattedValue"] = c.value
					}
					if c.note != "" {
						v["note"] = c.note
					}
					vals = append(vals, v)
				}
				rows = append(rows, map[string]any{"values": vals})
			}
			one["data"] = []map[string]any{{"startRow": 0, "startColumn": 0, "rowData": rows}}
		}
		sheets = append(sheets, one)
	}
	writeJSON(w, http.StatusOK, map[string]any{"spreadsheetId": sp.id, "properties": map[string]any{"title": sp.id, "locale": "en_US"}, "sheets": sheets})
	return false
}

type cellData struct {
	UserEnteredValue map[string]any `json:"userEnteredValue"`
	Note             string         `json:"note"`
}

// sheetsBatchUpdate is spreadsheets.batchUpdate with appendCells requests
// (all of them applied, or none, as Google does).
func (s *Server) sheetsBatchUpdate(w http.ResponseWriter, r *http.Request) bool {
	id, op, _ := strings.Cut(r.PathValue("idop"), ":")
	if op != "batchUpdate" {
		notFound(w, "unknown method "+op)
		return false
	}
	var body struct {
		Requests []struct {
			AppendCells *struct {
				SheetID int64 `json:"sheetId"`
				Rows    []struct {
					Values []cellData `json:"values"`
				} `json:"rows"`
				Fields string `json:"fields"`
			} `json:"appendCells"`
		} `json:"requests"`
	}
	if err := decode(r, &body); err != nil {
		badRange(w, "Invalid JSON payload received. "+err.Error())
		return false
	}
	sp := s.spreadsheet(id)
	type pending struct {
		sh   *sheet
		rows [][]cell
	}
	var todo []pending
	for i, req := range body.Requests {
		ac := req.AppendCells
		if ac == nil {
			badRange(w, fmt.Sprintf("Invalid requests[%d]: keep-fake knows only appendCells", i))
			return false
		}
		sh := sp.byID(ac.SheetID)
		if sh == nil {
			badRange(w, fmt.Sprintf("Invalid requests[%d].appendCells: No grid with id: %d", i, ac.SheetID))
			return false
		}
		if ac.Fields == "" {
			badRange(w, fmt.Sprintf("Invalid requests[%d].appendCells: At least one field must be specified.", i))
			return false
		}
		p := pending{sh: sh}
		for _, row := range ac.Rows {
			var cells []cell
			for _, v := range row.Values {
				cells = append(cells, cell{value: formatted(v.UserEnteredValue), note: v.Note})
			}
			p.rows = append(p.rows, cells)
		}
		todo = append(todo, p)
	}
	replies := []map[string]any{}
	for _, p := range todo {
		p.sh.rows = append(p.sh.rows, p.rows...)
		replies = append(replies, map[string]any{})
		s.writes["sheets.appendRow"] += len(p.rows)
	}
	writeJSON(w, http.StatusOK, map[string]any{"spreadsheetId": sp.id, "replies": replies})
	return true
}

func formatted(v map[string]any) string {
	for _, k := range []string{"stringValue", "formulaValue"} {
		if s, ok := v[k].(string); ok {
			return s
		}
	}
	if n, ok := v["numberValue"].(float64); ok {
		return strconv.FormatFloat(n, 'f', -1, 64)
	}
	if b, ok := v["boolValue"].(bool); ok {
		return strings.ToUpper(strconv.FormatBool(b))
	}
	return ""
}

func (s *Server) sheetsValuesGet(w http.ResponseWriter, r *http.Request) bool {
	sp := s.spreadsheet(r.PathValue("id"))
	a, err := parseA1(r.PathValue("range"))
	if err != nil {
		badRange(w, err.Error())
		return false
	}
	sh := sp.sheet(a.sheet)
	if sh == nil {
		badRange(w, "Unable to parse range: "+r.PathValue("range"))
		return false
	}
	end := len(sh.rows)
	if a.row1 > 0 && a.row1 < end {
		end = a.row1
	}
	values := [][]string{}
	for i := a.row0; i < end; i++ {
		var row []string
		for j, c := range sh.rows[i] {
			if j >= a.col0 && (a.col1 == 0 || j < a.col1) {
				row = append(row, c.value)
			}
		}
		for len(row) > 0 && row[len(row)-1] == "" {
			row = row[:len(row)-1]
		}
		values = append(values, row)
	}
	for len(values) > 0 && len(values[len(values)-1]) == 0 {
		values = values[:len(values)-1]
	}
	lastRow := a.row0 + len(values)
	if lastRow == a.row0 {
		lastRow = a.row0 + 1
	}
	rng := fmt.Sprintf("%s!%s%d:%s%d", quoteSheet(sh.title), colName(a.col0), a.row0+1, colName(max(a.col0, a.col1-1, 25)), lastRow)
	out := map[string]any{"range": rng, "majorDimension": "ROWS"}
	if len(values) > 0 {
		out["values"] = values
	}
	writeJSON(w, http.StatusOK, out)
	return false
}

// sheetsValuesUpdate is spreadsheets.values.update (valueInputOption RAW or USER_ENTERED).
func (s *Server) sheetsValuesUpdate(w http.ResponseWriter, r *http.Request) bool {
	if opt := r.URL.Query().Get("valueInputOption"); opt != "RAW" && opt != "USER_ENTERED" {
		badRange(w, "'valueInputOption' is required but not specified")
		return false
	}
	sp := s.spreadsheet(r.PathValue("id"))
	a, err := parseA1(r.PathValue("range"))
	if err != nil || a.row1 == 0 {
		badRange(w, "Unable to parse range: "+r.PathValue("range"))
		return false
	}
	sh := sp.sheet(a.sheet)
	if sh == nil {
		badRange(w, "Unable to parse range: "+r.PathValue("range"))
		return false
	}
	var body struct {
		Values [][]any `json:"values"`
	}
	if err := decode(r, &body); err != nil {
		badRange(w, "Invalid JSON payload received. "+err.Error())
		return false
	}
	cols := 0
	for i, vals := range body.Values {
		ri := a.row0 + i
		for len(sh.rows) <= ri {
			sh.rows = append(sh.rows, nil)
		}
		row := sh.rows[ri]
		for j, v := range vals {
			cj := a.col0 + j
			for len(row) <= cj {
				row = append(row, cell{})
			}
			row[cj].value = fmt.Sprint(v)
			if f, ok := v.(float64); ok {
				row[cj].value = strconv.FormatFloat(f, 'f', -1, 64)
			}
			if b, ok := v.(bool); ok {
				row[cj].value = strings.ToUpper(strconv.FormatBool(b))
			}
			if v == nil {
				row[cj].value = ""
			}
		}
		sh.rows[ri] = row
		cols = max(cols, len(vals))
	}
	s.writes["sheets.updateRow"]++
	rng := fmt.Sprintf("%s!%s%d:%s%d", quoteSheet(sh.title), colName(a.col0), a.row0+1, colName(a.col0+max(cols, 1)-1), a.row0+len(body.Values))
	writeJSON(w, http.StatusOK, map[string]any{"spreadsheetId": sp.id, "updatedRange": rng, "updatedRows": len(body.Values), "updatedColumns": cols, "updatedCells": cols * len(body.Values)})
	return true
}
