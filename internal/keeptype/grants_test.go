package keeptype

import (
	"fmt"
	"testing"
)

// A grant names what a call reaches, and allows nothing else: another
// method, host, port or database is another grant; the method's name
// alone (grants made before targets were named) allows all its targets.
func TestAGrantCoversOnlyWhatItNames(t *testing.T) {
	item := func(tool, method string, args map[string]any) string {
		t.Helper()
		it, err := GrantItem(tool, method, args)
		if err != nil {
			t.Fatalf("%s.%s %v: %v", tool, method, args, err)
		}
		return it
	}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"url": "https://API.example.com/x"}, "http.request GET api.example.com"},
		{map[string]any{"url": "https://api.example.com:443/x", "method": "post"}, "http.request POST api.example.com"},
		{map[string]any{"url": "http://127.0.0.1:8090/x", "method": "DELETE"}, "http.request DELETE 127.0.0.1:8090"},
		{map[string]any{"url": "http://user:pw@api.example.com:8080/x"}, "http.request GET api.example.com:8080"},
		{map[string]any{"url": "http://[::1]:9/x"}, "http.request GET [::1]:9"},
	} {
		if got := item("http", "request", c.args); got != c.want {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
		if err := CheckGrantItem(c.want); err != nil {
			t.Errorf("%q as a person types it: %v", c.want, err)
		}
	}
	if got := item("sql", "exec", map[string]any{"db": "reports", "sql": "DELETE FROM t"}); got != "sql.exec reports" {
		t.Errorf("sql: %q", got)
	}
	if got := item("gmail", "send", map[string]any{"to": "a@example.org"}); got != "gmail.send" {
		t.Errorf("gmail: %q", got)
	}
	probe := func(u string) map[string]any { return map[string]any{"method": "GET", "url": u} }
	if got := item("http", "request", map[string]any{"url": "https://a.example/x", "method": "POST", "reconcile": probe("https://a.example/x/{idempotencyKey}")}); got != "http.request POST a.example" {
		t.Errorf("a probe on the write's host: %q", got)
	}
	for _, args := range []map[string]any{{"url": "https://a.example/x", "method": "POST", "reconcile": probe("https://b.example/leak")},
		{"url": "https://a.example/x", "method": "POST", "reconcile": probe("https://{idempotencyKey}.a.example/")}, {"url": "ftp://x/"}, {"url": "/relative"}, {"url": "http://x'y/"}, {"url": "http://a.example/", "method": 1}} {
		if it, err := GrantItem("http", "request", args); err == nil {
			t.Errorf("%v gave %q, want an error", args, it)
		}
	}
	get := "http.request GET api.example.com"
	for _, c := range []struct {
		granted, item string
		want          bool
	}{
		{get, get, true},
		{get, "http.request POST api.example.com", false},
		{get, "http.request GET api.example.com:8443", false},
		{get, "http.request GET api.example.com.evil.org", false},
		{"http.request", "http.request POST anywhere.example", true},
		{"http.request POST", "http.request POST x", false},
		{"sql.query reports", "sql.query other", false},
		{"sql.query", "sql.query other", true},
		{"sql.query", "sql.exec other", false},
		{"*", "sql.exec other", true},
		{"source:gmail", "source:gmail", true},
		{"source:gmail", "source:files", false},
	} {
		if got := GrantCovers(c.granted, c.item); got != c.want {
			t.Errorf("%q covers %q: %v, want %v", c.granted, c.item, got, c.want)
		}
	}
}

// Only the constant start of a URL that ends its host names the host:
// "https://api.example.com" + x may reach api.example.com.evil.org.
func TestAURLPrefixNamesAHostOnlyWhenItEndsIt(t *testing.T) {
	if h, err := HostOfURL("https://api.example.com/v1/", false); err != nil || h != "api.example.com" {
		t.Fatalf("a prefix with its path: %q %v", h, err)
	}
	for _, p := range []string{"https://api.example.com", "https://api.", "https://", "http"} {
		if h, err := HostOfURL(p, false); err == nil {
			t.Errorf("%q named %q", p, h)
		}
	}
}

// A refusal's message names the grant; the card reads it back. Messages
// of the form before grants were named give "" (grant what the version uses).
func TestTheRefusalNamesTheGrantTheCardGrants(t *testing.T) {
	msg := "ctx.http.request POST h:1 is not granted to w: …" + GrantSuffix("w", "http.request POST h:1")
	if !NeedsGrant(msg) || NeededGrant(msg) != "http.request POST h:1" {
		t.Fatalf("%q: %v %q", msg, NeedsGrant(msg), NeededGrant(msg))
	}
	old := "ctx.files.list is not granted to w: a person allows what a workflow uses (files.list) — grant it: keep grant w"
	if !NeedsGrant(old) || NeededGrant(old) != "" {
		t.Fatalf("the old form: %v %q", NeedsGrant(old), NeededGrant(old))
	}
	for _, bad := range []string{"http.request post h", "http.request GET h:80", "http.request GET Host", "sql.exec a b", "x", "tool.method extra"} {
		if CheckGrantItem(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Issue 38 #4: a secret's grant is "secret:NAME" (a valid name), read back
// from a refusal like any grant; a secret's host is written as grants
// write hosts; SecretsIn reads names as the call's fill does.
func TestSecretGrantsAndHosts(t *testing.T) {
	for item, ok := range map[string]bool{"secret:crm_token": true, "secret:a.b-c": true, "secret:": false, "secret:a b": false, "secret:{x}": false} {
		if err := CheckGrantItem(item); (err == nil) != ok {
			t.Errorf("CheckGrantItem(%q) = %v", item, err)
		}
	}
	if got := NeededGrant("x — grant it: keep grant wf 'secret:crm_token'"); got != "secret:crm_token" {
		t.Errorf("NeededGrant read %q", got)
	}
	for h, ok := range map[string]bool{"api.crm.example": true, "127.0.0.1:8090": true, "[::1]:8090": true, "API.crm.example": false, "api.crm.example:443": false, "api.crm.example:80": false, "https://api.crm.example": false, "": false, "a/b": false} {
		if err := CheckSecretHost(h); (err == nil) != ok {
			t.Errorf("CheckSecretHost(%q) = %v", h, err)
		}
	}
	for s, want := range map[string]string{
		"Bearer {secret:b} {secret:a} {secret:b}": "[a b] false",
		"{secret:" + "":           "[] true",
		"{secret:a b} {secret:c}": "[c] true",
		"no secret here {x}":      "[] false",
	} {
		names, partial := SecretsIn(s)
		if got := fmt.Sprintf("%v %v", names, partial); got != want {
			t.Errorf("SecretsIn(%q) = %v %v, want %s", s, names, partial, want)
		}
	}
}
