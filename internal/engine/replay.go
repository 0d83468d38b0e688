package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Judging a proposed version by what it does (issue 22): the work the
// version in place already did is replayed on the proposed one — every read
// answered from what the run recorded (TraceEntry.Result), every write
// intercepted — and what it would do is compared with what the ledgers
// hold: item keys, messageIds, input ids, each write's tool, method,
// target, identity and payload hash. Nothing of a replay reaches the world
// or the store. The text of the script is never read.

// Difference is one piece of done work the proposed version would do
// otherwise.
type Difference struct {
	RunID   string `json:"runId"`
	Handler string `json:"handler"`
	// What names the piece: "item email:a", "write of run …", "event job/job-1".
	What string `json:"what"`
	// Was is what the ledger holds; Would what the proposed version does.
	Was   string `json:"was"`
	Would string `json:"would"`
	// IDs: done or incomplete work under another id (an item, a
	// messageId, an input id, a done item's write under another identity
	// or subkey) — what a minor version may not do and a major one does
	// only with consent (IDChanges).
	IDs bool `json:"ids,omitempty"`
}

func (d Difference) String() string {
	return fmt.Sprintf("%s %s (run %s): was %s, would be %s", d.Handler, d.What, shortRun(d.RunID), d.Was, d.Would)
}

