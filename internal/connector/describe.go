package connector

import (
	"fmt"
	"sort"
	"strings"
)

// Info is what a connector declares, as `keep connectors --json` prints it
// and docs/scripts.md shows it.
type Info struct {
	Name    string              `json:"name"`
	Doc     string              `json:"doc"`
	Sources map[string][]string `json:"sources"`
	Methods []MethodInfo        `json:"methods"`
}

// MethodInfo is one method's declaration.
type MethodInfo struct {
	Name    string `json:"name"`
	Summary string `json:"summary"`
	// Kind is read, readById or mutate, or says which calls are which.
	Kind string `json:"kind"`
	// Identity lists the params that name a write's target; the other
	// params are its payload.
	Identity []string `json:"identity,omitempty"`
	// Secret lists params never shown in traces, cards or the ledger.
	Secret []string `json:"secret,omitempty"`
	// Scopes are the OAuth scopes any of which lets a call through.
	Scopes []string `json:"scopes,omitempty"`
	// ReconcileScopes are what its reconcile needs beside Scopes.
	ReconcileScopes []string `json:"reconcileScopes,omitempty"`
	Params          []Param  `json:"params"`
	Result          string   `json:"result"`
	// ResultTS is Result as a TypeScript type; KindArgs, for a method
	// whose kind depends on the call, the arguments of each kind's calls.
	ResultTS         string          `json:"resultTs"`
	KindArgs         map[Kind]string `json:"kindArgs,omitempty"`
	Reconcile        string          `json:"reconcile,omitempty"`
	ComparePayload   bool            `json:"comparePayload"`
	RequiresApproval bool            `json:"requiresApproval"`
	Errors           string          `json:"errors"`
	Limits           string          `json:"limits,omitempty"`
	Needs            string          `json:"needs,omitempty"`
}

