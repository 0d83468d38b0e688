package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/keep-run/keep/internal/config"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Prune applies the retention policy (issue 44): the bodies of work
// finished before now − p.Horizon are dropped, kind by kind, in write
// transactions of at most p.Batch rows each, so runs keep committing
// between them. What may go is keeptype's rule (RunPrunable, …); the
// newest p.KeepDoneRuns done runs of each workflow's version (what the
// Maintainer replays) and each workflow's newest retried run (the last
// failure's card) are spared whatever their age. With dryRun nothing is
// written: the report says what would go. Afterwards a store that can
// (SQLite) gives the freed pages back to the disk.
func (e *Engine) Prune(ctx context.Context, p kt.Retention, dryRun bool) (kt.PruneReport, error) {
	rep := kt.PruneReport{DryRun: dryRun}
	if p.Horizon <= 0 {
		return rep, nil
	}
	if p.Batch <= 0 {
		p.Batch = 200
	}
	now := e.NowMs()
	rep.Before = now - p.Horizon.Milliseconds()
	sz, sized := e.store.(store.Sizer)
	if sized {
		n, err := sz.Size(ctx)
		if err != nil {
			return rep, err
		}
		rep.SizeBefore = n
	}
	pr := pruner{p: p, before: rep.Before, spare: map[string]map[string]bool{}}
	for _, kind := range store.PruneKinds {
		c, err := e.pruneKind(ctx, &pr, kind, now, dryRun)
		if err != nil {
			return rep, err
		}
		rep.Kinds = append(rep.Kinds, c)
	}
	rep.Spared = pr.spared
	if cm, ok := e.store.(store.Compactor); ok && !dryRun {
		freed, err := cm.Compact(ctx)
		if err != nil {
			return rep, fmt.Errorf("give the disk back: %w", err)
		}
		rep.Freed = freed
	}
	if sized {
		n, err := sz.Size(ctx)
		if err != nil {
			return rep, err
		}
		rep.SizeAfter = n
	}
	return rep, nil
}

// pruneKind prunes one kind of row, batch after batch (or, dryRun,
// counts what would go), and reports what went.
func (e *Engine) pruneKind(ctx context.Context, pr *pruner, kind store.PruneKind, now int64, dryRun bool) (kt.PruneCount, error) {
	c := kt.PruneCount{Kind: string(kind)}
	var after store.PruneCursor
	for done := false; !done; {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		batch := func(tx store.Tx) error {
			rows, err := tx.PruneList(kind, pr.before, after, pr.p.Batch)
			if err != nil {
				return err
			}
			if len(rows) < pr.p.Batch {
				done = true
			}
			if len(rows) == 0 {
				return nil
			}
			after = store.PruneCursor{At: rows[len(rows)-1].At, ID: rows[len(rows)-1].ID}
			pr.runs = map[string]bool{} // a ledger row's run, judged once a batch
			var ids []string
			var bytes int64
			for _, r := range rows {
				ok, err := pr.prunable(tx, kind, r)
				if err != nil {
					return err
				}
				if ok {
					ids, bytes = append(ids, r.ID), bytes+r.Bytes
				}
			}
			if dryRun {
				c.Rows, c.Bytes = c.Rows+len(ids), c.Bytes+bytes
				return nil
			}
			n, b, err := tx.PruneBodies(kind, ids, now)
			c.Rows, c.Bytes = c.Rows+n, c.Bytes+b
			return err
		}
		var err error
		if dryRun {
			err = e.store.View(ctx, batch)
		} else {
			err = e.store.Update(ctx, batch)
		}
		if err != nil {
			return c, fmt.Errorf("prune %s: %w", kind, err)
		}
	}
	return c, nil
}

// RetentionOf is the policy keep.toml's [retention] sets.
func RetentionOf(r config.Retention) kt.Retention {
	return kt.Retention{Horizon: r.Horizon(), KeepDoneRuns: r.KeepDoneRuns, Batch: r.Batch}
}

// pruner judges rows by keeptype's rule, remembering the runs it spares.
type pruner struct {
	p      kt.Retention
	before int64
	// spare holds, per workflow and version (and per workflow for its
	// last retried run), the ids of the runs kept whatever their age.
	spare  map[string]map[string]bool
	spared int
	// runs holds, for the batch under way, whether a ledger row's run
	// lets its bodies go.
	runs map[string]bool
}

func (pr *pruner) prunable(tx store.Tx, kind store.PruneKind, r store.PruneRow) (bool, error) {
	switch kind {
	case store.PruneEvents:
		return kt.EventPrunable(kt.EventStatus(r.Status)), nil
	case store.PruneMutations:
		if !kt.MutationPrunable(kt.MutationStatus(r.Status)) {
			return false, nil
		}
		return pr.runLetsGo(tx, r.Run)
	case store.PruneDeliveries:
		return kt.DeliveryPrunable(kt.DeliveryStatus(r.Status)), nil
	}
	ok, spared, err := pr.runPrunable(tx, r)
	if spared {
		pr.spared++
	}
	return ok, err
}

// runLetsGo says whether a ledger row's run lets the row's params go: a
// run kept whole (spared for the Maintainer's replay, unfinished, within
// the horizon) keeps its writes' params too, since its replay compares the
// write it would make with them (compareWrite); params pruned under a run
// kept whole made every replayed write "another identity", the same for
// the version in place as for a proposed one, so a repair that changed a
// done run's writes replayed without a difference.
func (pr *pruner) runLetsGo(tx store.Tx, id string) (bool, error) {
	if id == "" {
		return true, nil
	}
	if ok, seen := pr.runs[id]; seen {
		return ok, nil
	}
	run, err := tx.RunGet(id)
	switch {
	case errors.Is(err, kt.ErrNotFound):
		pr.runs[id] = true
		return true, nil
	case err != nil:
		return false, err
	}
	ok := false
	if run.FinishedAt > 0 && run.FinishedAt < pr.before {
		if ok, _, err = pr.runPrunable(tx, store.PruneRow{ID: run.ID, Workflow: run.Workflow, Version: run.Version, Status: string(run.Status), At: run.FinishedAt}); err != nil {
			return false, err
		}
	}
	pr.runs[id] = ok
	return ok, nil
}

// runPrunable judges a run finished before the horizon; spared says it
// was kept for being among the newest.
func (pr *pruner) runPrunable(tx store.Tx, r store.PruneRow) (ok, spared bool, err error) {
	st := kt.Status(r.Status)
	if !kt.RunPrunable(st) {
		return false, false, nil
	}
	var version int64
	limit := 1 // a workflow's newest retried run: the last failure's card
	switch st {
	case kt.StatusCommitted:
		version, limit = r.Version, pr.p.KeepDoneRuns
	case kt.StatusSkipped:
		return true, false, nil
	}
	if limit <= 0 {
		return true, false, nil
	}
	key := r.Workflow + "\x00" + strconv.FormatInt(version, 10) + "\x00" + string(st)
	ids, ok := pr.spare[key]
	if !ok {
		newest, err := tx.RunIDsNewest(r.Workflow, version, st, limit)
		if err != nil {
			return false, false, err
		}
		ids = map[string]bool{}
		for _, id := range newest {
			ids[id] = true
		}
		pr.spare[key] = ids
	}
	if ids[r.ID] {
		return false, true, nil
	}
	return true, false, nil
}
