// Package dts writes keep.d.ts: the script API as TypeScript declarations,
// for an editor or `tsc --noEmit` over a script with `// @ts-check`. It is
// made from the same declarations as docs/scripts.md — each connector
// method's parameters and result (connector.Describe) — and from the table
// of what each phase's ctx may call (keeptype's ctxRules, which the
// engine enforces), so the types and keep's rules cannot drift apart.
package dts

import (
	"fmt"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// Header is the first line of every keep.d.ts.
const Header = "// keep.d.ts: the types of keep's script API, written by `keep types`; do not edit it, run `keep types` again."

// Render writes keep.d.ts for the connectors infos describe (every one a
// registry has: keep's own and those a keep.toml declares).
func Render(infos []connector.Info, o Options) string {
	return render(infos, infos, o)
}

// RenderFor writes keep.d.ts with only the methods of the connectors tools
// names (the ones a script calls: what a model repairing it needs to
// read); every source stays, and everything of keep's own.
func RenderFor(infos []connector.Info, tools []string, o Options) string {
	var some []connector.Info
	for _, c := range infos {
		for _, t := range tools {
			if c.Name == t {
				some = append(some, c)
				break
			}
		}
	}
	return render(infos, some, o)
}

// render declares the sources of every connector in all, and the methods
// of those in some.
func render(all, some []connector.Info, o Options) string {
	var b strings.Builder
	b.WriteString(Header + "\n")
	b.WriteString(`// Use it in a script: put the two lines
//   // @ts-check
//   /// <reference path="./keep.d.ts" />
// at its top; then an editor, or tsc --noEmit --allowJs --checkJs, says
// where a call breaks keep's rules before keep runs it.

declare namespace Keep {
`)
	b.WriteString(core)
	writeSources(&b, all)
	for _, p := range kt.CtxPhases {
		writeCtx(&b, p, some)
	}
	writeTests(&b, some, o)
	b.WriteString("}\n\n")
	writeConnectors(&b, some)
	b.WriteString(globals)
	return b.String()
}

// core is the part of the API that is keep's own, not the connectors':
// Keep.* (internal/script/prelude.js) and the shapes the engine reads
// (engine.PrepareResult, the events of peek, next's mutationResult).
const core = `  /** Declares the workflow: end the script with ` + "`export default Keep.workflow({ ... })`" + `. */
  function workflow(def: Workflow): Workflow;
  /** Marks a producer (writing the object directly works too). */
  function producer(p: Producer): Producer;
  /** Marks a consumer (writing the object directly works too). */
  function consumer(c: Consumer): Consumer;
  /** Marks an item script (writing the object directly works too). */
  function task(t: Task): Task;

  interface Workflow {
    /** letters, digits, . _ - (at most 100) */
    name: string;
    /** every topic a handler publishes or subscribes to */
    topics?: { [topic: string]: Topic };
    producers?: { [name: string]: Producer };
    consumers?: { [name: string]: Consumer };
    tasks?: { [name: string]: Task };
    /** true, or tool / tool.method names whose every call waits for a person */
    requireApproval?: boolean | string[];
    /** requests other systems push to keep: POST /hooks/WORKFLOW/NAME (keep serve --webhooks-addr) */
    webhooks?: { [name: string]: Webhook };
  }
  interface Webhook {
    publishes: string[];
    /** how each request is checked before the handler sees it; secret names a secret set with keep secret set NAME */
    verify:
      | { hmac: { header: string; prefix?: string; secret: string } }
      | { stripe: { secret: string; tolerance?: number } }
      | { slack: { secret: string; tolerance?: number } }
      | { token: { header: string; prefix?: string; secret: string } };
    /** where a delivery's id is (a retry of an accepted one changes nothing); none: the body's hash */
    dedupe?: { header: string } | { json: string };
    /** runs for each new, verified delivery; what it registers and publishes is committed before the sender gets its 2xx */
    handler(ctx: WebhookCtx, req: WebhookRequest): unknown;
  }
  /** the request a webhook's handler receives */
  interface WebhookRequest {
    method: string;
    /** header names in lower case; a repeated header's values joined by ", " */
    headers: { [name: string]: string };
    /** the first value of each query parameter */
    query: { [name: string]: string };
    /** the body parsed as JSON, or null */
    json: any;
    /** the body as text */
    body: string;
  }
  interface Topic {
    /** "api": the topic's events are posted by apps (keep publish, the event API), not by a handler */
    from?: "api";
  }
  /** an interval (` + "`30s`, `5m`, `1h`, `1d`" + `) or a cron of 5 fields */
  type Schedule = { interval: string; cron?: undefined } | { cron: string; interval?: undefined };
  interface Producer {
    publishes: string[];
    schedule: Schedule;
    /** brings things from the outside in; returns the state its next run gets */
    handler(ctx: ProducerCtx, state: any): unknown;
  }
  interface Consumer {
    subscribe: string[];
    /** the topics next may publish to */
    publishes?: string[];
    /** selects the work: which events this run takes, and the data mutate and next need */
    prepare(ctx: PrepareCtx, state: any): PrepareResult | Promise<PrepareResult>;
    /** at most one write, the last thing it does; the write's result goes to next */
    mutate?(ctx: MutateCtx, prepared: PrepareResult): unknown;
    /** publishes what follows and returns the new state */
    next?(ctx: NextCtx, prepared: PrepareResult, mutationResult: MutationResult): unknown;
  }
  interface Task {
    schedule: Schedule;
    /** runs on its schedule; every write happens inside ctx.withItem */
    run(ctx: TaskCtx, state: any): unknown;
  }
  /** what prepare returns */
  interface PrepareResult<D = any> {
    /** the events this run takes; [] means nothing to do */
    reservations?: Reservation[];
    /** anything mutate and next need (JSON, at most 1 MiB) */
    data?: D;
    /** what the run is about, for people */
    ui?: { title?: string };
    /** when to run again without new events: ms since 1970 or an ISO time */
    wakeAt?: number | string;
  }
  interface Reservation {
    topic: string;
    /** messageIds of pending events of the topic */
    ids: string[];
  }
  /** what next learns of mutate's write */
  type MutationResult = { status: "applied"; result: any } | { status: "none" } | { status: "skipped" };
  /** an event, as ctx.peek and ctx.getByIds return it */
  interface Event {
    messageId: string;
    topic: string;
    payload: any;
    attempt: number;
    createdAt: number;
  }
  /** the item withItem's handler works on */
  interface Item {
    id: string;
    title: string;
    /** done in an earlier run: do not write again */
    isDone: boolean;
    attempt: number;
  }
  /** what every phase's ctx has */
  interface BaseCtx {
    /** a line in the run's trace */
    log(...values: any[]): void;
    /** milliseconds since 1970, recorded in the trace */
    now(): number;
    /** a number in [0, 1), recorded in the trace */
    random(): number;
  }
`

// globals are what the sandbox has beside Keep: console (the prelude's,
// into the trace); no timers, no fetch, no DOM.
const globals = `/** what a consumer's prepare returns: Keep.PrepareResult, by its short name for JSDoc in a script's own functions */
type PrepareResult<D = any> = Keep.PrepareResult<D>;
declare var console: {
  log(...values: any[]): void;
  info(...values: any[]): void;
  warn(...values: any[]): void;
  error(...values: any[]): void;
  debug(...values: any[]): void;
};
`

// writeSources declares the sources ctx.registerInput takes, from the
// connectors' declarations.
func writeSources(b *strings.Builder, infos []connector.Info) {
	var alts []string
	for _, c := range infos {
		srcs := make([]string, 0, len(c.Sources))
		for s := range c.Sources {
			srcs = append(srcs, s)
		}
		sort.Strings(srcs)
		for _, s := range srcs {
			types := append([]string(nil), c.Sources[s]...)
			sort.Strings(types)
			alts = append(alts, fmt.Sprintf("{ source: %q; type: %s }", s, quoted(types)))
		}
	}
	if len(alts) == 0 {
		alts = []string{"never"}
	}
	fmt.Fprintf(b, "  /** a source a connector declares, and its types */\n  type Source =\n    | %s;\n", strings.Join(alts, "\n    | "))
	b.WriteString(`  /** an external thing that happened, as ctx.registerInput records it */
  type InputRef = Source & {
    /** its identifier in the source (a message id, a file name) */
    id: string | number;
    /** what it is, to a person (at most 500 characters) */
    title: string;
  };
`)
}

func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, " | ")
}

