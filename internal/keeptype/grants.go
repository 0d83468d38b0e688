package keeptype

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// What a grant names (issue 23, finding 7). A grant is one line of text,
// the same in `keep grant`, the page, the card and the store:
//
//	http.request GET api.example.com     GET requests to that host (its scheme's default port)
//	http.request POST 127.0.0.1:8090     POST requests to that host and port
//	sql.query reports                    read-only queries on the database keep.toml names reports
//	sql.exec reports                     writes on that database
//	gmail.send                           a method that reaches one place (the account's)
//	source:gmail                         registerInput with that source
//	secret:crm_token                     {secret:crm_token} in a call the script writes
//	*                                    everything
//
// A method's name alone ("http.request", "sql.query") is the form grants
// had before they named targets: it still grants every target of the
// method, so an upgraded store blocks nothing, until a person revokes it
// and grants the targets instead.

// GrantItem is the grant a call of tool.method with args needs. ok is
// false when the args do not say what the call reaches (no url, a url
// whose host cannot be read, no database), with why.
func GrantItem(tool, method string, args map[string]any) (item string, err error) {
	base := tool + "." + method
	switch base {
	case "http.request":
		m, ok := args["method"].(string)
		if _, present := args["method"]; present && !ok {
			return "", fmt.Errorf("http.request: method is not a string")
		}
		if m == "" {
			m = "GET"
		}
		m = strings.ToUpper(m)
		if !grantWord(m) {
			return "", fmt.Errorf("http.request: %q is not an HTTP method", m)
		}
		u, _ := args["url"].(string)
		host, err := HostOfURL(u, true)
		if err != nil {
			return "", err
		}
		// The reconcile probe rides on the write's grant, so it asks the
		// server the write went to and nowhere else.
		if probe, ok := args["reconcile"].(map[string]any); ok {
			pu, _ := probe["url"].(string)
			if ph, err := HostOfURL(pu, true); err != nil || ph != host {
				return "", fmt.Errorf("http.request: the reconcile probe's url %q does not reach %s, where the write goes; a probe asks the server the write went to", crop(pu, 200), host)
			}
		}
		return base + " " + m + " " + host, nil
	case "sql.query", "sql.exec":
		db, _ := args["db"].(string)
		if !grantWord(db) {
			return "", fmt.Errorf("%s: db %q is not a database name keep.toml can declare", base, db)
		}
		return base + " " + db, nil
	}
	return base, nil
}

// HostOfURL is the host a URL reaches as a grant names it: lower case,
// with its port unless it is the scheme's default. whole says u is the
// whole URL; otherwise u is only the constant start of one, and names a
// host only when the host's end is written in it (a '/', '?' or '#'
// after it), since "https://api.example.com" + x may reach
// api.example.com.elsewhere.org.
func HostOfURL(u string, whole bool) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return "", fmt.Errorf("http.request: the url %q is not an absolute http(s) URL", crop(u, 200))
	}
	if !whole {
		rest := u[strings.Index(u, "//")+2:]
		if !strings.ContainsAny(rest, "/?#") {
			return "", fmt.Errorf("the url's host is not written whole")
		}
	}
	host, port := strings.ToLower(p.Hostname()), p.Port()
	if (p.Scheme == "http" && port == "80") || (p.Scheme == "https" && port == "443") {
		port = ""
	}
	if !grantWord(host) || strings.ContainsAny(host, "/") {
		return "", fmt.Errorf("http.request: %q is not a host name", crop(host, 200))
	}
	if port != "" {
		return net.JoinHostPort(host, port), nil
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]", nil
	}
	return host, nil
}

// grantWord: a word a grant may hold — what host names, methods and
// database names are written with; never a space or a quote, so a grant
// reads back unambiguously from a refusal's message.
func grantWord(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:[]", r)) {
			return false
		}
	}
	return true
}

// GrantBase is the method a grant is for ("http.request" of
// "http.request GET api.example.com"; a source or "*" is its own base).
func GrantBase(item string) string {
	b, _, _ := strings.Cut(item, " ")
	return b
}

