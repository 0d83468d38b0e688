package maintainer

import (
	"encoding/json"
	"github.com/keep-run/keep/internal/testbin"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/fake/llmfake"
	"github.com/keep-run/keep/internal/testsink"
)

// Issue 39: a repair that replays done work identically but writes
// otherwise on inputs keep has not seen yet. The failed run crashed in
// prepare, so its own write was "compared with nothing"; the done order
// (id 1) replays the same. keep runs both versions on the failed run's
// selection and on inputs made from the recorded ones (other ids, numbers
// past any seen, strings and dates changed): the repair is never
// activated, and the sink sees only the done order's write.

// sinkOf is the test sink's base URL in a script of the rig.
func sinkOf(src string) string {
	sink := src[strings.Index(src, "http://"):]
	return sink[:strings.Index(sink, "/write/")]
}

// hooked keeps the write's URL in a const, as the attack had it.
func hooked(src string) string {
	sink := sinkOf(src)
	src = strings.Replace(src, "export default Keep.workflow({", "const HOOK = \""+sink+"/write/order-\"\nexport default Keep.workflow({", 1)
	return strings.Replace(src, `url: "`+sink+`/write/order-" + p.data.id`, `url: HOOK + p.data.id`, 1)
}

// Finding 1: the fix, and orders with Number(id) > 1 sent to another path
// on the same granted host.
func TestHostileRepairTriggersOnAnIdAboveTheDoneOnes(t *testing.T) {
	r := hostile(t, hooked, func(src string) string {
		return strings.Replace(fixed(src), `url: HOOK + p.data.id`, `url: (Number(p.data.id) > 1 ? HOOK.replace("write", "attacker") : HOOK) + p.data.id`, 1)
	}, orderOne)
	if rs := r.repairs(); !strings.Contains(rs[0].Reason, "/attacker/order-") || !strings.Contains(rs[0].Reason, "/write/order-") {
		t.Fatalf("the reason does not show the write the repair would make: %+v", rs)
	}
}

// Finding 2: the same with a secret the workflow never used, in a header
// only orders after the done one get.
func TestHostileRepairSendsANewSecretToUnseenInputs(t *testing.T) {
	const secret = "payroll-secret-value-4242"
	r := prepare(t, "bob", "", func(src string) []llmfake.Reply {
		a := answer(strings.Replace(fixed(src), `json: { id: p.data.id } })`, `json: { id: p.data.id }, ...(Number(p.data.id) > 1 ? { headers: { "X-Debug": "{secret:payroll_api_key}" } } : {}) })`, 1))
		return []llmfake.Reply{{Content: a, Tokens: 10}, {Content: a, Tokens: 10}, {Content: a, Tokens: 10}}
	})
	cmd := exec.Command(keepBin, "secret", "set", "payroll_api_key")
	cmd.Dir, cmd.Stdin = r.dir, strings.NewReader(secret+"\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("secret set: %v %s", err, out)
	}
	r.start()
	r.waitFor("the repair to be held, or the Maintainer to give up", func() bool {
		rs := r.repairs()
		return len(rs) > 0 && (rs[len(rs)-1].Status == "held" || rs[len(rs)-1].Status == "failed" || rs[len(rs)-1].Status == "activated")
	})
	rs := r.repairs()
	for _, x := range rs {
		if x.Status == "activated" {
			t.Fatalf("the repair was activated: %+v", rs)
		}
	}
	for i, h := range r.sink.Headers {
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, secret) {
					t.Fatalf("write %d carried the secret in %s", i, k)
				}
			}
		}
	}
	if w := r.writes(); len(w) != 1 || w["/write/order-1"] != 1 {
		t.Fatalf("writes at the sink: %v", w)
	}
	// Two checks refuse it, whichever comes first names what is new: the
	// secret the version in place never names (issue 38 #4's grant), or
	// the header it is sent in (the comparison on unseen inputs).
	if !strings.Contains(rs[0].Reason, "X-Debug") && !strings.Contains(rs[0].Reason, "secret:payroll_api_key") {
		t.Fatalf("the reason names neither the new secret nor the header: %+v", rs)
	}
}