// ctxName is the interface of a phase's ctx: ProducerCtx, PrepareCtx, …
func ctxName(p kt.CtxPhase) string {
	s := string(p)
	return strings.ToUpper(s[:1]) + s[1:] + "Ctx"
}

// writeCtx declares one phase's ctx: the connector methods of the kinds
// the phase may call and the calls of keep's own it may make, as
// keeptype's table says.
func writeCtx(b *strings.Builder, p kt.CtxPhase, infos []connector.Info) {
	fmt.Fprintf(b, "  /** ctx in %s */\n  interface %s extends BaseCtx {\n", kt.CtxPhaseTitle(p), ctxName(p))
	for _, c := range infos {
		var ms []string
		for _, m := range c.Methods {
			ms = append(ms, methodSigs(p, c.Name, m)...)
		}
		if len(ms) > 0 {
			fmt.Fprintf(b, "    %s: {\n%s    };\n", c.Name, strings.Join(ms, ""))
		}
	}
	if kt.CtxAllows(p, kt.CallRegisterInput) {
		b.WriteString("    /** records an external thing that happened; returns its input id (the same for the same source, type and id) */\n    registerInput(input: InputRef): string;\n")
	}
	if kt.CtxAllows(p, kt.CallPublish) {
		// The event's ids by phase, as engine.eventIDs checks them: a
		// producer's event belongs to an input it registered; next's are
		// linked to the reserved events' inputs and need a stable id.
		ev := "{ messageId: string | number; payload?: any }"
		if p == kt.CtxProducer || p == kt.CtxWebhook {
			ev = "{ inputId: string; messageId?: string | number; payload?: any }"
		}
		fmt.Fprintf(b, "    /** an event for the consumers of the topic(s), written when the run commits */\n    publish(topics: string | string[], event: %s): Promise<void>;\n", ev)
	}
	if kt.CtxAllows(p, kt.CallEvents) {
		b.WriteString("    /** pending, unreserved events of a subscribed topic, oldest first */\n    peek(topic: string, opts?: { limit?: number }): Promise<Event[]>;\n")
		b.WriteString("    /** those events of a subscribed topic, whatever their status (missing ones left out) */\n    getByIds(topic: string, ids: string[]): Promise<Event[]>;\n")
	}
	if kt.CtxAllows(p, kt.CallWithItem) {
		fmt.Fprintf(b, "    /** works on one item: every write happens in its handler, through the ledger */\n    withItem(id: string, title: string, handler: (ctx: %s) => unknown): Promise<void>;\n", ctxName(kt.CtxItem))
	}
	if p == kt.CtxItem {
		b.WriteString("    readonly item: Item;\n")
	}
	b.WriteString("  }\n")
}