func shortRun(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

// ReplayReport is what replaying done work found.
type ReplayReport struct {
	// Runs is how many done runs were replayed.
	Runs        int          `json:"runs"`
	Differences []Difference `json:"differences"`
}

// maxReplayRuns bounds the done runs replayed (the newest first), and
// maxReplayDiffs the differences one run's replay names.
const (
	maxReplayRuns  = 200
	maxReplayDiffs = 50
)

// recordedReads answers a dry run's reads from recorded traces.
type recordedReads struct {
	entries []kt.TraceEntry
	used    []bool
	// change, when set, makes an unseen input of every answer
	// (CompareUnseen): the same for both versions compared.
	change func(json.RawMessage) json.RawMessage
	// miss is the first read it could not answer: the dry run cannot tell
	// what the proposed version would do past it.
	miss string
	// byShape, on inputs keep made (CompareUnseen), answers a read the
	// run did not make with one it made of the same shape (the same
	// method, its arguments with every number taken out: GET /price/4 as
	// GET /price/1 was): a consumer that looks each order up reads for an
	// order past any seen too, and both versions are compared on it.
	byShape bool
}

// readShape is a read's arguments with every number taken out.
func readShape(args any) string {
	b, _ := json.Marshal(args)
	return digitRun.ReplaceAllString(negativeNumber.ReplaceAllString(string(b), "$1"), "*")
}

func readsOf(traces ...json.RawMessage) *recordedReads {
	r := &recordedReads{}
	for _, t := range traces {
		for _, e := range loadTrace(t).entries {
			if e.Kind != "call" || e.ArgsHash == "" || len(e.Result) == 0 {
				continue
			}
			// Answered as the read answered: a result stored once is
			// made whole (one that cannot be is not replayed).
			whole, ok := e.WholeResult()
			if !ok {
				continue
			}
			e.Result, e.JSONOfBody = whole, false
			r.entries = append(r.entries, e)
		}
	}
	r.used = make([]bool, len(r.entries))
	return r
}

// answer returns what the recorded run read with the same arguments (the
// next unused answer, then any: a script may read one thing twice).
func (r *recordedReads) answer(method, argsHash string, args any) (json.RawMessage, error) {
	shape := ""
	for pass := 0; pass < 3; pass++ {
		if pass == 2 {
			if !r.byShape {
				break
			}
			shape = readShape(args)
		}
		for i, e := range r.entries {
			same := e.ArgsHash == argsHash
			if pass == 2 {
				same = readShape(e.Args) == shape
			}
			if e.Method == method && same && (pass >= 1 || !r.used[i]) {
				r.used[i] = true
				if r.change != nil {
					return r.change(e.Result), nil
				}
				return e.Result, nil
			}
		}
	}
	if r.miss == "" {
		r.miss = "ctx." + method
	}
	return nil, kt.Errorf(kt.ClassLogic, "dry run: ctx.%s with these arguments is a read the recorded run did not make; a dry run answers reads only from what was recorded, and sends nothing", method)
}

// missErr is the error of a dry run that made a read it could not answer.
func (r *recordedReads) missErr() error {
	if r == nil || r.miss == "" {
		return nil
	}
	return fmt.Errorf("it makes a read the recorded run did not make (%s with other arguments, or a read keep did not keep); a dry run never reaches the world, so keep cannot tell what it would do", r.miss)
}

// noteDiff records a difference of the replay (sticky: a script that
// catches the error it gets still counts as different).
func (x *runExec) noteDiff(what, was, would string) {
	x.diffs = append(x.diffs, Difference{RunID: x.run.ID, Handler: x.run.Handler, What: what, Was: was, Would: would})
}

// noteIDDiff records a difference of ids (Difference.IDs).
func (x *runExec) noteIDDiff(what, was, would string) {
	x.noteDiff(what, was, would)
	x.diffs[len(x.diffs)-1].IDs = true
}

// errDiffers stops a replay at its first difference.
var errDiffers = kt.Errorf(kt.ClassLogic, "dry run: the done work would change")

// ReplayDone replays the done runs of a workflow's version (the newest
// maxReplayRuns), and the run also when it is an item script's (its done
// items are done work too), on the proposed script src, and reports every
// difference from what the ledgers hold. Each run starts from the
// handler's state as it is now (a run's starting state is not kept): a
// producer whose reads depend on it makes reads its run did not, and
// counts as different — a person looks.
//
// The version's own script is replayed the same way first: what it does
// not reproduce itself (a producer whose output depends on the state it
// had then) is the replay's limit, not a change, and is not counted.
func (e *Engine) ReplayDone(ctx context.Context, workflow string, version int64, src, also string) (ReplayReport, error) {
	rep, _, err := e.replayBoth(ctx, workflow, version, src, replaySel{also: also})
	return rep, err
}

// replaySel selects the done runs a replay replays: the newest
// maxReplayRuns of the version and also (the workflow's open run, when an
// item script's), or, after a judgement (after), only the runs of its
// version committed since it read them.
type replaySel struct {
	also  string
	after *Judged
}

// replayBoth replays the done runs sel selects on the version's own
// script and on src, and keeps what only src does otherwise (ReplayDone).
func (e *Engine) replayBoth(ctx context.Context, workflow string, version int64, src string, sel replaySel) (ReplayReport, Judged, error) {
	var v kt.Version
	if err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		v, err = tx.VersionGet(workflow, version)
		return err
	}); err != nil {
		return ReplayReport{}, Judged{}, err
	}
	done, err := e.doneRuns(ctx, workflow, version, sel)
	if err != nil {
		return ReplayReport{}, Judged{}, err
	}
	base, err := e.replayRuns(ctx, done, v.Script)
	if err != nil {
		return ReplayReport{}, Judged{}, fmt.Errorf("replay version %s itself: %w", v.Label(), err)
	}
	rep, err := e.replayRuns(ctx, done, src)
	if err != nil {
		return rep, Judged{}, err
	}
	itself := map[string]bool{}
	for _, d := range base.Differences {
		itself[d.RunID+"\x00"+d.What+"\x00"+d.Would] = true
	}
	kept := rep.Differences[:0]
	for _, d := range rep.Differences {
		if !itself[d.RunID+"\x00"+d.What+"\x00"+d.Would] {
			kept = append(kept, d)
		}
	}
	rep.Differences = kept
	return rep, done.judged, nil
}

// replayDone replays the done runs sel selects on src alone.
func (e *Engine) replayDone(ctx context.Context, workflow string, version int64, src string, sel replaySel) (ReplayReport, Judged, error) {
	done, err := e.doneRuns(ctx, workflow, version, sel)
	if err != nil {
		return ReplayReport{}, Judged{}, err
	}
	rep, err := e.replayRuns(ctx, done, src)
	return rep, done.judged, err
}

