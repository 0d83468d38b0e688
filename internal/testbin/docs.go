package testbin

import (
	"os"
	"strings"
	"testing"
)

// CurrentDoc checks the generated part of the document at path, between
// the lines begin and end, against want; with update it rewrites that
// part instead. how says the command that rewrites it. It returns the
// document.
func CurrentDoc(t testing.TB, path, begin, end, want string, update bool, how string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers of its generated part:\n%s%s", path, begin, end)
	}
	if doc[i+len(begin):j] == want {
		return doc
	}
	if !update {
		t.Fatalf("the generated part of %s is stale: run %s", path, how)
	}
	doc = doc[:i+len(begin)] + want + doc[j:]
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return doc
}
