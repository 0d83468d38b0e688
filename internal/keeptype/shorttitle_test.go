package keeptype

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A title over the bound is cut on a rune boundary, whatever the bytes at
// the cut: two-, three- and four-byte runes at every offset.
func TestShortTitleCutsOnARuneBoundary(t *testing.T) {
	for _, r := range []string{"é", "€", "𝄞"} {
		for pad := 0; pad < 4; pad++ {
			title := strings.Repeat("a", pad) + strings.Repeat(r, 600)
			got, shortened := ShortTitle(title)
			if !shortened || len(got) > MaxTitleChars || !utf8.ValidString(got) || !strings.HasSuffix(got, TitleEllipsis) ||
				!strings.HasPrefix(title, strings.TrimSuffix(got, TitleEllipsis)) || len(got) < MaxTitleChars-utf8.UTFMax-len(TitleEllipsis) {
				t.Fatalf("%q×600 after %d bytes: %q (%d bytes)", r, pad, got, len(got))
			}
		}
	}
	if got, shortened := ShortTitle(strings.Repeat("é", 250)); shortened || got != strings.Repeat("é", 250) {
		t.Fatalf("a title of exactly %d bytes was changed: %q", MaxTitleChars, got)
	}
	if id, hashed := BoundedID(strings.Repeat("i", MaxIDChars)); hashed || len(id) != MaxIDChars {
		t.Fatalf("an id at the bound was hashed: %q", id)
	}
	a, _ := BoundedID(strings.Repeat("i", MaxIDChars+1))
	b, hashed := BoundedID(strings.Repeat("i", MaxIDChars+1))
	if !hashed || a != b || !strings.HasPrefix(a, "sha256:") {
		t.Fatalf("an id over the bound: %q %q", a, b)
	}
}
