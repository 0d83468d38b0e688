package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Section is one table of keep.toml, decoded from its schema: the fields
// of the value New returns. A field's `toml` tag is its key, `doc` says
// what it is, `default` is its default as TOML writes it ('10s', 5), `min`
// and `max` bound a number and `secret` marks a value keep masks wherever
// it shows text. Each key is written there once: decoding, defaults,
// validation messages and the reference in docs/scripts.md all read it.
type Section struct {
	// Name is the table: "policy", or a connector's "google" for
	// [connectors.google].
	Name string
	// Doc says what the table sets up.
	Doc string
	// New returns a pointer to a new value of the table's struct.
	New func() any
	// Check, when set, validates a decoded value (and may normalize it:
	// trim a URL, take the environment's override); its error names the
	// key. It runs when the table is absent too; cfg holds keep's own
	// tables ([notify] email needs the connector's smtp).
	Check func(v any, cfg *Config) error
}

// connectorSections are the connectors' tables, [connectors.NAME], as the
// connectors' declarations give them (Register).
var connectorSections = map[string]Section{}

// Register adds the tables of connectors: package connector/builtin
// registers every connector keep ships, so whatever links it reads their
// tables. A name registered twice is a programming error.
func Register(ss ...Section) {
	for _, s := range ss {
		if _, dup := connectorSections[s.Name]; dup {
			panic("config: the section [connectors." + s.Name + "] is registered twice")
		}
		connectorSections[s.Name] = s
	}
}

// Sections lists the connectors' tables by name.
func Sections() []Section {
	out := make([]Section, 0, len(connectorSections))
	for _, s := range connectorSections {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Key is one key of a table, as the reference shows it.
type Key struct {
	Name, Type, Doc, Default string
}

// Keys lists the keys of a table's struct in their order.
func Keys(v any) []Key {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []Key
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := tomlName(f)
		if name == "" {
			continue
		}
		out = append(out, Key{Name: name, Type: typeName(f.Type), Doc: f.Tag.Get("doc"), Default: f.Tag.Get("default")})
	}
	return out
}

func tomlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

var durationType = reflect.TypeOf(time.Duration(0))

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == reflect.TypeOf(Size(0)):
		return "size"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	case reflect.Map:
		return "table of " + typeName(t.Elem())
	}
	return "table"
}

// defaults sets every field of v (a pointer to a struct) that has a
// `default` tag to it.
func defaults(v any) {
	var b strings.Builder
	for _, k := range Keys(v) {
		if k.Default != "" {
			fmt.Fprintf(&b, "%s = %s\n", k.Name, k.Default)
		}
	}
	if _, err := toml.Decode(b.String(), v); err != nil {
		panic(fmt.Sprintf("config: a default of %T does not decode: %v", v, err))
	}
}

// checkTags applies what the tags of v's fields say: min and max of
// numbers and sizes, a positive duration written as a string.
func checkTags(md toml.MetaData, where []string, v any) error {
	rv := reflect.ValueOf(v).Elem()
	if rv.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Type().Field(i)
		name := tomlName(f)
		if name == "" || !md.IsDefined(append(where, name)...) {
			continue
		}
		key := append(append([]string(nil), where...), name)
		fv := rv.Field(i)
		if f.Type == durationType {
			if md.Type(key...) != "String" || fv.Int() <= 0 {
				return keyError(where, name, `must be a positive duration like "200ms", "10s" or "5m"`)
			}
			if lo := f.Tag.Get("min"); lo != "" && fv.Int() < int64(durationBound(lo)) {
				return keyError(where, name, "must be at least "+lo)
			}
			continue
		}
		if one := f.Tag.Get("oneof"); one != "" && fv.Kind() == reflect.String {
			if !slices.Contains(strings.Fields(one), fv.String()) {
				return keyError(where, name, "must be one of "+quoted(strings.Fields(one))+", got "+strconv.Quote(fv.String()))
			}
			continue
		}
		if fv.Kind() == reflect.Float64 {
			if err := checkFloat(f, fv.Float(), where, name); err != nil {
				return err
			}
			continue
		}
		if fv.Kind() != reflect.Int && fv.Kind() != reflect.Int64 {
			continue
		}
		if lo := f.Tag.Get("min"); lo != "" && fv.Int() < bound(f.Type, lo) {
			return keyError(where, name, "must be at least "+lo)
		}
		if hi := f.Tag.Get("max"); hi != "" && fv.Int() > bound(f.Type, hi) {
			return keyError(where, name, "must be at most "+hi)
		}
	}
	return nil
}

