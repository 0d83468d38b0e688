package keeptype

import (
	"slices"
	"strings"
)

// ReadsBy tells a connector method's reads from its writes by one of its
// arguments (http.request: GET and HEAD read, every other method writes): a
// call reads when its argument Arg, a string taken in upper case (Default
// when missing or empty), is one of Reads, and writes otherwise. The
// connector decides a call's kind by it, and the sandbox tells a write by
// it before keep is asked (script.Invocation.Writes), so the two agree.
type ReadsBy struct {
	Arg     string   `json:"arg"`
	Default string   `json:"default"`
	Reads   []string `json:"reads"`
}

// IsRead says whether a call with args reads.
func (r ReadsBy) IsRead(args map[string]any) bool {
	return slices.Contains(r.Reads, r.Value(args))
}

// Value is the argument that decides, as IsRead takes it.
func (r ReadsBy) Value(args map[string]any) string {
	s, _ := args[r.Arg].(string)
	if s = strings.ToUpper(s); s == "" {
		return r.Default
	}
	return s
}
