package engine

import (
	"context"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// DeployUnchecked deploys a script that the static analysis refuses (its
// declaration still checked), so tests can try the run-time checks that
// stand behind the analysis.
func DeployUnchecked(ctx context.Context, e *Engine, file, source string) (kt.DeployResult, error) {
	return e.DeployWith(ctx, file, source, DeployOptions{Grant: true, grantBySystem: true, unchecked: true})
}
