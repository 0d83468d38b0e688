package web

import "testing"

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
