package keeptype

import "fmt"

// Problem is one finding of a script's static validation (script.Check),
// as keep validate prints it and as the API answers an invalid script.
type Problem struct {
	Severity string `json:"severity"` // "error" or "warning"
	Handler  string `json:"handler"`  // e.g. "consumers.processEmail"
	Topic    string `json:"topic"`
	Line     int    `json:"line"`
	Message  string `json:"message"`
}

// String is how a person reads a problem: "error: line 3: consumers.x: …".
func (p Problem) String() string {
	loc := ""
	if p.Line > 0 {
		loc = fmt.Sprintf("line %d: ", p.Line)
	}
	who := ""
	if p.Handler != "" {
		who = p.Handler + ": "
	}
	return fmt.Sprintf("%s: %s%s%s", p.Severity, loc, who, p.Message)
}

// At is the problem as a command prints it for file: "FILE:LINE: error:
// HANDLER: message", the form compilers use, which editors and terminals
// turn into a link to the line (and which a syntax error already has).
func (p Problem) At(file string) string {
	at := file
	if p.Line > 0 {
		at = fmt.Sprintf("%s:%d", file, p.Line)
	}
	who := ""
	if p.Handler != "" {
		who = p.Handler + ": "
	}
	return fmt.Sprintf("%s: %s: %s%s", at, p.Severity, who, p.Message)
}

// HasErrors reports whether any problem is an error.
func HasErrors(ps []Problem) bool {
	for _, p := range ps {
		if p.Severity == "error" {
			return true
		}
	}
	return false
}