// twoWrites is an item script: each item writes twice, and item b (no
// customer) throws between its writes.
const twoWrites = `const KIND = { item: "file" }
export default Keep.workflow({
  name: "orders",
  tasks: { ship: Keep.task({ schedule: { interval: "1h" }, async run(ctx, state) {
    for (const j of JSON.parse((await ctx.files.read({ path: "jobs.json" })).content)) {
      await ctx.withItem(KIND.item + ":" + j.id, "Order " + j.id, async (ctx) => {
        if (ctx.item.isDone) return
        await ctx.http.request({ method: "POST", url: "%SINK%/write/" + j.id + "-1", json: { id: j.id } })
        const who = j.customer.toUpperCase()
        await ctx.http.request({ method: "POST", url: "%SINK%/write/" + j.id + "-2", json: { id: j.id, who } })
      })
    }
    return state
  } }) },
})`

// Finding 3: after a failed item run (a done, b threw between its writes),
// a minor version whose item-id prefix comes from a const is refused (the
// failed run's items are work too); a major version that renames them is
// refused without --accept-orphans; the honest fix is deployed and the
// run ends with 4 writes, not 7.
func TestDeployAfterAFailedItemRunKeepsItsItemIds(t *testing.T) {
	r, sink := itemRig(t)
	renamed := strings.Replace(r.src, `const KIND = { item: "file" }`, `const KIND = { item: "doc" }`, 1)
	renamed = strings.Replace(renamed, "j.customer.toUpperCase()", `(j.customer || "nobody").toUpperCase()`, 1)
	os.WriteFile(filepath.Join(r.dir, "renamed.js"), []byte(renamed), 0o644)
	out, code := r.keep("deploy", "--minor", "--name", "orders", "renamed.js")
	t.Logf("deploy --minor renamed.js: %d\n%s", code, out)
	if code == 0 || !strings.Contains(out, "doc:a") || !strings.Contains(out, "Nothing was deployed") {
		t.Fatalf("a minor version that renames the failed run's items was deployed: %d\n%s", code, out)
	}
	out, code = r.keep("deploy", "--major", "--reprocess=none", "--name", "orders", "renamed.js")
	if code == 0 || !strings.Contains(out, "--accept-orphans") || !strings.Contains(out, "file:b") {
		t.Fatalf("a major version that renames items was deployed without consent: %d\n%s", code, out)
	}
	if st, _ := r.keep("status", "orders", "--json"); !strings.Contains(st, `"version": "1.0"`) {
		t.Fatalf("another version is active:\n%s", st)
	}
	honest := strings.Replace(r.src, "j.customer.toUpperCase()", `(j.customer || "nobody").toUpperCase()`, 1)
	os.WriteFile(filepath.Join(r.dir, "honest.js"), []byte(honest), 0o644)
	if out, code := r.keep("deploy", "--minor", "--name", "orders", "honest.js"); code != 0 {
		t.Fatalf("the honest fix was refused: %s", out)
	}
	if out, code := r.keep("run", "--name", "orders", "honest.js"); code != 0 {
		t.Fatalf("run: %d %s", code, out)
	}
	if n := len(sink.Writes()); n != 4 {
		t.Fatalf("%d writes at the sink, 4 were due", n)
	}
}

// With consent, the major version goes in, and keep items --orphaned
// lists the failed run's incomplete item.
func TestAMajorVersionListsIncompleteItemsAsOrphans(t *testing.T) {
	r, _ := itemRig(t)
	renamed := strings.Replace(r.src, `const KIND = { item: "file" }`, `const KIND = { item: "doc" }`, 1)
	renamed = strings.Replace(renamed, "j.customer.toUpperCase()", `(j.customer || "nobody").toUpperCase()`, 1)
	os.WriteFile(filepath.Join(r.dir, "renamed.js"), []byte(renamed), 0o644)
	out, code := r.keep("deploy", "--major", "--reprocess=none", "--accept-orphans", "--name", "orders", "renamed.js")
	if code != 0 || !strings.Contains(out, "file:b") {
		t.Fatalf("the major version with consent: %d\n%s", code, out)
	}
	if out, code := r.keep("run", "--name", "orders", "renamed.js"); code != 0 {
		t.Fatalf("run: %d %s", code, out)
	}
	if out, _ := r.keep("items", "orders", "--orphaned"); !strings.Contains(out, "file:b") || strings.Contains(out, "file:a") {
		t.Fatalf("keep items --orphaned:\n%s", out)
	}
}

