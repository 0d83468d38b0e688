package control

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// DeployAndGrant is the deploy of code that runs what it deploys (keep
// bench, tests): Deploy, granting what the version uses, the grant the
// caller's own and not a person's decision (it stays out of the decision
// log). Deploy grants only when DeployOptions.Grant says.
func DeployAndGrant(ctx context.Context, e *engine.Engine, file, source string, o DeployOptions) (kt.DeployResult, error) {
	o.Grant, o.grantBySystem = true, true
	return Deploy(ctx, e, file, source, o)
}

// DeployUnchecked deploys a script that the static analysis refuses (its
// declaration still checked: engine.CheckDeclaration), granting what it
// uses as DeployAndGrant does. For tests only: the run-time checks that
// stand behind the analysis can be tried.
func DeployUnchecked(ctx context.Context, e *engine.Engine, file, source string) (kt.DeployResult, error) {
	return Deploy(ctx, e, file, source, DeployOptions{Grant: true, grantBySystem: true, unchecked: true})
}

// DeployOptions are the choices a deploy carries (SPEC §9, ch 12 §12.6).
type DeployOptions struct {
	// Name overrides the script's declared name. Defaults to the declared one.
	Name string
	// Kind is minor (a repair, the default for an existing workflow) or major.
	Kind kt.DeployKind
	// Reprocess is what a major version does with done items: "none" (keep
	// progress), "all" (start fresh) or "KEY,KEY" (new attempts for these).
	// Required with a major version: intent changed, and keep does not guess.
	Reprocess string
	// AcceptOrphans activates a major version whose item keys change format,
	// after the person has seen which items will be orphaned.
	AcceptOrphans bool
	// FilesRoot, when set, is recorded as the folder the workflow's files
	// connector is rooted at, for keep run and keep serve alike (an
	// absolute path); empty keeps what was recorded.
	FilesRoot string
	// Grant grants what the version uses, with the deploy: the person
	// deploying allows it (keep run, keep deploy --grant).
	Grant bool
	// Test is the workflow's test file (keep test), recorded with the
	// version ("" none): keep deploy reads workflow.test.js beside the
	// script. KeepTest records the active version's instead (a repair
	// keeps the tests it must pass).
	Test     string
	KeepTest bool
	// IfActive, when not 0, deploys only while that version is still the
	// workflow's active one (checked in the deploy's transaction): a
	// repair checked against a version never replaces another one.
	IfActive int64
	// idChanges are the done items, events and inputs that would get other
	// ids on this version (Engine.IDChanges replays the active version's
	// done work on it): a minor version is refused with them, a major one
	// says how many.
	idChanges []engine.Difference
	// grantBySystem: the grant is the caller's (DeployAndGrant: keep bench, tests),
	// not a person's decision, and stays out of the decision log.
	grantBySystem bool
	// unchecked (tests only) deploys a script that the analysis refuses,
	// with the declaration's checks alone, so the run-time checks that
	// stand behind the analysis can be tried.
	unchecked bool
}

// ErrReprocessChoice is returned by a major deploy without a Reprocess choice.
var ErrReprocessChoice = &kt.ActionError{Msg: "a major version changes intent: choose what happens to the items already done — --reprocess=none (keep progress), --reprocess=all (start fresh) or --reprocess=KEY,KEY (new attempts for these items); nothing was deployed"}

