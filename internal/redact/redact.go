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
	"net/url"
	"regexp"
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
// secret name at any depth, and credentials inside URL strings.
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

// URL masks the userinfo and the values of secret query parameters of a URL.
func URL(u string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" && pu.Scheme == "" {
		return u
	}
	changed := false
	if pu.User != nil {
		pu.User = url.User(Mask)
		changed = true
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
			if esc := string(b[1 : len(b)-1]); esc != v {
				forms = append(forms, esc)
			}
		}
	}
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