// GrantCovers reports whether a grant allows item: the same text, "*",
// or a method's name alone (the old form: every target of the method).
func GrantCovers(granted, item string) bool {
	return granted == "*" || granted == item || (!strings.Contains(granted, " ") && strings.HasPrefix(item, granted+" "))
}

// CheckGrantItem says what is wrong with a grant a person typed, or nil.
func CheckGrantItem(item string) error {
	help := `a grant is "*", "source:NAME", "secret:NAME", "TOOL.METHOD", "http.request METHOD HOST[:PORT]", "sql.query DB" or "sql.exec DB"`
	if item == "*" {
		return nil
	}
	if name, ok := strings.CutPrefix(item, SecretGrantPrefix); ok {
		if err := CheckSecretName(name); err != nil {
			return fmt.Errorf("%q: %v (%s)", item, err, help)
		}
		return nil
	}
	if name, ok := strings.CutPrefix(item, "source:"); ok {
		if !grantWord(name) {
			return fmt.Errorf("%q: a source's name has letters, digits, '.', '-' and '_' (%s)", item, help)
		}
		return nil
	}
	f := strings.Split(item, " ")
	tool, method, ok := strings.Cut(f[0], ".")
	if !ok || !grantWord(tool) || !grantWord(method) {
		return fmt.Errorf("%q is not a grant: %s", item, help)
	}
	if len(f) == 1 {
		return nil
	}
	switch {
	case f[0] == "http.request" && len(f) == 3:
		if f[1] != strings.ToUpper(f[1]) || !grantWord(f[1]) {
			return fmt.Errorf("%q: the method is written in capitals (GET, POST, …)", item)
		}
		if h, err := HostOfURL("http://"+f[2]+"/", true); err != nil || h != f[2] || strings.HasSuffix(h, ":443") {
			return fmt.Errorf("%q: %q is not a host as keep writes it (a name or address in lower case, with its port unless it is 80 or 443)", item, f[2])
		}
		return nil
	case (f[0] == "sql.query" || f[0] == "sql.exec") && len(f) == 2 && grantWord(f[1]):
		return nil
	}
	return fmt.Errorf("%q is not a grant: %s", item, help)
}

// SecretGrantPrefix starts the grant of a secret ("secret:crm_token"):
// a script that writes {secret:NAME} in a call sends the secret only
// once a person granted it to the workflow, and only to the hosts the
// secret itself is scoped to (Secret.Hosts).
const SecretGrantPrefix = "secret:"

// SecretGrant is the grant of the secret name.
func SecretGrant(name string) string { return SecretGrantPrefix + name }

// CheckSecretHost says what is wrong with a host a secret may go to, or
// nil: a host as a grant names it (a name or address in lower case, with
// its port unless it is the scheme's default: api.crm.example,
// 127.0.0.1:8090).
func CheckSecretHost(h string) error {
	if got, err := HostOfURL("http://"+h+"/", true); err != nil || got != h || strings.HasSuffix(h, ":443") || strings.HasSuffix(h, ":80") {
		return fmt.Errorf("%q is not a host as keep writes it: a name or address in lower case, with its port unless it is 80 or 443 (api.crm.example, 127.0.0.1:8090)", h)
	}
	return nil
}

// GrantSuffix ends the message of a call refused for want of a grant,
// naming the grant that lets it through; NeededGrant reads it back, so a
// card's Grant grants exactly what was refused.
func GrantSuffix(workflow, item string) string {
	return " — grant it: keep grant " + workflow + " '" + item + "'"
}

const grantMark = " — grant it: keep grant "

// NeedsGrant reports whether a run's error asks a person for a grant.
func NeedsGrant(msg string) bool { return strings.Contains(msg, grantMark) }

// NeededGrant is the grant a run's error asks for; "" for a message of
// the form before grants were named (grant what the version uses) or one
// that asks for none.
func NeededGrant(msg string) string {
	i := strings.LastIndex(msg, grantMark)
	if i < 0 {
		return ""
	}
	rest := msg[i+len(grantMark):]
	j := strings.Index(rest, " '")
	if j < 0 || !strings.HasSuffix(rest, "'") || len(rest) < j+3 {
		return ""
	}
	item := rest[j+2 : len(rest)-1]
	if CheckGrantItem(item) != nil {
		return ""
	}
	return item
}

func crop(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
