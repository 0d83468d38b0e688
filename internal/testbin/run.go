package testbin

import (
	"bytes"
	"errors"
	"os/exec"
	"testing"
)

// Result is what one run of a program gave: its exit status and what it
// printed on stdout and on stderr (its resource use is the caller's cmd's
// ProcessState).
type Result struct {
	Code     int
	Out, Err string
}

// Run runs cmd to its end (its Stdout and Stderr are Run's) and returns
// its exit status and output. An exit status other than 0 is a result; a
// program that could not be started fails the test.
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return Result{Code: cmd.ProcessState.ExitCode(), Out: out.String(), Err: errb.String()}
}
