package dts

import (
	"fmt"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

func statusNames[S ~string](ss []S) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// Options are what keep.d.ts declares beside the connectors and ctx.
type Options struct {
	// Faults are the faults a test file may name (keep test's
	// testrun.FaultNames, handed in by who wires it); none types a fault
	// as any string.
	Faults []string
}

// testCore declares Keep.test, a test file's object (docs/scripts.md,
// "Testing a workflow"; read by internal/testrun).
const testCore = `  /** A workflow's tests, run by keep test FILE: end a test file with export default Keep.test({ workflow: "./workflow.js", cases: { ... } }). */
  function test(t: Test): Test;
  interface Test {
    /** the workflow script, relative to the test file */
    workflow: string;
    cases: { [name: string]: TestCase };
  }
  interface TestCase {
    /** what each call answers: the first entry whose args all equal the call's (no args: any call) */
    answers?: TestAnswers;
    /** the next times matching calls fail so instead, as a real service's would */
    faults?: TestFaults;
    /** events posted to topics open to keep's event API ({ from: "api" }), as keep publish does, before the workflow runs */
    events?: { [topic: string]: Array<{ id: string; title: string; payload?: any }> };
    /** requests to the workflow's webhooks, signed as each one's verify says, delivered as keep serve does, after the events */
    webhooks?: { [webhook: string]: Array<{ headers?: { [name: string]: string }; query?: { [name: string]: string }; json?: any; body?: string }> };
    /** a person's decisions, in order, each on the blocked run whose card says its text, once the workflow is idle */
    decide?: Array<{ card: string; action: "skip" | "try-again" | "didnt-happen" | "approve" | "reprocess" }>;
    /** checked once the workflow is idle */
    expect: TestExpect;
  }
  interface TestExpect {
    /** every write made, in order (one sent twice shows twice) */
    writes?: Array<{ tool: WriteMethod; target?: string; payload?: { [param: string]: any } }>;
    inputs?: Array<{ title: string; status?: TestItemStatus }>;
    items?: Array<{ title: string; status?: TestItemStatus }>;
    /** how many runs end in each status named */
    runs?: { [status in TestRunStatus]?: number };
    /** one text per blocked run, found in its card; none: nothing may be blocked */
    blocked?: string[];
  }
  /** a test's answer: any part of what the method returns */
  type DeepPartial<T> = T extends (infer U)[] ? DeepPartial<U>[] : T extends object ? { [K in keyof T]?: DeepPartial<T[K]> } : T;
`

// writeTests declares what a test may say per connector method: the
// methods' answers and faults by "tool.method", the writes it expects,
// the faults keep test knows.
func writeTests(b *strings.Builder, infos []connector.Info, o Options) {
	b.WriteString(testCore)
	fault := "string"
	if len(o.Faults) > 0 {
		fault = quoted(o.Faults)
	}
	fmt.Fprintf(b, "  /** a fault keep test knows */\n  type TestFault = %s;\n", fault)
	fmt.Fprintf(b, "  /** an input's or item's status */\n  type TestItemStatus = %s;\n", quoted(statusNames(kt.ItemStatuses)))
	fmt.Fprintf(b, "  /** a run's status */\n  type TestRunStatus = %s;\n", quoted(statusNames(kt.RunStatuses)))
	var answers, faults, writes []string
	for _, c := range infos {
		for _, m := range c.Methods {
			name := c.Name + "." + m.Name
			ns := "connector." + c.Name + "."
			args, result := ns+typeName(m.Name, "Args"), ns+typeName(m.Name, "Result")
			answers = append(answers, fmt.Sprintf("    %q?: Array<{ args?: Partial<%s>; answer: DeepPartial<%s> }>;\n", name, args, result))
			faults = append(faults, fmt.Sprintf("    %q?: Array<{ args?: Partial<%s>; fault: TestFault; times?: number; retryAfter?: number }>;\n", name, args))
			if connector.Kind(m.Kind) == connector.KindMutate || m.KindArgs[connector.KindMutate] != "" {
				writes = append(writes, fmt.Sprintf("%q", name))
			}
		}
	}
	if len(writes) == 0 {
		writes = []string{"never"}
	}
	fmt.Fprintf(b, "  interface TestAnswers {\n%s  }\n  interface TestFaults {\n%s  }\n", strings.Join(answers, ""), strings.Join(faults, ""))
	fmt.Fprintf(b, "  /** a method that writes, as a test's expect.writes names it */\n  type WriteMethod = %s;\n", strings.Join(writes, " | "))
}