// doneWork is what a replay replays: the workflow, its done runs, and
// the judgement they make (which version, which runs were read).
type doneWork struct {
	wf     kt.Workflow
	runs   []kt.Run
	judged Judged
}

func (e *Engine) replayRuns(ctx context.Context, done doneWork, src string) (ReplayReport, error) {
	var rep ReplayReport
	prog, err := script.Compile("replay.js", src)
	if err != nil {
		return rep, err
	}
	wf, runs := done.wf, done.runs
	pol, err := e.PolicyFor(wf)
	if err != nil {
		return rep, err
	}
	for i := range runs {
		run := runs[i]
		if run.PrunedAt != 0 {
			// Its bodies went with the retention (issue 44): replayed
			// without its reads or its selection it would agree with
			// anything, so it is neither replayed nor counted.
			continue
		}
		x := &runExec{e: e, ctx: ctx, wf: wf, prog: prog, run: &run, tr: newTrace("replay", e.NowMs()), reg: e.connectorsOf(wf), pol: pol, dry: true, impact: true, reads: readsOf(run.Trace)}
		var err error
		switch run.HandlerType {
		case kt.HandlerTask:
			err = x.replayTask()
		case kt.HandlerProducer:
			err = x.replayProducer()
		case kt.HandlerConsumer:
			err = x.replayConsumer()
		default:
			continue
		}
		var dw *errDryWrite
		if errors.As(err, &dw) {
			err = nil // it reached new work: done work ends there
		}
		rep.Runs++
		if miss := x.reads.missErr(); miss != nil {
			x.noteDiff("replay", "done", miss.Error())
		} else if err != nil && len(x.diffs) == 0 {
			var ke *kt.Error
			if !errors.As(err, &ke) {
				return rep, err // keep's own failure, not the script's
			}
			x.noteDiff("run", "done", "failing: "+err.Error())
		}
		rep.Differences = append(rep.Differences, x.diffs...)
	}
	return rep, nil
}

// doneRuns reads the workflow and the done runs a replay replays (sel),
// the newest first, and marks what it read (doneWork.judged). It reads
// under the writers' lock (a transaction that writes nothing, NoSync), so
// no run is committing then: a run committed after it was stamped after
// the mark (Judged.since), and a later judgement or a deploy's
// transaction finds it (Engine.DoneSince).
func (e *Engine) doneRuns(ctx context.Context, workflow string, version int64, sel replaySel) (doneWork, error) {
	var done doneWork
	if err := e.store.Update(store.NoSync(ctx), func(tx store.Tx) error {
		var err error
		done.judged = Judged{Version: version, since: e.NowMs()}
		if done.wf, err = tx.WorkflowGet(workflow); kt.IsDamaged(err) {
			// A deploy restoring a damaged workflow row replays under
			// keep's own policy and root: nothing of the damaged row.
			done.wf.FilesRoot, done.wf.Policy, err = "", "", nil
		}
		if err != nil {
			return err
		}
		if sel.after != nil {
			done.runs, err = runsSince(tx, workflow, *sel.after, maxReplayRuns)
		} else {
			done.runs, err = newestDone(tx, workflow, version, sel.also)
		}
		return err
	}); err != nil {
		return done, err
	}
	done.judged.seen = map[string]int64{}
	for _, r := range done.runs {
		if r.FinishedAt >= done.judged.since {
			done.judged.seen[r.ID] = r.Rev
		}
	}
	sort.Slice(done.runs, func(i, j int) bool { return done.runs[i].CreatedAt > done.runs[j].CreatedAt })
	return done, nil
}