// Deploy validates a script and makes it the workflow's active version,
// applying the rules of a major version (a reprocess choice, consent to
// orphaned items) and of a minor one (item keys stay frozen: ch 12 §12.9).
// It is a person's act (keep deploy, keep run, a repair the Maintainer
// deploys); what it judges of the version is the engine's: the check of
// the script (Engine.Check), the done work it would give other ids
// (Engine.IDChanges), written under the engine's writers' lock with its
// wake-up (Engine.Update).
func Deploy(ctx context.Context, e *engine.Engine, file, source string, o DeployOptions) (kt.DeployResult, error) {
	name, kind := o.Name, o.Kind
	check := e.Check
	if o.unchecked {
		check = e.CheckDeclaration
	}
	p, problems, err := check(file, source)
	if err != nil {
		return kt.DeployResult{Problems: problems}, err
	}
	if name == "" {
		name = p.Decl.WorkflowName()
	} else if np := script.NameProblem(name); np != "" {
		return kt.DeployResult{Problems: problems}, &kt.ActionError{Code: kt.CodeBadInput, Msg: np + "; nothing was deployed"}
	}
	if o.Reprocess != "" && kind != kt.DeployMajor {
		return kt.DeployResult{Problems: problems}, kt.Refuse("--reprocess goes with --major: a minor version keeps all progress; nothing was deployed")
	}
	var res kt.DeployResult
	// The ids of done work are judged against the version active then,
	// outside the transaction (the replay runs the sandbox); the
	// transaction confirms that version is still the active one and that
	// no run of it committed since. Another deploy that overtook this one
	// has its version judged instead, runs committed meanwhile are judged
	// alone, up to deployJudgings times (issue 41).
	judged, changes, err := e.IDChanges(ctx, name, source)
	busy := false // the last judgings were overtaken by runs alone
	for judging := 1; ; judging++ {
		res = kt.DeployResult{Workflow: name, Problems: problems}
		if err != nil {
			return res, err
		}
		o.idChanges = changes
		now, overtaken := e.Now().UnixMilli(), ""
		err = e.Update(ctx, name, func(tx store.Tx) error {
			d := deployment{e: e, ctx: ctx, tx: tx, file: file, source: source, prog: p, o: o, now: now, res: &res, judged: judged, overtaken: &overtaken, busy: busy && judging >= deployJudgings}
			return d.write()
		})
		meanwhile := errors.Is(err, errDoneMeanwhile)
		if !meanwhile && !errors.Is(err, errOvertaken) {
			return res, deployError(name, err)
		}
		busy = meanwhile
		if judging >= deployJudgings && !meanwhile {
			return res, &kt.ActionError{Code: kt.CodeNotApplicable, Msg: fmt.Sprintf("this deploy was judged %d times and overtaken each time (the last: %s); nothing was deployed: deploy again (it is judged against the version active then and the work done then)", judging, overtaken)}
		}
		if meanwhile {
			var more []engine.Difference
			judged, more, err = e.IDChangesSince(ctx, name, source, judged)
			changes = append(changes, more...)
		} else {
			judged, changes, err = e.IDChanges(ctx, name, source)
		}
	}
}

// deployJudgings bounds how often a deploy overtaken is judged again
// before it is refused. Each overtaking is another deploy's commit of
// another version, or runs of the judged version committed while the
// runs before them were judged (only those are judged again, so each
// judging is shorter than the one before): a deploy is refused only when
// another version was deployed that many times in a row while it was
// judged, and no deploy waits forever behind a stream of others. A
// workflow that keeps working commits runs during every judging, however
// short (webhook deliveries arriving without pause): after as many
// judgings of the runs committed meanwhile, the deploy is stored, and its
// warnings name the runs of the last few milliseconds that were not
// replayed — refusing would leave a busy workflow with no way to take a
// fix, and every run before them was judged.
const deployJudgings = 10

// errOvertaken is a deploy's transaction finding another version active
// than the one the deploy was judged against (deployment.judged); the
// deployment says which (deployment.overtaken). errDoneMeanwhile is its
// finding runs of that version committed since they were read (the
// deployment names them).
var (
	errOvertaken     = errors.New("deploy overtaken by another deploy")
	errDoneMeanwhile = errors.New("deploy overtaken by runs committed since its judging")
)

// deployError is a deploy's answer for what its transaction returned: a
// refusal as it is, another error named with the workflow.
func deployError(name string, err error) error {
	if err != nil {
		var ae *kt.ActionError
		if errors.As(err, &ae) {
			return err
		}
		return fmt.Errorf("deploy %s: %w", name, err)
	}
	return nil
}

