package report

import "testing"

func TestLineDiff(t *testing.T) {
	a := "1\n2\n3\n4\n5\n6\n7\n8\n9"
	b := "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10"
	want := "  3\n  4\n- 5\n+ five\n  6\n  7\n  8\n  9\n+ 10"
	if got := LineDiff(a, b); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	far := "a\nb\nc\nd\ne\nf\ng\nh"
	if got := LineDiff(far, "A\nb\nc\nd\ne\nf\ng\nH"); got != "- a\n+ A\n  b\n  c\n  …\n  f\n  g\n- h\n+ H" {
		t.Fatalf("distant changes:\n%s", got)
	}
	if got := LineDiff("same", "same"); got != "" {
		t.Fatalf("no change: %q", got)
	}
}