// newestDone reads the newest maxReplayRuns done runs of the version, and
// the run also when it is one of the workflow's item scripts'.
func newestDone(tx store.Tx, workflow string, version int64, also string) ([]kt.Run, error) {
	// The newest done runs of the version, read as such: a workflow's
	// whole history, traces included, grows without bound.
	runs, err := tx.RunsOfVersion(workflow, version, kt.StatusCommitted, maxReplayRuns)
	if err != nil || also == "" || slices.ContainsFunc(runs, func(r kt.Run) bool { return r.ID == also }) {
		return runs, err
	}
	r, err := tx.RunGet(also)
	switch {
	case errors.Is(err, kt.ErrNotFound):
		return runs, nil
	case err != nil:
		return nil, err
	}
	if r.Workflow == workflow && r.HandlerType == kt.HandlerTask {
		runs = append(runs, r)
	}
	if len(runs) > maxReplayRuns {
		sort.Slice(runs, func(i, j int) bool { return runs[i].CreatedAt > runs[j].CreatedAt })
		runs = runs[:maxReplayRuns]
	}
	return runs, nil
}

// runsSince reads the done runs of j's version committed since j read
// its own (finished at its mark or later, not as it read them), at most
// limit.
func runsSince(tx store.Tx, workflow string, j Judged, limit int) ([]kt.Run, error) {
	rs, err := tx.RunsFinishedSince(workflow, j.Version, kt.StatusCommitted, j.since, limit+len(j.seen))
	if err != nil {
		return nil, err
	}
	out := rs[:0]
	for _, r := range rs {
		if rev, ok := j.seen[r.ID]; (!ok || rev != r.Rev) && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

// handlerState is the run's handler's state as it is now.
func (x *runExec) handlerState() (json.RawMessage, error) {
	var hrow kt.Handler
	err := x.e.store.View(x.ctx, func(tx store.Tx) error {
		var err error
		hrow, err = tx.HandlerGet(x.wf.Name, x.run.Handler)
		return err
	})
	return hrow.State, err
}

// replayTask runs an item script again with done items run as if not
// done: each item must be one the ledger has, each write the one it
// recorded (enterItemDry, itemMutationDry).
func (x *runExec) replayTask() error {
	state, err := x.handlerState()
	if err != nil {
		return err
	}
	h := x.host(phaseTask)
	h.task = &taskState{}
	_, err = x.invoke(h, state)
	return err
}

// replayProducer runs a producer again: every input it registers and
// every event it publishes must be one the store has.
func (x *runExec) replayProducer() error {
	state, err := x.handlerState()
	if err != nil {
		return err
	}
	h := x.host(phaseProducer)
	h.allowPublish, h.inputByKey, h.knownInputs = set(x.prog.Decl.Producers[x.run.Handler].Publishes), map[string]string{}, map[string]bool{}
	_, err = x.invoke(h, state)
	if verr := x.e.store.View(x.ctx, func(tx store.Tx) error {
		keys := make([]string, 0, len(h.inputByKey))
		for k := range h.inputByKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, err := tx.InputGetByKey(x.wf.Name, k); errors.Is(err, kt.ErrNotFound) {
				x.noteIDDiff("input "+k, "not registered", "a new input (its id changed?)")
			} else if err != nil {
				return err
			}
		}
		for _, p := range h.publishes {
			if _, err := tx.EventGet(x.wf.Name, p.Topic, p.MessageID); errors.Is(err, kt.ErrNotFound) {
				x.noteIDDiff("event "+p.Topic+"/"+p.MessageID, "not published", "a new event, done again by its consumer (its messageId changed?)")
			} else if err != nil {
				return err
			}
		}
		return nil
	}); verr != nil {
		return verr
	}
	return err
}

// replayConsumer runs mutate again on the run's recorded selection: it
// must make the write the ledger recorded (tool, method, target, identity
// and payload), or none when there was none.
func (x *runExec) replayConsumer() error {
	pr, err := DecodePrepareResult(x.run.PrepareResult)
	if err != nil || len(pr.Reservations) == 0 || !x.prog.Decl.Consumers[x.run.Handler].Mutate {
		return nil // it selected nothing: mutate did not run
	}
	var had kt.Mutation
	hadOne := true
	if err := x.e.store.View(x.ctx, func(tx store.Tx) error {
		var err error
		had, err = tx.MutationByRun(x.run.ID)
		if errors.Is(err, kt.ErrNotFound) {
			hadOne = false
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	hm := x.host(phaseMutate)
	hm.decl = x.declView()
	if _, err := x.invoke(hm, preparedArg(x.run.PrepareResult)); err != nil && !errors.Is(err, script.ErrSuspend) {
		return err
	}
	what := "write of " + describeSelection(pr)
	switch call := hm.captured; {
	case call == nil && !hadOne:
		return nil
	case call == nil:
		x.noteDiff(what, had.Tool+"."+had.Method+" "+had.Target, "no write")
	case !hadOne:
		m, err := x.reg.Method(call.Tool, call.Method)
		if err != nil {
			return err
		}
		x.noteDiff(what, "no write", call.Tool+"."+m.Name+" "+targetOf(m, call.Tool, call.Args))
	default:
		m, err := x.reg.Method(call.Tool, call.Method)
		if err != nil {
			return err
		}
		if d := compareWrite(had, call.Tool, m, call.Args); d != "" && sameWriteOtherKey(had, call.Tool, m, call.Args) {
			// Written again under a new idempotency key: done work under
			// another identity or subkey, as an item under another id.
			x.noteIDDiff(what, had.Tool+"."+had.Method+" "+had.Target, d)
		} else if d != "" {
			x.noteDiff(what, had.Tool+"."+had.Method+" "+had.Target, d)
		}
	}
	return nil
}

// describeSelection names what a consumer run selected.
func describeSelection(pr PrepareResult) string {
	var ids []string
	for _, r := range pr.Reservations {
		for _, id := range r.IDs {
			ids = append(ids, r.Topic+"/"+id)
		}
	}
	return strings.Join(ids, ", ")
}

// compareWrite says how a write differs from a recorded one ("" for the
// same): tool and method, target, identity params and subkey, payload hash.
func compareWrite(had kt.Mutation, tool string, m *connector.Method, args map[string]any) string {
	target := targetOf(m, tool, args)
	if tool != had.Tool || m.Name != had.Method {
		return fmt.Sprintf("%s.%s %s (another tool or method)", tool, m.Name, target)
	}
	if target != had.Target {
		return fmt.Sprintf("%s.%s %s (another target)", tool, m.Name, target)
	}
	var hadArgs map[string]any
	if err := json.Unmarshal(had.Params, &hadArgs); err != nil {
		return "a write keep cannot compare with the recorded one"
	}
	hi, hp := m.Split(hadArgs)
	ni, np := m.Split(args)
	hs, _ := hadArgs["subkey"].(string)
	ns, _ := args["subkey"].(string)
	if hashOf(hi, hs) != hashOf(ni, ns) {
		return fmt.Sprintf("%s.%s %s with another identity or subkey (written again under a new idempotency key)", tool, m.Name, target)
	}
	_ = hp
	if PayloadHash(np) != had.PayloadHash {
		return fmt.Sprintf("%s.%s %s with another payload", tool, m.Name, target)
	}
	return ""
}

// sameWriteOtherKey: the same tool, method and target as a recorded write,
// under another identity or subkey — done work written again under a new
// idempotency key, which a minor version may not do (IDChanges).
func sameWriteOtherKey(had kt.Mutation, tool string, m *connector.Method, args map[string]any) bool {
	if tool != had.Tool || m.Name != had.Method || targetOf(m, tool, args) != had.Target {
		return false
	}
	var hadArgs map[string]any
	if json.Unmarshal(had.Params, &hadArgs) != nil {
		return false
	}
	hi, _ := m.Split(hadArgs)
	ni, _ := m.Split(args)
	hs, _ := hadArgs["subkey"].(string)
	ns, _ := args["subkey"].(string)
	return hashOf(hi, hs) != hashOf(ni, ns)
}

// Judged is what a judgement of ids (IDChanges, IDChangesSince) was made
// on: the version judged against and the done runs read, named by a mark
// taken under the writers' lock (doneRuns). It holds while that version
// is active and no run of it committed since (DoneSince): a deploy
// confirms both in its transaction.
type Judged struct {
	// Version is the version judged against (0: no workflow then).
	Version int64
	// since is the engine's clock when the done runs were read: a run
	// committed after has FinishedAt at since or later.
	since int64
	// seen are the runs read that finished at since or later (the same
	// millisecond), by id, with the revision read: judged already unless
	// written since (a quiet poll folded into one, issue 44).
	seen map[string]int64
}

// IDChanges replays the done work of wf's active version on source and
// keeps the differences of ids (items, events, inputs): what a deploy
// must not do silently. A new workflow has none. The workflow's open run
// is replayed too (issue 39): a failed item run's items — done ones and
// the incomplete one it failed in — are work whose ids a minor version
// keeps, and a repair follows a failed run by nature. This is the one
// judgement of identity the Maintainer's (ReplayDone with the failed run)
// and keep deploy share. It returns what it judged (Judged): the version
// and the done runs read.
func (e *Engine) IDChanges(ctx context.Context, wf, source string) (Judged, []Difference, error) {
	var active int64
	open := ""
	err := e.store.View(ctx, func(tx store.Tx) error {
		w, err := tx.WorkflowGet(wf)
		if errors.Is(err, kt.ErrNotFound) {
			return nil
		}
		if err != nil && !kt.IsDamaged(err) { // a damaged files root or policy: the deploy restores it
			return err
		}
		active = w.ActiveVersion
		r, err := tx.RunOpen(wf)
		if errors.Is(err, kt.ErrNotFound) {
			return nil
		}
		if err == nil && r.Version == active {
			open = r.ID
		}
		return err
	})
	if err != nil || active == 0 {
		return Judged{}, nil, err
	}
	return e.judgeIDs(ctx, wf, source, active, replaySel{also: open})
}

// IDChangesSince judges as IDChanges only the done runs of j's version
// committed since j read its own (DoneSince names them), and returns
// what it judged: the runs judged since, added to j's.
func (e *Engine) IDChangesSince(ctx context.Context, wf, source string, j Judged) (Judged, []Difference, error) {
	if j.Version == 0 {
		return j, nil, nil
	}
	return e.judgeIDs(ctx, wf, source, j.Version, replaySel{after: &j})
}

// judgeIDs replays the done runs of version sel selects on source and
// keeps the differences of ids.
func (e *Engine) judgeIDs(ctx context.Context, wf, source string, version int64, sel replaySel) (Judged, []Difference, error) {
	rep, judged, err := e.replayBoth(ctx, wf, version, source, sel)
	if kt.IsDamaged(err) {
		// The active version's stored script is damaged (issue 44): the
		// deploy is its restore step. Its own replay cannot be made, so
		// the done work is replayed on source alone and every difference
		// of ids counts: stricter, never looser.
		rep, judged, err = e.replayDone(ctx, wf, version, source, sel)
	}
	if err != nil {
		return Judged{}, nil, err
	}
	var out []Difference
	for _, d := range rep.Differences {
		if d.IDs {
			out = append(out, d)
		}
	}
	return judged, out, nil
}

// DoneSince names, in tx, the done runs of j's version committed since j
// read its own (at most limit): the work a judgement has not replayed. A
// deploy's transaction confirms there are none; otherwise the deploy
// judges them (IDChangesSince).
func DoneSince(tx store.Tx, wf string, j Judged, limit int) ([]string, error) {
	if j.Version == 0 {
		return nil, nil
	}
	rs, err := runsSince(tx, wf, j, limit)
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s run %s", r.Handler, shortRun(r.ID)))
	}
	return out, err
}

// ListDifferences names the first ten differences.
func ListDifferences(ds []Difference) string {
	var out []string
	for i, d := range ds {
		if i == 10 {
			out = append(out, fmt.Sprintf("and %d more", len(ds)-10))
			break
		}
		out = append(out, d.String())
	}
	return strings.Join(out, "; ")
}