// deployment is one deploy inside its transaction: what each of its
// steps reads, and the result they fill (res).
type deployment struct {
	e            *engine.Engine
	ctx          context.Context
	tx           store.Tx
	file, source string
	prog         *script.Program
	o            DeployOptions
	now          int64
	res          *kt.DeployResult
	// judged is what the ids of done work were judged on: the version
	// (Engine.IDChanges; 0: no workflow then) and its done runs read;
	// overtaken is set to what became active instead, with errOvertaken,
	// or to the runs committed since, with errDoneMeanwhile.
	judged    engine.Judged
	overtaken *string
	// busy: the deploy was overtaken by runs committed meanwhile at each
	// of its deployJudgings judgings; the runs committed since its last
	// are named in its warnings instead of judged (deployJudgings).
	busy bool
}

// write records a deploy in tx: the workflow, its new version (or
// nothing new when the script is the active one's and no kind was asked),
// the grants the deploy makes, the events a dropped consumer leaves
// waiting (res.Stranded) and the handlers of the new declaration.
func (d *deployment) write() error {
	e, tx, file, source, p, o, now, res := d.e, d.tx, d.file, d.source, d.prog, d.o, d.now, d.res
	name, kind := res.Workflow, o.Kind
	wf, err := tx.WorkflowGet(name)
	isNew := errors.Is(err, kt.ErrNotFound)
	if kt.IsDamaged(err) {
		// Its recorded files root and policy are damaged (issue 44): this
		// deploy records them afresh, taking nothing of the damaged row.
		wf.FilesRoot, wf.Policy, wf.UpdatedAt = o.FilesRoot, e.PolicyRecord(), now
		if err = tx.WorkflowPut(wf); err != nil {
			return err
		}
	}
	if err != nil && !isNew {
		return err
	}
	if err := d.confirm(wf.ActiveVersion); err != nil {
		return err
	}
	v := kt.Version{Workflow: name, Major: 1, Minor: 0, Script: source, File: file, Test: o.Test, CreatedAt: now}
	if isNew {
		wf = kt.Workflow{Name: name, CreatedAt: now}
	} else {
		cur, err := tx.VersionGet(name, wf.ActiveVersion)
		// A damaged active version (issue 44) is restored by this deploy:
		// a new version from the file, its number after the damaged one's.
		damaged := kt.IsDamaged(err)
		if err != nil && (!damaged || o.KeepTest) {
			return err
		}
		if o.IfActive != 0 && wf.ActiveVersion != o.IfActive {
			return &kt.ActionError{Code: kt.CodeNotApplicable, Msg: fmt.Sprintf("version %s of %s was deployed since the repair was checked against another version; nothing was deployed", cur.Label(), name)}
		}
		if o.KeepTest {
			v.Test = cur.Test
		}
		// A changed test is a new version: the tests a repair must pass
		// are the ones recorded with the version it repairs.
		if !damaged && cur.Script == source && cur.Test == v.Test && kind == "" {
			res.Version, res.Unchanged = cur, true
			if err := d.grant(); err != nil {
				return err
			}
			return d.recordDeployed(wf)
		}
		if err := nextVersion(tx, cur, &v, o, res); err != nil {
			return err
		}
		if damaged {
			res.Warnings = append(res.Warnings, fmt.Sprintf("version %s's stored script was damaged storage; version %s replaces it (which topics the damaged one read is not known, so its waiting events were not checked for a consumer)", cur.Label(), v.Label()))
		} else if res.Stranded, err = strandedBy(tx, name, cur, p.Decl, v.Label()); err != nil {
			return err
		}
	}
	if err := tx.VersionInsert(&v); err != nil {
		return err
	}
	wf.ActiveVersion, wf.UpdatedAt = v.ID, now
	if o.FilesRoot != "" {
		wf.FilesRoot = o.FilesRoot
	}
	if pol := e.PolicyRecord(); pol != "" {
		wf.Policy = pol
	}
	if err := tx.WorkflowPut(wf); err != nil {
		return err
	}
	res.Version, res.FilesRoot = v, wf.FilesRoot
	if err := d.grant(); err != nil {
		return err
	}
	if err := syncHandlers(tx, name, p.Decl, now); err != nil {
		return err
	}
	return d.reprocess()
}