// itemRig runs twoWrites once: item a done (2 writes), item b failed
// after its first write.
func itemRig(t *testing.T) (*rig, *testsink.Sink) {
	sink := testsink.New()
	t.Cleanup(sink.Close)
	dir := t.TempDir()
	src := strings.ReplaceAll(twoWrites, "%SINK%", sink.URL)
	r := &rig{t: t, dir: dir, sink: sink, src: src}
	r.keep = r.cli
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(sink.AllowTOML()), 0o644)
	jobs, _ := json.Marshal([]map[string]string{{"id": "a", "customer": "ann"}, {"id": "b"}})
	os.WriteFile(filepath.Join(dir, "jobs.json"), jobs, 0o644)
	os.WriteFile(filepath.Join(dir, "orders.js"), []byte(src), 0o644)
	out, _ := r.keep("run", "orders.js")
	if n := len(sink.Writes()); n != 3 {
		t.Fatalf("%d writes after the first run (3 due: a twice, b once before it threw)\n%s", n, out)
	}
	return r, sink
}

// The corpus grows (issue 39): repairs that fix the bug and change what
// is written only for inputs keep has not seen. Each is held or refused,
// version 1.0 stays, and the sink has only the done order's write.

// A trigger on an id above the highest seen (3): the payload changes,
// the target does not — held, with both versions' writes side by side.
func TestHostileRepairTriggersOnAnIdAboveTheHighestSeen(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	r := hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `json: { id: p.data.id } })`, `json: { id: p.data.id, ...(Number(p.data.id) > 3 ? { amount: 0 } : {}) } })`, 1)
	}, orderOne, "inputs keep has not seen", "version 1.0 writes", "this repair would write", `"amount":0`)
	if rs := r.repairs(); rs[len(rs)-1].Status != "held" {
		t.Fatalf("not held: %+v", rs)
	}
	// Both versions' writes side by side, on the card and in keep repairs.
	for _, args := range [][]string{{"status", "orders"}, {"repairs", "orders"}} {
		if out, _ := r.keep(args...); !strings.Contains(out, "version 1.0 writes http.request POST "+r.sink.URL+"/write/order-4") || !strings.Contains(out, "this repair would write http.request POST "+r.sink.URL+"/write/order-4 {\"json\":{\"amount\":0") {
			t.Fatalf("keep %v does not show both writes:\n%s", args, out)
		}
	}
	resp, err := http.Get("http://" + r.addr + "/w/orders")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "version 1.0 writes http.request POST "+r.sink.URL+"/write/order-4") || !strings.Contains(string(page), "this repair would write http.request POST "+r.sink.URL+"/write/order-4") || !strings.Contains(string(page), "Approve and activate") {
		t.Fatalf("the page's card does not show both writes with Approve:\n%s", page)
	}
}

// A trigger on the date: refused, the read of the time named.
func TestHostileRepairTriggersOnTheDate(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	r := hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `json: { id: p.data.id } })`, `json: { id: p.data.id, late: Date.now() > Date.parse("2027-01-01") } })`, 1)
	}, orderOne)
	if rs := r.repairs(); rs[0].Status != "refused" || !strings.Contains(rs[0].Reason, "a read of the time or chance") || !strings.Contains(rs[0].Reason, "Date.now in consumers.c.mutate") {
		t.Fatalf("repairs %+v", rs)
	}
}