// methodSigs are a method's signatures in phase p: none when the phase may
// make none of its calls; for a method whose kind depends on the call,
// the calls the phase may make (KindArgs). A consumer's write gives mutate
// no result: it is sent after mutate returns, and next receives it.
func methodSigs(p kt.CtxPhase, tool string, m connector.MethodInfo) []string {
	ns := "connector." + tool + "."
	args, result := ns+typeName(m.Name, "Args"), ns+typeName(m.Name, "Result")
	kinds := []connector.Kind{connector.Kind(m.Kind)}
	if len(m.KindArgs) > 0 {
		kinds = nil
		for _, k := range []connector.Kind{connector.KindRead, connector.KindReadByID, connector.KindMutate} {
			if m.KindArgs[k] != "" {
				kinds = append(kinds, k)
			}
		}
	}
	byResult := map[string][]string{}
	var order []string
	for _, k := range kinds {
		if !kt.CtxAllows(p, kt.CtxCall(k)) {
			continue
		}
		r := "Promise<" + result + ">"
		if k == connector.KindMutate && p == kt.CtxMutate {
			r = "Promise<void>"
		}
		if _, ok := byResult[r]; !ok {
			order = append(order, r)
		}
		byResult[r] = append(byResult[r], m.KindArgs[k])
	}
	opt := "?"
	for _, prm := range m.Params {
		if prm.Required {
			opt = ""
		}
	}
	var out []string
	for _, r := range order {
		a := args
		if parts := byResult[r]; len(m.KindArgs) > 0 && len(parts) < len(kinds) || len(order) > 1 {
			a += " & (" + strings.Join(parts, " | ") + ")"
		}
		out = append(out, fmt.Sprintf("      /** %s */\n      %s(args%s: %s): %s;\n", comment(m.Summary), m.Name, opt, a, r))
	}
	return out
}

// writeConnectors declares each method's arguments and result, once, in
// Keep.connector.TOOL.
func writeConnectors(b *strings.Builder, infos []connector.Info) {
	b.WriteString("/** each connector method's arguments and result */\ndeclare namespace Keep.connector {\n")
	for _, c := range infos {
		if len(c.Methods) == 0 {
			continue
		}
		fmt.Fprintf(b, "  /** %s */\n  namespace %s {\n", comment(c.Doc), c.Name)
		for _, m := range c.Methods {
			fmt.Fprintf(b, "    /** the arguments of ctx.%s.%s */\n    interface %s {\n", c.Name, m.Name, typeName(m.Name, "Args"))
			for _, p := range m.Params {
				opt := "?"
				if p.Required {
					opt = ""
				}
				fmt.Fprintf(b, "      /** %s */\n      %s%s: %s;\n", comment(p.Doc), p.Name, opt, p.TSType())
			}
			fmt.Fprintf(b, "    }\n    /** %s */\n    type %s = %s;\n", comment(m.Result), typeName(m.Name, "Result"), m.ResultTS)
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n\n")
}

// typeName is a method's type: list → ListArgs.
func typeName(method, suffix string) string {
	return strings.ToUpper(method[:1]) + method[1:] + suffix
}

// comment makes text safe inside a /** */ comment, on one line.
func comment(s string) string {
	s = strings.ReplaceAll(s, "*/", "* /")
	return strings.Join(strings.Fields(s), " ")
}