// quoted lists words as "a", "b" or "c".
func quoted(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = strconv.Quote(w)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// checkFloat applies a number's min and max tags.
func checkFloat(f reflect.StructField, v float64, where []string, name string) error {
	if lo := f.Tag.Get("min"); lo != "" && v < floatBound(lo) {
		return keyError(where, name, "must be at least "+lo)
	}
	if hi := f.Tag.Get("max"); hi != "" && v > floatBound(hi) {
		return keyError(where, name, "must be at most "+hi)
	}
	return nil
}

func durationBound(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

func floatBound(s string) float64 {
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(err)
	}
	return n
}

func bound(t reflect.Type, s string) int64 {
	if t == reflect.TypeOf(Size(0)) {
		var n Size
		if err := n.UnmarshalText([]byte(s)); err != nil {
			panic(err)
		}
		return int64(n)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// KeyError is a bad value of one key.
type KeyError struct {
	Table, Key, Problem string
}

func (e *KeyError) Error() string { return fmt.Sprintf("[%s] %s: %s", e.Table, e.Key, e.Problem) }

func keyError(where []string, key, problem string) error {
	return &KeyError{Table: strings.Join(where, "."), Key: key, Problem: problem}
}

// KeyErrorf is a KeyError for Check functions: the table is filled in by
// the decoder.
func KeyErrorf(key, format string, args ...any) error {
	return &KeyError{Key: key, Problem: fmt.Sprintf(format, args...)}
}

// decodeSection decodes one connector's table strictly.
func decodeSection(md toml.MetaData, s Section, p toml.Primitive, defined bool, cfg *Config) (any, error) {
	v := s.New()
	defaults(v)
	where := []string{"connectors", s.Name}
	if defined {
		if err := md.PrimitiveDecode(p, v); err != nil {
			return nil, typeError(err, where)
		}
		if err := checkTags(md, where, v); err != nil {
			return nil, err
		}
		// An unknown key is said before what Check finds wrong: a
		// misspelt key is why a value seems missing.
		if err := unknownKey(md, where...); err != nil {
			return nil, err
		}
	}
	if s.Check != nil {
		if err := s.Check(v, cfg); err != nil {
			var ke *KeyError
			if errors.As(err, &ke) && ke.Table == "" {
				ke.Table = strings.Join(where, ".")
			}
			return nil, err
		}
	}
	return v, nil
}

var (
	incompatible = regexp.MustCompile(`incompatible types: TOML value has type (\w+); destination has type (.+)$`)
	// decodeErr is the text of the library's type errors, which carry no type.
	decodeErr = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "([^"]+)"\): (.*)$`)
)

// typeError says a value of the wrong type as keep's messages do: the
// line, the table, the key, what it must be.
func typeError(err error, where []string) error {
	var line int
	var key, msg string
	var pe toml.ParseError
	if errors.As(err, &pe) {
		line, key, msg = pe.Position.Line, pe.LastKey, pe.Message
	} else if m := decodeErr.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		key, msg = m[2], m[3]
	} else {
		return err
	}
	if m := incompatible.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("must be %s, not %s", typeWord(strings.TrimPrefix(m[2], "*")), typeWord(m[1]))
	}
	// The library says only "invalid duration: \"10 seconds\"": say how
	// one is written, as keep's own check of a duration does.
	if d, ok := strings.CutPrefix(msg, "invalid duration: "); ok {
		msg = fmt.Sprintf(`must be a duration like "200ms", "10s" or "5m", got %s`, d)
	}
	at := ""
	if line > 0 {
		at = fmt.Sprintf("line %d: ", line)
	}
	if key == "" {
		return fmt.Errorf("%s%s", at, msg)
	}
	parts := strings.Split(key, ".")
	if len(parts) > 1 {
		where, key = parts[:len(parts)-1], parts[len(parts)-1]
	}
	return fmt.Errorf("%s%w", at, keyError(where, key, msg))
}

