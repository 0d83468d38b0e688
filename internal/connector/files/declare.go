package files

import "github.com/keep-run/keep/internal/connector"

// Declaration is the files connector's declaration: built for each
// workflow's files root, with no table.
var Declaration = connector.Declaration{
	Name:    "files",
	Doc:     "A local folder.",
	PerRoot: true,
	Build: func(_ any, h *connector.Host) ([]*connector.Connector, error) {
		return []*connector.Connector{New(h.FilesRoot)}, nil
	},
}
