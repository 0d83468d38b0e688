package engine

import "testing"

// The secrets a call's arguments name, wherever they are; a "{secret:"
// the arguments do not close with a name (a reconcile probe's
// "{secret:{idempotencyKey}}", filled by the connector) makes every secret
// the call opens count as the script's, so its grant is asked.
func TestSecretsNamedByACallsArguments(t *testing.T) {
	names, partial := secretsNamed(map[string]any{"url": "https://a.example/x?k={secret:q}", "headers": map[string]any{"X": "{secret:h}"},
		"json": []any{map[string]any{"deep": "{secret:j}"}}})
	if !names["q"] || !names["h"] || !names["j"] || len(names) != 3 || partial {
		t.Fatalf("named %v partial %v", names, partial)
	}
	_, partial = secretsNamed(map[string]any{"url": "https://a.example/x", "reconcile": map[string]any{"url": "https://a.example/{secret:{idempotencyKey}}"}})
	if !partial {
		t.Fatal("a {secret: completed by the connector's filling is not said to be partial")
	}
}
