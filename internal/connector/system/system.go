// Package system is the connector of time and randomness and the "system"
// source of registerInput (types schedule and random). ctx.now() and
// ctx.random() are served by the engine, which records them in the trace;
// this connector declares the source so registerInput accepts it.
//
// It may import connector.
package system

import "github.com/keep-run/keep/internal/connector"

// New returns the system connector.
func New() *connector.Connector {
	return &connector.Connector{
		Name:    "system",
		Sources: map[string][]string{"system": {"schedule", "random"}},
		Methods: map[string]*connector.Method{},
	}
}
