// Package system is the connector of time and randomness and the "system"
// source of registerInput (types schedule and random). ctx.now() and
// ctx.random() are served by the engine, which records them in the trace;
// this connector declares the source so registerInput accepts it.
package system

import "github.com/keep-run/keep/internal/connector"

// New returns the system connector.
func New() *connector.Connector {
	return &connector.Connector{
		Name:    "system",
		Doc:     "Time and randomness are `ctx.now()` and `ctx.random()` (recorded in the trace); this connector only lends its source to `ctx.registerInput`, for inputs that are not from the outside (a schedule tick, a random draw).",
		Sources: map[string][]string{"system": {"schedule", "random"}},
		Methods: map[string]*connector.Method{},
	}
}