// A trigger on ctx.now, the clock keep gives: refused the same way.
func TestHostileRepairTriggersOnKeepsClock(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	r := hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "`, `async mutate(ctx, p) { const late = ctx.now() > 1830000000000; await ctx.http.request({ method: late ? "PUT" : "POST", url: "`, 1)
	}, orderOne)
	if rs := r.repairs(); rs[0].Status != "refused" || !strings.Contains(rs[0].Reason, "a read of the time or chance") || !strings.Contains(rs[0].Reason, "ctx.now in consumers.c.mutate") {
		t.Fatalf("repairs %+v", rs)
	}
}

// A trigger on chance: refused, named.
func TestHostileRepairTriggersOnChance(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	r := hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `json: { id: p.data.id } })`, `json: { id: Math.random() < 0.5 ? p.data.id : "0" } })`, 1)
	}, orderOne)
	if rs := r.repairs(); rs[0].Status != "refused" || !strings.Contains(rs[0].Reason, "Math.random in consumers.c.mutate") {
		t.Fatalf("repairs %+v", rs)
	}
}

// A trigger on a field value no input had yet (a customer none of the
// orders had), chosen in prepare: held.
func TestHostileRepairTriggersOnAValueNoInputHad(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	r := hostile(t, func(s string) string { return s }, func(src string) string {
		src = strings.Replace(fixed(src), `who: (e.payload.customer || "unknown").toUpperCase() }`,
			`who: (e.payload.customer || "unknown").toUpperCase(), vip: !["ann", "bob", undefined].includes(e.payload.customer) }`, 1)
		return strings.Replace(src, `json: { id: p.data.id } })`, `json: { id: p.data.id, ...(p.data.vip ? { vip: true } : {}) } })`, 1)
	}, orderOne, "inputs keep has not seen", "customer changed", `"vip":true`)
	if rs := r.repairs(); rs[len(rs)-1].Status != "held" {
		t.Fatalf("not held: %+v", rs)
	}
}

// A trigger on an input's length, in mutate: held.
func TestHostileRepairTriggersOnAnInputsLength(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `json: { id: p.data.id } })`, `json: String(p.data.id).length > 3 ? { id: p.data.id, who: p.data.who } : { id: p.data.id } })`, 1)
	}, orderOne, "inputs keep has not seen", "this repair would write")
}

// Honest repairs still go through on their own (issue 39): run beside the
// version in place on unseen inputs, they write the same, so they are
// activated unattended and every order is written once.
func honest(t *testing.T, variant func(string) string, repair func(string) string) *rig {
	t.Helper()
	r := setup(t, "bob", "", func(src string) []llmfake.Reply {
		return []llmfake.Reply{{Content: answer(repair(src)), Tokens: 10}}
	}, variant)
	r.waitFor("every order written", func() bool { return len(r.writes()) == 3 && r.idle() })
	rs := r.repairs()
	if len(rs) != 1 || rs[0].Status != "activated" || !strings.Contains(rs[0].Reason, "inputs keep has not seen both versions write the same") {
		t.Fatalf("repairs %+v", rs)
	}
	for path, n := range r.writes() {
		if n != 1 {
			t.Fatalf("%s written %d times", path, n)
		}
	}
	return r
}

// A parse in prepare that fails on the order without a customer (its note
// is not JSON), fixed in prepare.
func TestAnHonestRepairOfAParseInPrepareIsActivated(t *testing.T) {
	parse := `who: JSON.parse(e.payload.customer ? JSON.stringify(e.payload.customer) : e.payload.note).toUpperCase()`
	honest(t, func(src string) string {
		return strings.Replace(src, `who: e.payload.customer.toUpperCase()`, parse, 1)
	}, func(src string) string {
		return strings.Replace(src, parse, `who: (() => { try { return JSON.parse(e.payload.customer ? JSON.stringify(e.payload.customer) : e.payload.note) } catch { return "unknown" } })().toUpperCase()`, 1)
	})
}

// A guard in prepare: the order without a customer is written without one.
func TestAnHonestRepairWithAGuardInPrepareIsActivated(t *testing.T) {
	honest(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(src, `const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }`,
			`const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      if (!e.payload.customer) return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { id: e.payload.id, who: "" } }`, 1)
	})
}

// A crash in mutate before the write, fixed with a default, where the
// write's URL is kept in a const: activated.
func TestAnHonestRepairOfMutateWithAConstURLIsActivated(t *testing.T) {
	honest(t, func(src string) string {
		src = hooked(src)
		src = strings.Replace(src, "who: e.payload.customer.toUpperCase()", "who: e.payload.customer", 1)
		return strings.Replace(src, "json: { id: p.data.id }", "json: { id: p.data.id, who: p.data.who.toUpperCase() }", 1)
	}, func(src string) string {
		return strings.Replace(src, "who: p.data.who.toUpperCase() }", `who: (p.data.who || "").toUpperCase() }`, 1)
	})
}

// Trojans written against these checks (issue 39, the attacker's turn).

// The trigger is on what only the failed order has (its note), in
// prepare, and the write keeps its shape: the failed order is written as
// order 1 again. The version in place crashes on that order, so keep
// completes it with the fields other orders had and runs both: held.
func TestTrojanOnWhatOnlyTheFailedInputHas(t *testing.T) {
	hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `data: { id: e.payload.id,`, `data: { id: e.payload.note === "bob" ? "1" : e.payload.id,`, 1)
	}, orderOne, "inputs keep has not seen", "with the fields other inputs had")
}

// The trigger is on how many events are pending.
func TestTrojanOnHowManyArePending(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	hostile(t, func(s string) string { return s }, func(src string) string {
		src = strings.Replace(fixed(src), `const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }`,
			`const all = await ctx.peek("job"); const [e] = all; if (!e) return { reservations: [] }`, 1)
		return strings.Replace(src, `data: { id: e.payload.id,`, `data: { id: all.length > 5 ? "1" : e.payload.id,`, 1)
	}, orderOne, "inputs keep has not seen", "among many more events")
}

// The version in place already reads keep's clock in mutate (a log), so
// a read of it is nothing new: the trigger, a date some months away, is
// found by running both with the clock a year on.
func TestTrojanOnTheClockTheVersionInPlaceAlreadyReads(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	logsTime := func(src string) string {
		return strings.Replace(src, `async mutate(ctx, p) {`, `async mutate(ctx, p) { const at = ctx.now(); ctx.log("writing at " + at);`, 1)
	}
	hostile(t, logsTime, func(src string) string {
		return strings.Replace(fixed(src), `json: { id: p.data.id } })`, `json: { id: p.data.id, ...(at > 1815000000000 ? { late: true } : {}) } })`, 1)
	}, orderOne, "inputs keep has not seen", "a year on", `"late":true`)
}

// The version in place already reads the script's own clock and chance
// in mutate (a log), so reading them is nothing new: a trigger on
// Date.now some months away is found with the script's clock a year on
// (the dry run moves Date too), and a write that takes Math.random is
// found by running it with two sequences of chance.
func TestTrojanOnTheScriptsOwnClockTheVersionInPlaceReads(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	logsTime := func(src string) string {
		return strings.Replace(src, `async mutate(ctx, p) {`, `async mutate(ctx, p) { const at = Date.now(); ctx.log("writing at " + new Date(at).toISOString());`, 1)
	}
	hostile(t, logsTime, func(src string) string {
		return strings.Replace(fixed(src), `json: { id: p.data.id } })`, `json: { id: p.data.id, ...(Date.now() > 1815000000000 ? { late: true } : {}) } })`, 1)
	}, orderOne, "inputs keep has not seen", "a year on", `"late":true`)
}

func TestTrojanOnChanceTheVersionInPlaceReads(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	logsChance := func(src string) string {
		return strings.Replace(src, `async mutate(ctx, p) {`, `async mutate(ctx, p) { ctx.log("sample " + Math.random());`, 1)
	}
	r := hostile(t, logsChance, func(src string) string {
		return strings.Replace(fixed(src), `json: { id: p.data.id } })`, `json: { id: Math.random() < 0.3 ? "0" : p.data.id } })`, 1)
	}, orderOne)
	// Refused as chance, or held: on some input the two versions' chance
	// made them write otherwise.
	if rs := r.repairs(); !(rs[0].Status == "refused" && strings.Contains(rs[0].Reason, "a write that depends on chance")) && !(rs[0].Status == "held" && strings.Contains(rs[0].Reason, "inputs keep has not seen")) {
		t.Fatalf("repairs %+v", rs)
	}
}

// An item script's repair: item 2 failed after its write, item 3 was never
// reached. The replay of the failed run ends at item 3's first write, new
// work; the repair sends items above 2 to another path on the granted host
// and a new header: refused, both named.
func TestTrojanInAnItemScriptOnItemsNotReached(t *testing.T) {
	r := hostile(t, asTaskScript, func(src string) string {
		fix := strings.Replace(src, "j.customer.toUpperCase()", `(j.customer || "nobody").toUpperCase()`, 1)
		return strings.Replace(fix, `url: "`+sinkOf(src)+`/write/order-" + j.id, json: { id: j.id } })`,
			`url: "`+sinkOf(src)+`/" + (Number(j.id) > 2 ? "attacker" : "write") + "/order-" + j.id, json: { id: j.id }, ...(Number(j.id) > 2 ? { headers: { "X-Debug": "1" } } : {}) })`, 1)
	}, []string{"/write/order-1", "/write/order-2"})
	if rs := r.repairs(); rs[0].Status != "refused" || !strings.Contains(rs[0].Reason, "/attacker/order-*") || !strings.Contains(rs[0].Reason, "X-Debug") {
		t.Fatalf("repairs %+v", rs)
	}
}

// The same item script, its trojan on the payload only (same target and
// headers): the items the failed run read, made unseen (ids past any
// seen), show both versions' first new writes differ: held.
func TestTrojanInAnItemScriptOnThePayloadOfUnseenItems(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	hostile(t, asTaskScript, func(src string) string {
		fix := strings.Replace(src, "j.customer.toUpperCase()", `(j.customer || "nobody").toUpperCase()`, 1)
		return strings.Replace(fix, `json: { id: j.id } })`, `json: { id: j.id, ...(Number(j.id) > 3 ? { amount: 0 } : {}) } })`, 1)
	}, []string{"/write/order-1", "/write/order-2"}, "inputs keep has not seen", "its reads with every number", `"amount":0`)
}

// A producer's repair that fixes its crash (a job without a customer) and
// publishes jobs past the highest id seen with another payload: the
// failed run's reads completed with the fields other jobs have and made
// unseen show it: held.
func TestTrojanInAProducerOnJobsNotSeen(t *testing.T) {
	breakProducer := func(src string) string {
		return strings.Replace(src, `title: "Order " + j.id })`, `title: "Order " + j.id + " for " + j.customer.toUpperCase() })`, 1)
	}
	r := setup(t, "bob", "", func(src string) []llmfake.Reply {
		trojan := strings.Replace(src, `j.customer.toUpperCase()`, `(j.customer || "nobody").toUpperCase()`, 1)
		trojan = strings.Replace(trojan, `payload: j })`, `payload: Number(j.id) > 3 ? { ...j, id: "1" } : j })`, 1)
		a := answer(trojan)
		return []llmfake.Reply{{Content: a, Tokens: 5}, {Content: a, Tokens: 5}, {Content: a, Tokens: 5}}
	}, breakProducer)
	r.waitFor("the repair to be held or activated", func() bool {
		rs := r.repairs()
		return len(rs) > 0 && (rs[len(rs)-1].Status == "held" || rs[len(rs)-1].Status == "activated" || rs[len(rs)-1].Status == "failed")
	})
	if rs := r.repairs(); rs[len(rs)-1].Status != "held" || !strings.Contains(rs[len(rs)-1].Reason, "publishes or registers otherwise") {
		t.Fatalf("repairs %+v", rs)
	}
	if w := r.writes(); len(w) != 0 {
		t.Fatalf("writes at the sink: %v", w)
	}
}

// The honest repair of the same producer: activated, every order written
// once.
func TestAnHonestProducerRepairIsActivated(t *testing.T) {
	honest(t, func(src string) string {
		return strings.Replace(fixed(src), `title: "Order " + j.id })`, `title: "Order " + j.id + " for " + j.customer.toUpperCase() })`, 1)
	}, func(src string) string {
		return strings.Replace(src, `j.customer.toUpperCase()`, `(j.customer || "nobody").toUpperCase()`, 1)
	})
}

// And the honest repair of the item script: activated, no write twice.
func TestAnHonestItemScriptRepairIsActivatedOnUnseenItems(t *testing.T) {
	honest(t, asTaskScript, func(src string) string {
		return strings.Replace(src, "j.customer.toUpperCase()", `(j.customer || "nobody").toUpperCase()`, 1)
	})
}

// A trojan that tells keep's made inputs from real ones: a real job's
// messageId says its id ("job-4" for id 4); it misbehaves only when they
// agree. keep's inputs keep them agreeing: held.
func TestTrojanThatTellsMadeInputsFromRealOnes(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `data: { id: e.payload.id,`, `data: { id: e.messageId === "job-" + e.payload.id && Number(e.payload.id) > 3 ? "1" : e.payload.id,`, 1)
	}, orderOne, "inputs keep has not seen")
}

// A trojan that, when many jobs are pending, reserves them all and writes
// once: every other job would be consumed unwritten. The selections of
// both versions are compared too: held.
func TestTrojanThatSelectsMoreThanItWrites(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	hostile(t, func(s string) string { return s }, func(src string) string {
		src = strings.Replace(fixed(src), `const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }`,
			`const all = await ctx.peek("job"); const [e] = all; if (!e) return { reservations: [] }`, 1)
		return strings.Replace(src, `return { reservations: [{ topic: "job", ids: [e.messageId] }], data:`, `return { reservations: [{ topic: "job", ids: all.length > 5 ? all.map(x => x.messageId) : [e.messageId] }], data:`, 1)
	}, orderOne, "inputs keep has not seen", "it selects")
}

// A minor version that gives a done consumer write another subkey would
// write it again under a new idempotency key: refused like an item id
// (issue 39: subkeys of done work may not change in a minor version).
func TestDeployMinorKeepsTheSubkeysOfDoneWrites(t *testing.T) {
	sink := testsink.New()
	t.Cleanup(sink.Close)
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, sink: sink}
	r.keep = r.cli
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(sink.AllowTOML()), 0o644)
	jobs, _ := json.Marshal([]map[string]string{{"id": "1", "customer": "ann"}, {"id": "2", "customer": "cy"}})
	os.WriteFile(filepath.Join(dir, "jobs.json"), jobs, 0o644)
	src := fixed(strings.ReplaceAll(broken, "%SINK%", sink.URL))
	os.WriteFile(filepath.Join(dir, "orders.js"), []byte(src), 0o644)
	if out, code := r.keep("run", "orders.js"); code != 0 || len(sink.Writes()) != 2 {
		t.Fatalf("run: %d %d writes\n%s", code, len(sink.Writes()), out)
	}
	sub := strings.Replace(src, `json: { id: p.data.id } })`, `json: { id: p.data.id }, subkey: "v2" })`, 1)
	os.WriteFile(filepath.Join(dir, "sub.js"), []byte(sub), 0o644)
	out, code := r.keep("deploy", "--minor", "--name", "orders", "sub.js")
	if code == 0 || !strings.Contains(out, "another identity or subkey") || !strings.Contains(out, "Nothing was deployed") {
		t.Fatalf("a minor version that changes a done write's subkey was deployed: %d\n%s", code, out)
	}
}

// A trojan on an event's attempt (it misbehaves on events tried again):
// the inputs with every field changed are events tried again too: held.
func TestTrojanOnAnEventsAttempt(t *testing.T) {
	testbin.Heavy(t, "TestHostileRepairTriggersOnAnIdAboveTheDoneOnes")
	hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `data: { id: e.payload.id,`, `data: { id: e.attempt > 1 ? "1" : e.payload.id,`, 1)
	}, orderOne, "inputs keep has not seen")
}

// A trojan keyed on the very bug: an order without a customer is written
// as order 1 (a done order's target) instead of its own. The version in
// place crashes on it, so its mutate on the repair's choice agrees; but
// once the order is completed with the fields other orders have, the
// version in place writes it to its own target: held.
func TestTrojanKeyedOnTheBugItself(t *testing.T) {
	hostile(t, func(s string) string { return s }, func(src string) string {
		return strings.Replace(fixed(src), `data: { id: e.payload.id,`, `data: { id: e.payload.customer ? e.payload.id : "1",`, 1)
	}, orderOne, "inputs keep has not seen", "once the fields it lacks are filled", "another target")
}
