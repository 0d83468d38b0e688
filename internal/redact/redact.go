// Package redact is the one place that decides what of a call or a message
// is a credential, so that it is masked before anything is stored, traced,
// logged or printed: header and parameter names that carry secrets
// (Authorization, cookies, API keys and tokens, passwords), credentials in
// URLs (user:password@, ?api_key=…), and the same inside free text such as
// an error message that quotes a URL.
//
// It imports nothing of the project.
package redact

import (
	"encoding/json"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Mask replaces every secret value.
const Mask = "[redacted]"

// exactNames are header or parameter names (lower case, '-' and '_' removed)
// whose value is a credential wherever they appear.
var exactNames = map[string]bool{
	"authorization": true, "proxyauthorization": true, "cookie": true, "setcookie": true,
	"xapikey": true, "apikey": true, "xauthtoken": true, "privatetoken": true, "xgoogapikey": true,
	"password": true, "passwd": true, "pwd": true, "secret": true, "clientsecret": true,
	"token": true, "accesstoken": true, "refreshtoken": true, "idtoken": true, "authtoken": true,
	"sessiontoken": true, "xcsrftoken": false, "sig": true, "signature": true, "key": true,
	"privatekey": true, "xamzsecuritytoken": true, "xvaulttoken": true,
}

// Name reports whether a header or parameter with this name carries a credential.
func Name(name string) bool {
	// Value asks this of every key of every traced or stored object, so an
	// ASCII name is squashed on the stack: no allocation (a Replacer built
	// per call was 44 % of the bytes a consumer run allocated).
	var buf [64]byte
	n := buf[:0]
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= utf8.RuneSelf:
			return squashedName(strings.NewReplacer("-", "", "_", "", " ", "").Replace(strings.ToLower(name)))
		case c == '-' || c == '_' || c == ' ':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		n = append(n, c)
	}
	return squashedName(string(n))
}

// squashedName is Name of a name already lower case, '-', '_' and ' ' removed.
func squashedName(n string) bool {
	if v, ok := exactNames[n]; ok {
		return v
	}
	return strings.HasSuffix(n, "apikey") || strings.HasSuffix(n, "token") || strings.HasSuffix(n, "secret") ||
		strings.HasSuffix(n, "password") || strings.HasPrefix(n, "xauth")
}

// Value returns a copy of v with every credential masked: values under a
// secret name at any depth, every header Header takes for a credential
// (under a key named headers: an object of names to values, or a list of
// { name, value }), and credentials inside URL strings.
func Value(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			if Name(k) && val != nil {
				if _, isMap := val.(map[string]any); !isMap {
					out[k] = Mask
					continue
				}
			}
			if isHeaders(k) {
				out[k] = headers(val)
				continue
			}
			out[k] = Value(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = Value(val)
		}
		return out
	case string:
		return String(x)
	}
	return v
}

// isHeaders says whether a key holds headers ("headers", "Header", …).
func isHeaders(k string) bool {
	return len(k) >= 6 && len(k) <= 7 && (strings.EqualFold(k, "headers") || strings.EqualFold(k, "header"))
}

// headers is Value for headers: each one Header takes for a credential is
// masked whole.
func headers(v any) any {
	switch h := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(h))
		for name, val := range h {
			if headerValue(name, val) {
				out[name] = Mask
				continue
			}
			out[name] = Value(val)
		}
		return out
	case []any:
		out := make([]any, len(h))
		for i, e := range h {
			if m, ok := e.(map[string]any); ok {
				name, _ := m["name"].(string)
				if headerValue(name, m["value"]) {
					masked := Value(m).(map[string]any)
					masked["value"] = Mask
					out[i] = masked
					continue
				}
			}
			out[i] = Value(e)
		}
		return out
	}
	return Value(v)
}