func typeWord(t string) string {
	switch strings.ToLower(t) {
	case "int64", "integer":
		return "a number"
	case "float64", "float":
		return "a decimal number"
	case "string":
		return "a string"
	case "bool", "boolean":
		return "true or false"
	case "slice", "array":
		return "a list"
	case "map", "struct", "table":
		return "a table"
	}
	return strings.ToLower(t)
}

// unknownKey names the first key nothing decoded: its table, and the keys
// that table knows.
func unknownKey(md toml.MetaData, within ...string) error {
	var k toml.Key
	for _, u := range md.Undecoded() {
		if len(u) > len(within) && slices.Equal(u[:len(within)], within) {
			k = u
			break
		}
	}
	if k == nil {
		return nil
	}
	if len(k) == 1 {
		return fmt.Errorf("unknown section or key %q (known: [policy], [connectors.NAME], [notify], [llm], [maintainer], [otel])", k[0])
	}
	if _, known := connectorSections[k[1]]; k[0] == "connectors" && !known {
		var names []string
		for _, s := range Sections() {
			names = append(names, s.Name)
		}
		return fmt.Errorf("unknown connector section [connectors.%s] (known: %s)", k[1], strings.Join(bracket("connectors.", names), ", "))
	}
	var t reflect.Type = reflect.TypeOf(file{})
	path := k[:len(k)-1]
	if k[0] == "connectors" {
		t, path = reflect.TypeOf(connectorSections[k[1]].New()), k[2:len(k)-1]
	}
	return fmt.Errorf("unknown key [%s] %s (known: %s)", strings.Join(k[:len(k)-1], "."), k[len(k)-1], strings.Join(knownAt(t, path), ", "))
}

func bracket(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "[" + prefix + n + "]"
	}
	return out
}

// knownAt lists the keys of the table at path within type t.
func knownAt(t reflect.Type, path []string) []string {
	for _, p := range path {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			found := false
			for i := 0; i < t.NumField(); i++ {
				if tomlName(t.Field(i)) == p {
					t, found = t.Field(i).Type, true
					break
				}
			}
			if !found {
				return nil
			}
		default:
			return nil
		}
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	var out []string
	if t.Kind() == reflect.Struct {
		for i := 0; i < t.NumField(); i++ {
			if n := tomlName(t.Field(i)); n != "" {
				out = append(out, n)
			}
		}
	}
	return out
}

// Secrets lists the values of every key marked secret in the decoded
// tables, for package redact.
func (c Config) Secrets() []string {
	var out []string
	for _, v := range c.OTel.Headers {
		// A header written out in keep.toml is a credential as it stands;
		// one filled in from ${VAR} or {secret:NAME} is learned when filled.
		if !strings.Contains(v, "${") && !strings.Contains(v, "{secret:") {
			out = append(out, v)
		}
	}
	for _, v := range c.Connectors {
		rv := reflect.ValueOf(v).Elem()
		if rv.Kind() != reflect.Struct {
			continue
		}
		for i := 0; i < rv.NumField(); i++ {
			if rv.Type().Field(i).Tag.Get("secret") == "true" && rv.Field(i).Kind() == reflect.String && rv.Field(i).String() != "" {
				out = append(out, rv.Field(i).String())
			}
		}
	}
	return out
}

