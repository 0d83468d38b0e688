package redact

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

const s = "planted-7f3a9c"

func TestEveryCarrierIsMasked(t *testing.T) {
	t.Parallel()
	args := map[string]any{
		"url": "https://user:" + s + "@api.example/x?api_key=" + s + "&access_token=" + s + "&password=" + s + "&q=ok",
		"headers": map[string]any{
			"Authorization": "Bearer " + s, "X-Auth-Token": s, "Api-Key": s, "PRIVATE-TOKEN": s, "X-Goog-Api-Key": s,
			"Cookie": "a=" + s, "Accept": "application/json",
		},
		"reconcile": map[string]any{"url": "https://x.example/?token=" + s, "headers": map[string]any{"Authorization": "Basic " + s}},
		"json":      map[string]any{"nested": []any{map[string]any{"client_secret": s}}, "name": "ok"},
	}
	out := Map(args)
	dump := strings.ReplaceAll(strings.ReplaceAll(toString(out), "\n", " "), "\t", " ")
	if strings.Contains(dump, s) {
		t.Fatalf("a secret survived: %s", dump)
	}
	for _, keep := range []string{"application/json", "q=ok", "api.example/x", `"ok"`} {
		if !strings.Contains(dump, keep) {
			t.Errorf("%q was lost: %s", keep, dump)
		}
	}
	if strings.Contains(toString(args), s) == false {
		t.Fatal("Map changed its argument")
	}
	for _, text := range []string{
		"POST https://u:" + s + "@h.example/p: connection refused",
		"probe GET http://h.example/w?api_key=" + s + " answered 500",
		"401: Bearer " + s,
	} {
		if got := String(text); strings.Contains(got, s) {
			t.Errorf("String(%q) = %q", text, got)
		}
	}
	if got := String("plain text with no secret"); got != "plain text with no secret" {
		t.Errorf("plain text changed: %q", got)
	}
}

// A credential under a header of any name is masked, by the header's
// name or by its value's shape; what is no credential is shown as it was
// (issue 38, low).
func TestAnyHeaderCarryingACredentialIsMasked(t *testing.T) {
	t.Parallel()
	const tok = "Zk3q9XbT2mW8vR1yL6pN4s"
	args := map[string]any{
		"headers": map[string]any{
			"X-Custom-Sig": "short1", "X-Shop-Key": "abc", "X-Session-Id": "42", "X-Hub-Signature-256": "sha256=ab", "X-My-Credential": "x1",
			"X-Partner": "Digest " + tok, "X-Scheme": "HMAC abc:def", "X-Opaque": tok, "X-Cookieish": "a=1", "X-Ref": "id=" + tok + "; path=/",
			"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded", "User-Agent": "keep/1.0 (linux)",
			"X-Request-Id": "req-42", "Idempotency-Key": "order-1001", "If-Match": `"33a64df551425fcc55e4d42a148795d9f25f89d4"`,
			"Date": "Wed, 21 Oct 2015 07:28:00 GMT", "Multi": []any{"ok", "Bearer " + tok},
			"X-Named-Sig": "{secret:sig}", "X-Named-Auth": "Bearer {secret:tok}", "X-Half-Token": "abc{secret:x}",
		},
		"payload": []any{map[string]any{"headers": []any{map[string]any{"name": "X-Weird", "value": tok}, map[string]any{"name": "Subject", "value": "Hello"}}}},
	}
	out := Map(args)["headers"].(map[string]any)
	for _, masked := range []string{"X-Custom-Sig", "X-Shop-Key", "X-Session-Id", "X-Hub-Signature-256", "X-My-Credential", "X-Partner", "X-Scheme", "X-Opaque", "X-Cookieish", "X-Ref", "Multi", "X-Half-Token"} {
		if out[masked] != Mask {
			t.Errorf("%s: %v, want it masked", masked, out[masked])
		}
	}
	for _, shown := range []string{"Accept", "Content-Type", "User-Agent", "X-Request-Id", "Idempotency-Key", "If-Match", "Date", "X-Named-Sig", "X-Named-Auth"} {
		if out[shown] != args["headers"].(map[string]any)[shown] {
			t.Errorf("%s: %v, want it as it was", shown, out[shown])
		}
	}
	list := Map(args)["payload"].([]any)[0].(map[string]any)["headers"].([]any)
	if list[0].(map[string]any)["value"] != Mask || list[1].(map[string]any)["value"] != "Hello" {
		t.Errorf("a list of { name, value }: %v", list)
	}
	for word, want := range map[string]bool{tok: true, "3f2a9c1e7b6d4a5f8e0c": true, "aaaaaaaaaaaaaaaaaaaa1": false, "application-json-text-1": false, "short7": false, "no digits at all here": false} {
		if Random(word) != want {
			t.Errorf("Random(%q) = %v", word, !want)
		}
	}
}

func toString(v any) string {
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				b.WriteString(k + "=")
				walk(val)
				b.WriteString(" ")
			}
		case []any:
			for _, val := range x {
				walk(val)
			}
		case string:
			b.WriteString(`"` + x + `"`)
		}
	}
	walk(v)
	return b.String()
}

