package redact

import (
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
