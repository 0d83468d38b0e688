package cli

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// safeText is what every CLI command writes through (stdout and stderr):
// titles, errors, targets and payloads come from scripts and from outside
// (mail subjects, API answers), and a terminal obeys the control
// characters in them — ESC sequences that rewrite the screen or the
// window title, CR that hides what came before on the line. So each
// control character (C0 but newline and tab, DEL, C1, the bidirectional
// overrides) is shown as an escape: ESC as \x1b, U+0085 as \u0085. JSON
// output is unchanged in meaning: encoding/json escapes C0 itself, and
// \uXXXX is JSON's own escape for the rest.
type safeText struct {
	w       io.Writer
	pending []byte // the start of a UTF-8 sequence cut by a Write
}

func newSafeText(w io.Writer) *safeText { return &safeText{w: w} }

// unsafeRune reports whether r must not reach a terminal as it is.
func unsafeRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e || r == 0x200f || r == 0x061c:
		return true // bidirectional controls: text shown in another order than it is
	}
	return false
}

func (s *safeText) Write(p []byte) (int, error) {
	buf := append(s.pending, p...)
	s.pending = nil
	out := make([]byte, 0, len(buf))
	for i := 0; i < len(buf); {
		if !utf8.FullRune(buf[i:]) {
			s.pending = append([]byte(nil), buf[i:]...)
			break
		}
		r, size := utf8.DecodeRune(buf[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, buf[i]) // a lone byte (0x9b is an 8-bit CSI)
		case unsafeRune(r) && r < 0x80:
			out = fmt.Appendf(out, `\x%02x`, r)
		case unsafeRune(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, buf[i:i+size]...)
		}
		i += size
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what a cut sequence left behind (as escapes: it never
// became a whole character).
func (s *safeText) Flush() {
	for _, b := range s.pending {
		fmt.Fprintf(s.w, `\x%02x`, b)
	}
	s.pending = nil
}