// A value keep knows to be secret is masked whatever it goes under: a
// header named like nothing secret, an error body that echoes it, the same
// value escaped inside JSON text; a value that starts another leaves no
// tail of the longer one.
func TestKnownValuesAreMaskedWherever(t *testing.T) {
	const sig, longer, quoted = "sig-4d1e77", "sig-4d1e77-and-more", `q"uo\te-9a8b`
	Learn(sig, longer, quoted, "ab") // "ab" is too short to learn
	for _, text := range []string{
		"X-Custom-Sig: " + sig,
		"400 Bad Request: {\"echo\": \"" + longer + "\"}",
		`{"v":"q\"uo\\te-9a8b"}`,
		"plain " + quoted,
	} {
		got := String(text)
		if strings.Contains(got, "4d1e77") || strings.Contains(got, "uo") || strings.Contains(got, "and-more") {
			t.Errorf("String(%q) = %q", text, got)
		}
		if !strings.Contains(got, Mask) {
			t.Errorf("String(%q) = %q: no mask", text, got)
		}
	}
	if got := Map(map[string]any{"headers": map[string]any{"X-Custom-Sig": sig}}); strings.Contains(toString(got), sig) {
		t.Errorf("Map kept a known value: %v", got)
	}
	if got := String("grab a tab"); got != "grab a tab" {
		t.Errorf("a value shorter than %d was learned: %q", MinKnown, got)
	}
	if !Known("x "+sig) || Known("nothing here") {
		t.Error("Known")
	}
}

func TestLogLinesAreMasked(t *testing.T) {
	const v = "log-secret-31c5"
	Learn(v)
	var b strings.Builder
	log := slog.New(Logger(slog.NewTextHandler(&b, nil))).With("target", "https://u:"+v+"@x.example/")
	log.Warn("call failed: "+v, "err", errors.New("server said "+v), "group", slog.GroupValue(slog.String("k", v)), "n", 3)
	if strings.Contains(b.String(), v) || !strings.Contains(b.String(), "n=3") || !strings.Contains(b.String(), Mask) {
		t.Fatalf("log line: %s", b.String())
	}
}

func TestWellKnownTokenFormsAreMasked(t *testing.T) {
	for _, tok := range []string{"xoxb-123456789012-abcdefABCDEF", "ghp_0123456789abcdefghijABCDEFGHIJ", "sk-proj-0123456789abcdefghij", "sk_live_0123456789abcdef",
		"AKIAIOSFODNN7EXAMPLE", "AIzaSyA0123456789abcdefghijklmnopqrstuv", "glpat-0123456789abcdefghij", "ya29.a0AfH6SMB0123456789abcdef"} {
		text := "the key is " + tok + ", see"
		if got := String(text); strings.Contains(got, tok) || !strings.Contains(got, Mask) || !LooksLikeToken(tok) {
			t.Errorf("String(%q) = %q", text, got)
		}
	}
	for _, plain := range []string{"scikit sk-learn", "ask-me", "AKIA is a word", "github_pat"} {
		if got := String(plain); got != plain || LooksLikeToken(plain) {
			t.Errorf("ordinary text %q became %q", plain, got)
		}
	}
}

// String skips a pattern on text without a word it needs: the same text
// out as running every pattern, whatever the case or the script.
func TestStringsPrefilterChangesNothing(t *testing.T) {
	every := func(s string) string {
		s = MaskKnown(s)
		s = tokenInText.ReplaceAllString(s, Mask)
		s = urlInText.ReplaceAllStringFunc(s, URL)
		return bearerInText.ReplaceAllStringFunc(s, func(m string) string { return strings.Fields(m)[0] + " " + Mask })
	}
	for _, text := range []string{
		"", "mutating: http.request POST http://127.0.0.1:8080/sink/1 → 201", "prepared: 1 events to reserve",
		"Authorization: BEARER abcdefgh12345", "bAsIc dXNlcjpwYXNzd29yZA==", "token  0123456789abcdef",
		"to\u212aen 0123456789abcdef", "see https://u:p@h.example/x?secret=1 and Token abcdefghijk",
		"rk_test_0123456789abcdefgh", "github_pat_0123456789abcdefghijkl", "xapp-1-0123456789a", "ya29.0123456789abcdefghijk",
		"bearer short", "tokens: none here", "ghost text", "naïve bearer 0123456789",
	} {
		if got, want := String(text), every(text); got != want {
			t.Errorf("String(%q) = %q, every pattern gives %q", text, got, want)
		}
	}
}

// BenchmarkString masks a run's trace note as the engine writes it.
func BenchmarkString(b *testing.B) {
	note := "mutating: http.request POST http://127.0.0.1:18080/sink/1234 (identity 5f2c…) → 204 in 1.2 ms; prepared: 1 events to reserve"
	for i := 0; i < b.N; i++ {
		String(note)
	}
}

// Name squashes a name on the stack: the same verdicts as lower-casing and
// removing '-', '_' and ' ', non-ASCII names included, and no allocation for
// an ASCII one (Value asks it of every key of every traced object).
func TestNameSquashes(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "X-Api-Key": true, "x_api_key": true, "Client Secret": true, "ACCESS-TOKEN": true,
		"X-CSRF-Token": false, "X-Auth-User": true, "title": false, "count": false, "": false,
		"Pässword": false, "ÄPI_TOKEN": true, "x-ΑΡΙ-key": false, "Tokenize": false,
	} {
		if got := Name(name); got != want {
			t.Errorf("Name(%q) = %v, want %v", name, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Name("X-Request-Identifier-Of-Caller") }); n != 0 {
		t.Errorf("Name of an ASCII name allocated %v times, want 0", n)
	}
}

// A URL's password is masked and its user name shown (issue 42: keep
// migrate's hint said postgres://[redacted]@…); a user name alone that is
// the credential itself is still masked.
func TestURLMasksThePasswordNotTheUser(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://keep:hunter22@db.example:5432/keep?sslmode=disable": "postgres://keep:[redacted]@db.example:5432/keep?sslmode=disable",
		"postgres://keep@db.example/keep":                               "postgres://keep@db.example/keep",
		"https://ghp_0123456789abcdefghijABCDEFGHIJ0123@github.com/x":   "https://[redacted]@github.com/x",
		"https://Zk3q9XbT2mW8vR1yL6pN4s@api.example/x":                  "https://[redacted]@api.example/x",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}
