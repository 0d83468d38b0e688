package keeptype

import (
	"strings"
	"testing"
)

// TestJSONDepth: brackets inside strings, escaped quotes and escaped
// backslashes do not count; only arrays and objects do.
func TestJSONDepth(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{``, 0},
		{`"text"`, 0},
		{`{"a": [1, {"b": []}]}`, 4},
		{`{"a": "[[[[{{{{"}`, 1},
		{`{"a": "\"[[[", "b": [1]}`, 2},
		{`{"a": "\\", "b": [[1]]}`, 3},
		{`not json [[ at all`, 2},
		{strings.Repeat("[", 5000) + strings.Repeat("]", 5000), 5000},
	} {
		if got := JSONDepth([]byte(c.body)); got != c.want {
			t.Errorf("JSONDepth(%.40q) = %d, want %d", c.body, got, c.want)
		}
	}
}