// Files lists the files the decoded tables name that keep reads while it
// runs (a key marked file:"true": [connectors.email] ca_file, the CA keep
// trusts): keep's own, like keep.toml, for package ownfiles.
func (c Config) Files() []string {
	var out []string
	for _, v := range c.Connectors {
		rv := reflect.ValueOf(v).Elem()
		if rv.Kind() != reflect.Struct {
			continue
		}
		for i := 0; i < rv.NumField(); i++ {
			if rv.Type().Field(i).Tag.Get("file") == "true" && rv.Field(i).Kind() == reflect.String && rv.Field(i).String() != "" {
				out = append(out, rv.Field(i).String())
			}
		}
	}
	return out
}

// Get returns the decoded table of connector name as T (its declared
// struct); the zero T when none is registered under name.
func Get[T any](c Config, name string) T {
	if p, ok := c.Connectors[name].(*T); ok && p != nil {
		return *p
	}
	var zero T
	if s, ok := connectorSections[name]; ok {
		if p, ok := s.New().(*T); ok {
			defaults(p)
			return *p
		}
	}
	return zero
}

// Size is a number of bytes, written "64MiB" (B, KiB, MiB, GiB, KB, MB, GB).
type Size int64

var sizeRe = regexp.MustCompile(`^(\d+)\s*(B|KiB|MiB|GiB|KB|MB|GB)?$`)

// UnmarshalText reads a size.
func (s *Size) UnmarshalText(b []byte) error {
	m := sizeRe.FindStringSubmatch(strings.TrimSpace(string(b)))
	if m == nil {
		return fmt.Errorf(`must be a size like "64MiB" (units B, KiB, MiB, GiB), got %q`, b)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	*s = Size(n * map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1000, "MB": 1000000, "GB": 1000000000}[m[2]])
	return nil
}

// UnmarshalJSON reads a size recorded as JSON: a number of bytes (what
// json.Marshal writes of a Size, as a workflow's recorded policy holds it)
// or a string as keep.toml writes it.
func (s *Size) UnmarshalJSON(b []byte) error {
	var text string
	if json.Unmarshal(b, &text) == nil {
		return s.UnmarshalText([]byte(text))
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf(`must be a number of bytes or a size like "64MiB", got %s`, b)
	}
	*s = Size(n)
	return nil
}

// Markdown renders a table's keys as the reference shows them: a table
// of named tables ([connectors.custom.NAME]) shows the named one's keys,
// and each key holding named tables its own.
func Markdown(table, doc string, v any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### `[%s]`\n\n%s\n\n", table, doc)
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		table, t = table+".NAME", t.Elem()
		fmt.Fprintf(&b, "Each `[%s]`:\n\n", table)
	}
	markdownKeys(&b, table, t)
	return b.String()
}

func markdownKeys(b *strings.Builder, table string, t reflect.Type) {
	if t.Kind() != reflect.Struct {
		return
	}
	var nested []reflect.StructField
	b.WriteString("| key | type | what it is |\n|---|---|---|\n")
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := tomlName(f)
		if name == "" {
			continue
		}
		doc := f.Tag.Get("doc")
		if d := f.Tag.Get("default"); d != "" {
			doc += " Defaults to `" + strings.Trim(d, "'") + "`."
		}
		if f.Tag.Get("secret") == "true" {
			doc += " Masked wherever keep shows text."
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", name, typeName(f.Type), strings.ReplaceAll(doc, "|", "\\|"))
		if f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct {
			nested = append(nested, f)
		}
	}
	b.WriteString("\n")
	for _, f := range nested {
		sub := table + "." + tomlName(f) + ".NAME"
		fmt.Fprintf(b, "Each `[%s]`:\n\n", sub)
		markdownKeys(b, sub, f.Type.Elem())
	}
}
