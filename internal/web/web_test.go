package web

import (
	"encoding/json"
	"strings"
	"testing"
)

// The login's next parameter may only lead to a path of this site, as the
// browser will read it (issue 11 #11).
func TestSameSitePath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/workflows/a":              "/workflows/a",
		"/w?x=1#f":                  "/w?x=1#f",
		"":                          "/",
		"//evil.example/x":          "/",
		"/\\evil.example":           "/",
		"/\t/127.0.0.2:28091/phish": "/",
		"/\n/evil.example":          "/",
		"/\r\n/evil.example":        "/",
		" /x":                       "/",
		"https://evil.example/":     "/",
		"javascript:alert(1)":       "/",
		"/x\u00a0y":                 "/",
		"\t//evil.example":          "/",
		"/%09/evil.example":         "/%09/evil.example", // stays a path: the browser does not decode it into the authority
	} {
		if got := SameSitePath(in); got != want {
			t.Errorf("SameSitePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// A write's result on the page: an http response as its status and body,
// anything else as it is, on one line, cropped.
func TestBrief(t *testing.T) {
	t.Parallel()
	long := `"` + strings.Repeat("x", 200) + `"`
	for in, want := range map[string]string{
		`{"status":201,"headers":{"a":"b"},"json":{"id":7},"body":"{\"id\":7}"}`: `{"json":{"id":7},"status":201}`,
		`{"status":200,"headers":{},"body":"ok"}`:                                `{"body":"ok","status":200}`,
		`{"status":204,"headers":{},"body":""}`:                                  `{"status":204}`,
		`{"status":200,"json":{"a":1}}`:                                          `{"status":200,"json":{"a":1}}`,
		`{ "id": 1,
  "name": "a" }`: `{ "id": 1, "name": "a" }`,
		`[1, 2]`: `[1, 2]`,
		long:     `"` + strings.Repeat("x", 118) + "…",
	} {
		if got := brief(json.RawMessage(in)); got != want {
			t.Errorf("brief(%s) = %s, want %s", in, got, want)
		}
	}
}
