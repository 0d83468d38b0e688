package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apiclient"
	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/inproc"
	kt "github.com/keep-run/keep/internal/keeptype"
)

func (a *app) validateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "validate FILE",
		Short: "check a workflow script without deploying it (exit 2 on errors)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			cfg, err := config.Load(a.config())
			if err != nil {
				return err
			}
			name, problems, err := validateFile(cfg, file)
			if a.jsonOut {
				// Always one JSON document, whatever went wrong (issue 12).
				type problem struct {
					Severity string `json:"severity"`
					Handler  string `json:"handler,omitempty"`
					Topic    string `json:"topic,omitempty"`
					Line     int    `json:"line,omitempty"`
					Message  string `json:"message"`
				}
				out := []problem{}
				for _, pr := range problems {
					out = append(out, problem{pr.Severity, pr.Handler, pr.Topic, pr.Line, pr.Message})
				}
				if err != nil && len(problems) == 0 {
					out = append(out, problem{Severity: "error", Message: err.Error()})
				}
				if perr := a.printJSON(map[string]any{"file": file, "workflow": name, "valid": err == nil && !kt.HasErrors(problems), "problems": out}); perr != nil {
					return perr
				}
			}
			if _, syntax, _ := inproc.Invalid(err); syntax {
				return &exitError{code: ExitInvalid, err: err}
			} else if err != nil {
				return err
			}
			if !a.jsonOut {
				for _, pr := range problems {
					fmt.Fprintln(a.out, pr.At(file))
				}
			}
			if kt.HasErrors(problems) {
				return &exitError{code: ExitInvalid, err: fmt.Errorf("%s is not valid", file)}
			}
			if !a.jsonOut {
				fmt.Fprintf(a.out, "%s: workflow %q is valid\n", file, name)
			}
			return nil
		},
	}
	a.addJSON(c)
	return c
}

// scriptToDeploy reads what keep run and keep deploy deploy: the kind of
// version, the script, and the files root it records.
func scriptToDeploy(file, filesRoot string, minor, major bool) (kind kt.DeployKind, src, root string, err error) {
	if kind, err = deployKind(minor, major); err != nil {
		return "", "", "", err
	}
	if src, err = readScript(file); err != nil {
		return "", "", "", err
	}
	root, err = filesRootOf(file, filesRoot)
	return kind, src, root, err
}

// filesRootOf is the one rule for a workflow's files root (issue 12): the
// folder given with --files-root, else the script's own folder; absolute,
// recorded at deploy, used by keep run and keep serve alike.
func filesRootOf(file, flag string) (string, error) {
	root := flag
	if root == "" {
		root = filepath.Dir(file)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("the files root %s: %w", root, err)
	}
	return abs, nil
}

// validateFile reads, compiles and checks a script (inproc.Validate); err
// is an unreadable file or a syntax error (which has its line).
func validateFile(cfg config.Config, file string) (name string, problems []kt.Problem, err error) {
	src, err := readScript(file)
	if err != nil {
		return "", nil, err
	}
	return inproc.Validate(cfg, file, src)
}

func deployKind(minor, major bool) (kt.DeployKind, error) {
	switch {
	case minor && major:
		return "", fmt.Errorf("choose --minor or --major, not both")
	case major:
		return kt.DeployMajor, nil
	case minor:
		return kt.DeployMinor, nil
	}
	return "", nil
}

// askReprocess asks what a major version does with done items, on a
// terminal; elsewhere the choice must be given (--reprocess).
func (a *app) askReprocess() (string, error) {
	if !onTerminal() {
		return "", daemon.ErrReprocessChoice
	}
	fmt.Fprint(a.out, "Your intent changed (a major version). What happens to the items already done?\n  none  keep progress: done items stay done\n  all   start fresh: every item gets a new attempt\n  KEY,KEY  new attempts for these items only\nchoice: ")
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	choice := strings.TrimSpace(line)
	if choice == "" {
		return "", daemon.ErrReprocessChoice
	}
	return choice, nil
}

// consentsToOrphans asks, on a terminal, whether a major version that
// leaves work behind (needs_consent: the refusal names it) is activated
// anyway: the interactive yes that stands for --accept-orphans (ch 12
// §12.6). Elsewhere the flag must be given.
func (a *app) consentsToOrphans(err error) bool {
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || apiErr.Body.Code != "needs_consent" || !onTerminal() {
		return false
	}
	fmt.Fprintf(a.out, "%s\nActivate it anyway, leaving that work behind? [y/N]: ", apiErr.Body.Message)
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	return strings.EqualFold(strings.TrimSpace(line), "y") || strings.EqualFold(strings.TrimSpace(line), "yes")
}