// headerValue is Header of a value that may be a string or a list of them.
func headerValue(name string, v any) bool {
	switch x := v.(type) {
	case string:
		return Header(name, x)
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok && Header(name, s) {
				return true
			}
		}
		return Name(name) || headerName(name)
	case nil:
		return false
	}
	return Name(name) || headerName(name)
}

// Header reports whether a header with this name and value carries a
// credential, by its name or by its value's shape (issue 38: only known
// names were masked, so a token under X-Custom-Sig was shown):
//
//   - a name Name knows, or one that holds key, token, secret, auth,
//     passw, pwd, signature, session, cookie or credential (X-Shop-Key,
//     X-Session-Id, X-Hub-Signature-256); Idempotency-Key, which keep
//     itself sends and which names a write, not a person, is not one;
//   - a value that begins with an authentication scheme followed by
//     something (Bearer, Basic, Token, Digest, Negotiate, …);
//   - a value holding a token of a well-known form (LooksLikeToken) or a
//     long random-looking word (Random): 20 characters or more of the
//     letters, digits and signs tokens are made of, with letters and
//     digits both, spread like random text.
func Header(name, value string) bool {
	if value == "" || value == Mask || onlyPlaceholders(value) {
		return false
	}
	if Name(name) || headerName(name) {
		return true
	}
	if sp := strings.IndexAny(value, " \t"); sp > 0 && strings.TrimSpace(value[sp:]) != "" && authScheme(value[:sp]) {
		return true
	}
	if LooksLikeToken(value) {
		return true
	}
	// Each word of the value, between spaces, commas, semicolons and =
	// (a cookie's value, a scheme of another name): no allocation. A
	// quoted word (an ETag) is not a token.
	start := 0
	for i := 0; i <= len(value); i++ {
		if i == len(value) || strings.IndexByte(" \t,;=", value[i]) >= 0 {
			if Random(value[start:i]) {
				return true
			}
			start = i + 1
		}
	}
	return false
}

// onlyPlaceholders says whether value holds nothing secret but the names of
// keep's secrets ({secret:NAME}, filled in at the call) and perhaps a
// scheme before them ("Bearer {secret:tok}"): the name is what is shown.
func onlyPlaceholders(value string) bool {
	if !strings.Contains(value, "{secret:") {
		return false
	}
	rest := value
	for {
		i := strings.Index(rest, "{secret:")
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return false
		}
		rest = rest[:i] + " " + rest[i+j+1:]
	}
	rest = strings.TrimSpace(rest)
	return rest == "" || authScheme(rest)
}

