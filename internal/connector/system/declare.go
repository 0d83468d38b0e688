package system

import "github.com/keep-run/keep/internal/connector"

// Declaration is the system connector's declaration; it has no table.
var Declaration = connector.Declaration{
	Name: "system",
	Doc:  "Time and randomness, and the system source of registerInput.",
	Build: func(any, *connector.Host) ([]*connector.Connector, error) {
		return []*connector.Connector{New()}, nil
	},
}