// confirm checks in the transaction what the deploy was judged on before
// it writes: the active version (active; 0: no workflow) is still the one
// the ids of done work were judged against (errOvertaken otherwise), no
// run of it committed since its done runs were read (errDoneMeanwhile
// otherwise: the deploy judges those), and the items a major version's
// reprocess choice names exist.
func (d *deployment) confirm(active int64) error {
	if active != d.judged.Version {
		*d.overtaken = fmt.Sprintf("%s of %s was deployed by another deploy while this one was judged against %s", d.label(active), d.res.Workflow, d.label(d.judged.Version))
		return errOvertaken
	}
	runs, err := engine.DoneSince(d.tx, d.res.Workflow, d.judged, 3)
	if err != nil {
		return err
	}
	if len(runs) > 0 && d.busy {
		d.res.Warnings = append(d.res.Warnings, fmt.Sprintf("%s of %s kept committing work while this deploy was judged (%d judgings): what it committed during the last (%s) was not replayed on the new version; every run before was, without a change of ids", d.label(active), d.res.Workflow, deployJudgings, strings.Join(runs, ", ")))
	} else if len(runs) > 0 {
		*d.overtaken = fmt.Sprintf("%s of %s committed done work (%s) while this one was judged on its done work", d.label(active), d.res.Workflow, strings.Join(runs, ", "))
		return errDoneMeanwhile
	}
	if d.o.Kind == kt.DeployMajor {
		return checkReprocessKeys(d.tx, d.res.Workflow, d.o.Reprocess)
	}
	return nil
}

// label names a version of the deployment's workflow by its number, read
// in the transaction ("no version": the workflow was not deployed yet).
func (d *deployment) label(id int64) string {
	if id == 0 {
		return "no version (its first deploy)"
	}
	v, err := d.tx.VersionGet(d.res.Workflow, id)
	if err != nil {
		return fmt.Sprintf("its version of id %d (unreadable: %v)", id, err)
	}
	return "version " + v.Label()
}

// reprocess applies a major version's reprocess choice in the deploy's
// transaction: a choice it cannot apply deploys nothing.
func (d *deployment) reprocess() (err error) {
	if d.o.Kind == kt.DeployMajor {
		d.res.Reprocessed, err = ReprocessAfterMajor(d.tx, d.res.Workflow, d.o.Reprocess, d.now)
	}
	return err
}

// grant grants what the version uses when the deploy says so, and
// tells what still waits for a grant otherwise (DeployResult.Ungranted).
func (d *deployment) grant() error {
	ctx, tx, name, source, o, now, res := d.ctx, d.tx, d.res.Workflow, d.source, d.o, d.now, d.res
	gs, err := tx.GrantList(name)
	if err != nil {
		return err
	}
	var missing []string
	for _, u := range engine.Uses(source) {
		if !engine.GrantedIn(gs, u) {
			missing = append(missing, u)
		}
	}
	res.Unused = engine.Unused(gs, source)
	if o.Grant {
		res.Granted = missing
		if o.grantBySystem {
			return transition.AddGrants(ctx, tx, name, missing, now)
		}
		return transition.GrantAll(ctx, tx, name, missing, now)
	}
	res.Ungranted = missing
	return nil
}

// recordDeployed records, for a version deployed again unchanged, the
// folder of its files connector and the policy it is deployed under.
func (d *deployment) recordDeployed(wf kt.Workflow) error {
	e, tx, root, res := d.e, d.tx, d.o.FilesRoot, d.res
	res.FilesRoot = wf.FilesRoot
	pol := e.PolicyRecord()
	if (root == "" || root == wf.FilesRoot) && (pol == "" || pol == wf.Policy) {
		return nil
	}
	if root != "" {
		wf.FilesRoot = root
	}
	if pol != "" {
		wf.Policy = pol
	}
	wf.UpdatedAt = e.Now().UnixMilli()
	res.FilesRoot = wf.FilesRoot
	return tx.WorkflowPut(wf)
}
