package keeptype

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"
)

// The bounds of one run on keep's own process (SPEC §6, issue 23). The
// sandbox's memory limit bounds only what a script holds; everything a
// script hands keep (arguments of its calls, what it registers and
// publishes, what keep answers it) lives in keep's process, outside that
// limit. 300 registered ids of 1 MiB once took 2.3 GiB there and 946 MB
// of keep.db; so every such thing has a bound, kept here once and named by
// the error a run past it fails with (BoundError).
const (
	// MaxJSONBytes bounds an event payload, a handler's state and a
	// PrepareResult (SPEC §6: 1 MiB each).
	MaxJSONBytes = 1 << 20
	// MaxIDChars bounds every identifier a script chooses: item ids
	// (withItem), registered input ids, messageIds, subkeys, and the
	// source and type of an input.
	MaxIDChars = 500
	// MaxTitleChars bounds the title of an input or an item.
	MaxTitleChars = 500
	// MaxInputsPerRun bounds the inputs one producer run registers.
	MaxInputsPerRun = 10000
	// MaxPublishesPerRun and MaxPublishBytesPerRun bound what one run
	// publishes (buffered in keep until its commit); the bytes count
	// messageIds as well as payloads.
	MaxPublishesPerRun    = 10000
	MaxPublishBytesPerRun = 64 << 20
	// MaxReadIDs bounds the events one getByIds or peek asks for (peek's
	// limit, SPEC §3).
	MaxReadIDs = 1000
	// MaxHostCallBytes bounds what one call moves between the sandbox and
	// keep, each way: its arguments, and the answer keep gives it. The
	// largest a connector takes or gives is 8 MiB (a file, an HTTP body);
	// the rest is room for JSON's escaping.
	MaxHostCallBytes = 16 << 20
	// MaxHostBytesPerRun bounds the sum of those bytes over one run.
	MaxHostBytesPerRun = 256 << 20
	// MaxJSONDepth bounds how deep the value a handler returns may nest
	// (its state, a PrepareResult, a task's result, a test's data): the
	// prelude checks it (the script package puts this value in it), and a
	// run past it fails as a logic error.
	MaxJSONDepth = 200
	// MaxPayloadDepth bounds how deep JSON keep takes from outside for a
	// handler may nest (an event API payload, refused past it; a webhook's
	// req.json, null past it): MaxJSONDepth less HandlerWrapDepth levels,
	// so a handler that returns what it was given inside levels of its own
	// (a PrepareResult's data, an object around it) stays within the bound
	// of what it returns, and what keep took never fails the run that
	// passes it on. One bound: the two cannot drift apart.
	MaxPayloadDepth = MaxJSONDepth - HandlerWrapDepth
	// HandlerWrapDepth is the room a handler has around a payload it
	// passes on (see MaxPayloadDepth).
	HandlerWrapDepth = 50
)

// JSONDepth is how deep b's arrays and objects nest (b need not be JSON):
// brackets inside strings do not count.
func JSONDepth(b []byte) int {
	depth, most, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			most = max(most, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return most
}

// Bound is one of the bounds above with its unit ("bytes", "characters",
// "inputs"), as an error says it.
type Bound struct {
	Max  int
	Unit string
}

// OverBound is the logic error of a run past one of the bounds above: where
// (the handler and its call), what and how much (got, in the bound's
// unit), the bound, and what to do instead. what carries its verb: "the
// id has", "this run registered".
func OverBound(where, what string, got int, b Bound, todo string) *Error {
	return Errorf(ClassLogic, "%s: %s %s, over keep's bound of %s; %s", where, what, sizeOf(got, b.Unit), sizeOf(b.Max, b.Unit), todo)
}

func sizeOf(n int, unit string) string {
	if unit == "bytes" && n >= 1<<20 {
		if n%(1<<20) == 0 {
			return fmt.Sprintf("%d MiB", n>>20)
		}
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d %s", n, unit)
}

// Count says "1 run", "2 runs": a number with its noun, as people write it.
// one is the singular; the plural adds "s" (keep's nouns are regular).
func Count(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// TitleEllipsis ends a title keep shortened (ShortTitle).
const TitleEllipsis = "…"

// ShortTitle is title within MaxTitleChars bytes: itself when it fits,
// else its longest start that ends on a rune boundary with TitleEllipsis
// after it (issue 40 #2: a title is display, and one long mail subject
// failed the producer and stopped the inbox). shortened says whether it was.
func ShortTitle(title string) (short string, shortened bool) {
	if len(title) <= MaxTitleChars {
		return title, false
	}
	cut := MaxTitleChars - len(TitleEllipsis)
	for cut > 0 && !utf8.RuneStart(title[cut]) {
		cut--
	}
	return title[:cut] + TitleEllipsis, true
}

// BoundedID is an identifier a script chose from outside data as keep
// keeps it: itself within MaxIDChars bytes, else "sha256:" and the hex of
// its hash (as a webhook's delivery id over the bound is). The same id is
// always the same name, so what keep dedupes by still holds, and one
// outside message with a long id never stops its source (issue 40 #2).
// hashed says whether it was.
func BoundedID(id string) (bounded string, hashed bool) {
	if len(id) <= MaxIDChars {
		return id, false
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:]), true
}

// Clip cuts s to at most n bytes (on a rune boundary) and says what was
// cut: how keep says a long error in a trace or a span.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (cut: %d bytes in all)", len(s))
}