// Connectors lists the registry's connectors by name.
func (r *Registry) Connectors() []*Connector {
	out := make([]*Connector, 0, len(r.byName))
	for _, c := range r.byName {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Describe lists what the registry's connectors declare.
func Describe(r *Registry) []Info {
	var out []Info
	for _, c := range r.Connectors() {
		info := Info{Name: c.Name, Doc: c.Doc, Sources: c.Sources, Methods: []MethodInfo{}}
		names := make([]string, 0, len(c.Methods))
		for n := range c.Methods {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			info.Methods = append(info.Methods, describeMethod(c.Methods[n]))
		}
		out = append(out, info)
	}
	return out
}

func describeMethod(m *Method) MethodInfo {
	mi := MethodInfo{Name: m.Name, Summary: m.Doc.Summary, Kind: string(m.Kind), Identity: m.Identity, Secret: m.Secret, Scopes: m.Scopes, ReconcileScopes: m.ReconcileScopes,
		Params: m.Doc.Params, Result: m.Doc.Result, ResultTS: m.Doc.ResultTS, KindArgs: m.Doc.KindArgs, Reconcile: m.Doc.Reconcile, ComparePayload: m.ComparePayload != nil,
		RequiresApproval: m.RequiresApproval, Errors: m.Doc.Errors, Limits: m.Doc.Limits, Needs: m.Doc.Needs}
	if m.Doc.Kind != "" {
		mi.Kind = m.Doc.Kind
	}
	if mi.Params == nil {
		mi.Params = []Param{}
	}
	if m.Reconcile == nil && (m.Kind == KindMutate || m.KindOf != nil) {
		mi.Reconcile = "none: an uncertain outcome (a timeout after the request went out) blocks the run for a person at once"
	}
	return mi
}

// Undocumented lists the methods whose declaration says nothing to a
// script author (no summary, params, result or errors).
func Undocumented(infos []Info) []string {
	var out []string
	for _, c := range infos {
		for _, m := range c.Methods {
			if m.Summary == "" || m.Result == "" || m.Errors == "" {
				out = append(out, c.Name+"."+m.Name)
			}
		}
	}
	return out
}

// Untyped lists what keep types cannot declare: a method without a
// ResultTS, a parameter without a TypeScript type, a method whose kind
// depends on the call without KindArgs.
func Untyped(infos []Info) []string {
	var out []string
	for _, c := range infos {
		for _, m := range c.Methods {
			name := c.Name + "." + m.Name
			if m.ResultTS == "" {
				out = append(out, name+": no ResultTS")
			}
			switch Kind(m.Kind) {
			case KindRead, KindReadByID, KindMutate:
			default:
				if len(m.KindArgs) == 0 {
					out = append(out, name+": its kind depends on the call, and it declares no KindArgs")
				}
			}
			for _, p := range m.Params {
				if p.TSType() == "" {
					out = append(out, fmt.Sprintf("%s: parameter %s (%s) has no TS type", name, p.Name, p.Type))
				}
			}
		}
	}
	return out
}

// Markdown renders the connectors' declarations for docs/scripts.md.
func Markdown(infos []Info) string {
	var b strings.Builder
	for _, c := range infos {
		fmt.Fprintf(&b, "### `%s`\n\n%s\n\n", c.Name, c.Doc)
		if len(c.Sources) > 0 {
			var ss []string
			for src, types := range c.Sources {
				for _, t := range types {
					ss = append(ss, "`"+src+"/"+t+"`")
				}
			}
			sort.Strings(ss)
			fmt.Fprintf(&b, "Sources for `ctx.registerInput`: %s.\n\n", strings.Join(ss, ", "))
		}
		for _, m := range c.Methods {
			markdownMethod(&b, c.Name, m)
		}
	}
	return b.String()
}

func markdownMethod(b *strings.Builder, tool string, m MethodInfo) {
	var args []string
	for _, p := range m.Params {
		n := p.Name
		if !p.Required {
			n += "?"
		}
		args = append(args, n)
	}
	fmt.Fprintf(b, "#### `ctx.%s.%s({ %s })`\n\n%s\n\n", tool, m.Name, strings.Join(args, ", "), m.Summary)
	fmt.Fprintf(b, "- **Kind:** %s\n", kindText(m.Kind))
	if len(m.Params) > 0 {
		fmt.Fprintf(b, "- **Parameters:**\n")
		for _, p := range m.Params {
			req := "optional"
			if p.Required {
				req = "required"
			}
			fmt.Fprintf(b, "  - `%s` (%s, %s): %s\n", p.Name, p.Type, req, p.Doc)
		}
	}
	fmt.Fprintf(b, "- **Returns:** %s\n", m.Result)
	if len(m.Identity) > 0 {
		fmt.Fprintf(b, "- **Identity (the target of a write):** %s; every other parameter is payload.\n", backticks(m.Identity))
	}
	if len(m.Secret) > 0 {
		fmt.Fprintf(b, "- **Never shown:** %s (masked in traces, cards and the ledger).\n", backticks(m.Secret))
	}
	if len(m.Scopes) > 0 {
		fmt.Fprintf(b, "- **Google scope:** `%s` (asked for by `keep connect google` when a deployed workflow calls this; also accepted: %s).\n", m.Scopes[0], backticks(m.Scopes[1:]))
	}
	if len(m.ReconcileScopes) > 0 {
		fmt.Fprintf(b, "- **Reconcile's scope:** `%s` too, to read what it looks for (asked for with the one above).\n", m.ReconcileScopes[0])
	}
	if m.Needs != "" {
		fmt.Fprintf(b, "- **Needs:** %s\n", m.Needs)
	}
	if m.Reconcile != "" {
		fmt.Fprintf(b, "- **Reconcile:** %s\n", m.Reconcile)
	}
	if m.ComparePayload {
		fmt.Fprintf(b, "- **A changed payload** for a write already applied is compared (equivalent and minor differences return the recorded result; a significant one blocks the run for a person).\n")
	}
	if m.RequiresApproval {
		fmt.Fprintf(b, "- **Approval:** every call waits for a person (`keep approve`).\n")
	}
	fmt.Fprintf(b, "- **Errors:** %s\n", m.Errors)
	if m.Limits != "" {
		fmt.Fprintf(b, "- **Limits:** %s\n", m.Limits)
	}
	b.WriteString("\n")
}

func kindText(k string) string {
	switch Kind(k) {
	case KindRead:
		return "read (list or search: producers and prepare)"
	case KindReadByID:
		return "read by id (producers, prepare, and mutate before its write)"
	case KindMutate:
		return "write (a consumer's mutate, once per run, or an item's handler; through the ledger)"
	}
	return k
}

func backticks(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return strings.Join(out, ", ")
}