func (a *app) deployCmd() *cobra.Command {
	var name, reprocess, filesRoot string
	var minor, major, acceptOrphans, grant bool
	c := &cobra.Command{
		Use:   "deploy FILE",
		Short: "validate a script and make it the workflow's active version (works beside a running keep serve)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reprocess != "" && !major {
				return &exitError{code: exitUsageCode, err: errors.New("--reprocess goes with --major: a minor version keeps all progress")}
			}
			kind, src, root, err := scriptToDeploy(args[0], filesRoot, minor, major)
			if err != nil {
				return err
			}
			test, err := a.testBeside(args[0])
			if err != nil {
				return err
			}
			if major && reprocess == "" {
				if reprocess, err = a.askReprocess(); err != nil {
					return err
				}
			}
			// Beside a running keep serve the deploy goes to its API (one
			// engine decides, open pages update at once); else to the same
			// API in this process, validating with this folder's config.
			c, err := a.apiFor(cmd.Context(), inproc.APIOptions{ConfigFile: a.config(), FilesRoot: root})
			if err != nil {
				return err
			}
			defer c.Close()
			req := apitype.DeployRequest{Script: src, File: args[0], Name: name, Kind: string(kind), Reprocess: reprocess, AcceptOrphans: acceptOrphans, FilesRoot: root, Grant: grant, Test: test}
			reply, err := c.Deploy(cmd.Context(), req)
			if a.consentsToOrphans(err) {
				req.AcceptOrphans = true
				reply, err = c.Deploy(cmd.Context(), req)
			}
			if err == nil && c.local != nil {
				// The workflow runs under the config it was deployed with
				// (beside keep serve, under keep serve's, recorded by it).
				_, err = a.runConfig()
			}
			return a.deployReply(args[0], reply, c.local == nil, err)
		},
	}
	c.Flags().StringVar(&name, "name", "", "workflow name (default: the script's name)")
	c.Flags().BoolVar(&minor, "minor", false, "a repair: keep all state; a run failed:logic retries on this version")
	c.Flags().BoolVar(&major, "major", false, "an intent change")
	c.Flags().StringVar(&reprocess, "reprocess", "", "with --major (required): none (keep progress), all (start fresh), or KEY,KEY (new attempts for these items)")
	c.Flags().BoolVar(&grant, "grant", false, "grant what the version uses, as far as its script names it (http.request METHOD HOST, sql.query DB, connector methods, input sources): you allow it")
	c.Flags().BoolVar(&acceptOrphans, "accept-orphans", false, "with --major: activate even though done or incomplete work gets other ids (item ids, messageIds, input ids) and old items become orphaned")
	c.Flags().StringVar(&filesRoot, "files-root", "", "folder the workflow's files connector reads and writes, for keep run and keep serve alike (default: the script's folder)")
	a.addJSON(c)
	return c
}

// deployReply prints what keep's API answered to a deploy (remote: keep
// serve's).
func (a *app) deployReply(file string, reply apitype.DeployReply, remote bool, err error) error {
	var apiErr *apiclient.Error
	if errors.As(err, &apiErr) && apiErr.Body.Code == "invalid_script" {
		for _, p := range apiErr.Body.Problems {
			fmt.Fprintln(a.errOut, p.At(file))
		}
		if len(apiErr.Body.Problems) == 0 {
			fmt.Fprintf(a.errOut, "%s\n", apiErr.Body.Message)
		}
		return &exitError{code: ExitInvalid, err: fmt.Errorf("%s is not valid; nothing was deployed", file)}
	}
	if err != nil {
		return err
	}
	for _, w := range reply.Warnings {
		fmt.Fprintf(a.errOut, "warning: %s\n", w)
	}
	if a.jsonOut {
		return a.printJSON(reply)
	}
	if reply.Reprocessed > 0 {
		fmt.Fprintf(a.out, "%d items start a new attempt\n", reply.Reprocessed)
	}
	if reply.Unchanged {
		fmt.Fprintf(a.out, "%s is already active as version %s; nothing deployed\n", reply.Workflow, reply.Version)
	} else {
		through := ""
		if remote {
			through = " (through keep serve)"
		}
		fmt.Fprintf(a.out, "deployed %s version %s%s\n", reply.Workflow, reply.Version, through)
	}
	fmt.Fprintf(a.out, "its files connector reads and writes %s (keep run and keep serve alike)\n", reply.FilesRoot)
	a.printGrants(reply.Workflow, reply.Granted, reply.Ungranted, reply.Unused)
	for _, x := range reply.Stranded {
		fmt.Fprintf(a.out, "waiting: %s\n", x.Message)
	}
	return nil
}

// printGrants says what a deploy granted, and what waits for a grant.
func (a *app) printGrants(wf string, granted, ungranted, unused []string) {
	if len(granted) > 0 {
		fmt.Fprintf(a.out, "granted: %s\n", strings.Join(granted, ", "))
	}
	if len(ungranted) > 0 {
		fmt.Fprintf(a.out, "not yet granted: %s — a run that calls them waits for you; grant them with keep grant %s (or --grant)\n", strings.Join(ungranted, ", "), wf)
	}
	for _, u := range unused {
		fmt.Fprintf(a.out, "no longer used by this version, still granted: %s — revoke it: keep grant %s --revoke '%s'\n", u, wf, u)
	}
}

func (a *app) deployError(file string, err error) error {
	problems, syntax, invalid := inproc.Invalid(err)
	switch {
	case syntax:
		return &exitError{code: ExitInvalid, err: err}
	case invalid:
		for _, p := range problems {
			fmt.Fprintln(a.errOut, p.At(file))
		}
		return &exitError{code: ExitInvalid, err: fmt.Errorf("%s is not valid; nothing was deployed", file)}
	}
	return err
}

func (a *app) printWarnings(file string, ps []kt.Problem) {
	for _, p := range ps {
		if p.Severity == "warning" {
			fmt.Fprintln(a.errOut, p.At(file))
		}
	}
}