// authScheme says whether word is an authentication scheme, in any case.
func authScheme(word string) bool {
	if len(word) > 20 {
		return false
	}
	var buf [20]byte
	for i := 0; i < len(word); i++ {
		c := word[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return authSchemes[string(buf[:len(word)])]
}

// authSchemes are the first words of Authorization-like values (lower case).
var authSchemes = map[string]bool{
	"bearer": true, "basic": true, "token": true, "digest": true, "negotiate": true, "ntlm": true, "hoba": true,
	"mutual": true, "apikey": true, "api-key": true, "key": true, "hmac": true, "aws4-hmac-sha256": true,
	"sharedkey": true, "sso-key": true, "signature": true, "oauth": true, "dpop": true, "gsskrb5": true,
}

// headerWords are parts of a header's name that say it carries a credential.
var headerWords = []string{"key", "token", "secret", "auth", "passw", "pwd", "signature", "session", "cookie", "credential"}

// headerParts are words that say so only as a whole part of the name,
// between - or _ (X-Custom-Sig, but not X-Design).
var headerParts = []string{"sig", "jwt", "hmac", "pass", "pw", "otp", "pin"}

// headerName says whether a header's name holds a word of headerWords, or
// one of headerParts as a part of it.
func headerName(name string) bool {
	if strings.EqualFold(name, "idempotency-key") || strings.EqualFold(name, "idempotency_key") || strings.EqualFold(name, "idempotencykey") {
		return false
	}
	for _, w := range headerWords {
		if containsFold(name, w) {
			return true
		}
	}
	start := 0
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '-' || name[i] == '_' {
			for _, p := range headerParts {
				if strings.EqualFold(name[start:i], p) {
					return true
				}
			}
			start = i + 1
		}
	}
	return false
}

// Random reports whether word looks like a random token: at least 20
// characters, all letters, digits or one of + / = _ - . ~, with letters
// and digits both, mixed as random text mixes them (the kind of
// character — lower case, upper case, digit — changes at least once in
// five, signs aside: words joined by dashes change seldom) and spread like
// random text (at least 3 bits of Shannon entropy per character: hex and
// base64 keys have 3.5–6, repeated characters less).
func Random(word string) bool {
	if len(word) < 20 || len(word) > 4096 {
		return false
	}
	var counts [128]int
	letters, digits := false, false
	alnum, changes, last := 0, 0, 0
	for i := 0; i < len(word); i++ {
		c := word[i]
		kind := 0
		switch {
		case 'a' <= c && c <= 'z':
			letters, kind = true, 1
		case 'A' <= c && c <= 'Z':
			letters, kind = true, 2
		case '0' <= c && c <= '9':
			digits, kind = true, 3
		case c == '+' || c == '/' || c == '=' || c == '_' || c == '-' || c == '.' || c == '~':
		default:
			return false
		}
		if kind != 0 {
			if last != 0 && kind != last {
				changes++
			}
			last = kind
			alnum++
		}
		counts[c]++
	}
	if !letters || !digits || changes*5 < alnum {
		return false
	}
	h, n := 0.0, float64(len(word))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h >= 3.0
}

// Map is Value for an argument map.
func Map(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return Value(m).(map[string]any)
}

var (
	urlInText    = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]+`)
	bearerInText = regexp.MustCompile(`(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}`)
	// tokenInText matches the published forms of well-known API tokens
	// (Slack, GitHub, GitLab, OpenAI/Anthropic-style sk-, Stripe, AWS
	// access keys, Google API keys and OAuth access tokens): such a value
	// is a credential wherever it appears, whatever carries it.
	tokenInText = regexp.MustCompile(`\b(xox[abprse]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9_-]{20,}|[sr]k_(live|test)_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|ya29\.[A-Za-z0-9_-]{20,})`)
)

// String masks credentials inside free text: every value keep knows to be
// secret (Learn), tokens of a well-known form (LooksLikeToken), in every URL
// it quotes (the userinfo and the values of secret query parameters) and
// after "Bearer".
//
// Each pattern runs only on text holding a word it needs (mayHoldToken,
// containsFold): a run's trace notes are masked as they are written, and
// the backtracking of the patterns over text without them was ≈ 5 % of
// keep's CPU per consumer run.
func String(s string) string {
	s = MaskKnown(s)
	if mayHoldToken(s) {
		s = tokenInText.ReplaceAllString(s, Mask)
	}
	if strings.Contains(s, "://") {
		s = urlInText.ReplaceAllStringFunc(s, URL)
	}
	if !mayHoldScheme(s) {
		return s
	}
	return bearerInText.ReplaceAllStringFunc(s, func(m string) string {
		return strings.Fields(m)[0] + " " + Mask
	})
}

// tokenPrefixes are what every form tokenInText matches begins with (or,
// for Stripe's [sr]k_live_/[sr]k_test_, holds): text with none of them
// holds no such token.
var tokenPrefixes = []string{"xox", "xapp-", "gh", "github_pat_", "glpat-", "sk-", "k_live_", "k_test_", "AKIA", "AIza", "ya29."}

func mayHoldToken(s string) bool {
	for _, p := range tokenPrefixes {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// mayHoldScheme says whether s may hold what bearerInText matches: one of
// its words in any case (text that is not ASCII: always, as Unicode's case
// folding maps other letters to some of theirs, K to k).
func mayHoldScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return true
		}
	}
	return containsFold(s, "bearer") || containsFold(s, "basic") || containsFold(s, "token")
}

// containsFold says whether ASCII text s holds word (lower-case) in any case.
func containsFold(s, word string) bool {
	for i := 0; i+len(word) <= len(s); i++ {
		if s[i]|0x20 == word[0] && strings.EqualFold(s[i:i+len(word)], word) {
			return true
		}
	}
	return false
}

// URL masks the password of a URL's userinfo and the values of secret
// query parameters. The user name is shown (postgres://keep:[redacted]@…
// says who logs in: issue 42), unless it is the credential itself: a user
// name alone that is a token of a well-known form, a value keep knows to
// be secret, or random text (https://TOKEN@host).
func URL(u string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" && pu.Scheme == "" {
		return u
	}
	changed := false
	if pu.User != nil {
		name := pu.User.Username()
		_, hasPassword := pu.User.Password()
		switch {
		case LooksLikeToken(name) || Known(name) || Random(name):
			pu.User = url.User(Mask)
			changed = true
		case hasPassword:
			pu.User = url.UserPassword(name, Mask)
			changed = true
		}
	}
	if pu.RawQuery != "" {
		q := pu.Query()
		for k := range q {
			if Name(k) {
				q.Set(k, Mask)
				changed = true
			}
		}
		if changed {
			pu.RawQuery = q.Encode()
		}
	}
	if !changed {
		return u
	}
	out := pu.String()
	// Keep the mask readable rather than percent-encoded.
	return strings.NewReplacer("%5Bredacted%5D", Mask, "%5bredacted%5d", Mask).Replace(out)
}

// Values keep knows to be secret, masked wherever they appear, whatever
// name they go under (an X-Custom-Sig header, a server that echoes a
// header back in an error body, a token quoted in a log line).
var (
	knownMu     sync.Mutex
	knownValues = map[string]bool{}
	known       atomic.Pointer[strings.Replacer]
)

// MinKnown is the shortest value Learn masks: a shorter one would mask
// ordinary text and hide little.
const MinKnown = 4

// Learn tells redact about values that are secret: the named secrets (when
// they are set or opened), account tokens (when they are handed out), keys
// from the configuration. From then on String, Value and Map mask them,
// also as they appear inside JSON text.
func Learn(values ...string) {
	knownMu.Lock()
	defer knownMu.Unlock()
	changed := false
	for _, v := range values {
		if len(v) < MinKnown || knownValues[v] {
			continue
		}
		knownValues[v] = true
		changed = true
	}
	if !changed {
		return
	}
	var forms []string
	for v := range knownValues {
		forms = append(forms, v)
		if b, err := json.Marshal(v); err == nil {
			forms = append(forms, string(b[1:len(b)-1]))
		}
		// A secret keep put in a URL went escaped (http's fillURL), and a
		// server that answers with the URL (a redirect to its canonical
		// form keeps the query) gives that form back: the script read the
		// value there and sent it to a host it was not scoped to (issue
		// 38, attack).
		forms = append(forms, url.QueryEscape(v), url.PathEscape(v))
	}
	slices.Sort(forms)
	forms = slices.Compact(forms)
	// Longest first: a value that starts another must not leave its tail.
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Mask)
	}
	known.Store(strings.NewReplacer(pairs...))
}

// MaskKnown masks only the values Learn was told about (String masks
// credentials by their names and places too).
func MaskKnown(s string) string {
	if r := known.Load(); r != nil {
		return r.Replace(s)
	}
	return s
}

// LooksLikeToken reports whether s holds a token of a well-known form (a
// Slack bot token, a GitHub or GitLab token, an sk- API key, an AWS access
// key id, a Google API key or access token).
func LooksLikeToken(s string) bool { return tokenInText.MatchString(s) }

// Known reports whether s holds a value Learn was told about.
func Known(s string) bool {
	r := known.Load()
	return r != nil && r.Replace(s) != s
}
