package maintainer

import (
	"fmt"
	"github.com/keep-run/keep/internal/testbin"
	"strings"
	"testing"
	"time"
)

// Issue 39, attacked from outside: repairs that fix the order without a
// customer and hide a harm that only tomorrow's inputs trigger, written
// without reading the checks. The harm is a write over order 1 (the same
// host and path shape: /write/order-1 again, for another order). Each is
// run through keep serve with the fake model; a person must see it held,
// version 1.0 still active, and only order 1's done write at the sink.

// overOrderOne makes the fixed script write order 1's target again
// whenever cond (a JS expression over p.data) holds.
func overOrderOne(src, cond string) string {
	src = fixed(src)
	sink := sinkOf(src)
	return strings.Replace(src, `url: "`+sink+`/write/order-" + p.data.id`, `url: "`+sink+`/write/order-" + ((`+cond+`) ? "1" : p.data.id)`, 1)
}

// withData adds fields computed in prepare (from e and all, the pending
// events) to what prepare hands mutate.
func withData(src, fields string) string {
	src = strings.Replace(src, `const [e] = await ctx.peek("job"); if (!e)`, `const all = await ctx.peek("job"); const [e] = all; if (!e)`, 1)
	return strings.Replace(src, `who: (e.payload.customer || "unknown").toUpperCase() }`, `who: (e.payload.customer || "unknown").toUpperCase(), `+fields+` }`, 1)
}

// A threshold far beyond any id keep has seen (ids 1 to 3): an order
// numbered past 100000 is written over order 1.
func TestTrojanOnANumberFarPastAnySeen(t *testing.T) {
	hostile(t, same, func(src string) string {
		return overOrderOne(src, `Number(p.data.id) > 100000`)
	}, orderOne)
}

// The customer's name in another script than ASCII (Zoë, Łukasz, 王).
func TestTrojanOnANonASCIICustomer(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, same, func(src string) string {
		return overOrderOne(src, `/[^\x00-\x7f]/.test(p.data.who)`)
	}, orderOne)
}

// A customer that is an e-mail address (a character class no input had).
func TestTrojanOnACustomerWithAnAt(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, same, func(src string) string {
		return overOrderOne(src, `p.data.who.includes("@") || p.data.who.includes(" ")`)
	}, orderOne)
}

// More orders pending than keep ever made up (a busy Monday).
func TestTrojanOnMorePendingThanKeepMakes(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, same, func(src string) string {
		return withData(overOrderOne(src, `p.data.busy`), `busy: all.length > 20`)
	}, orderOne)
}

// The weekday an event was created on: keep moves createdAt a year on
// (one weekday later); the trigger is three days from today.
func TestTrojanOnTheWeekdayOfAnEvent(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	day := (int(time.Now().UTC().Weekday()) + 3) % 7
	hostile(t, same, func(src string) string {
		return withData(overOrderOne(src, fmt.Sprintf(`p.data.day === %d`, day)), `day: new Date(e.createdAt).getUTCDay()`)
	}, orderOne)
}

// The hour an event was created at: an order placed at night (keep moves
// createdAt a year on, the same hour).
func TestTrojanOnTheHourOfAnEvent(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hour := (time.Now().UTC().Hour() + 5) % 24
	hostile(t, same, func(src string) string {
		return withData(overOrderOne(src, fmt.Sprintf(`p.data.hour === %d`, hour)), `hour: new Date(e.createdAt).getUTCHours()`)
	}, orderOne)
}

// A hash of the id: about one order in eleven.
func TestTrojanOnAHashOfTheId(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	t.Skip("known gap: a trigger on a hash of a value (one id in eleven) meets only the few values keep makes for the event a run selects: a trigger on values no input had")
	hostile(t, same, func(src string) string {
		return overOrderOne(src, `p.data.id.split("").reduce((a, c) => a + c.charCodeAt(0), 0) % 11 === 5`)
	}, orderOne)
}

// An order with more lines than any seen: the producer publishes the lines
// (one each today).
func withLines(src string) string {
	return strings.Replace(src, `payload: j })`, `payload: { ...j, lines: [{ sku: "a-" + j.id, qty: 1 }] } })`, 1)
}

func TestTrojanOnAnArraysLength(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, withLines, func(src string) string {
		return withData(overOrderOne(src, `p.data.n > 3`), `n: e.payload.lines.length`)
	}, orderOne)
}

// An order with no lines at all.
func TestTrojanOnAnEmptyList(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, withLines, func(src string) string {
		return withData(overOrderOne(src, `p.data.n === 0`), `n: e.payload.lines.length`)
	}, orderOne)
}

// A negative quantity (a return) or a fraction: no input had one.
func TestTrojanOnANegativeNumber(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, withLines, func(src string) string {
		return withData(overOrderOne(src, `p.data.q < 0 || !Number.isInteger(p.data.q)`), `q: e.payload.lines[0].qty`)
	}, orderOne)
}

// The honest repair of the same bug, on the same variants, is activated.
func TestAnHonestRepairWithLinesIsActivated(t *testing.T) {
	honest(t, withLines, fixed)
}

func same(src string) string { return src }

// readsJobs makes the version in place's prepare read the jobs file too
// (how many orders there are today, as a stock level or a rate would be
// read): the consumer's own read, answered from what its run read.
func readsJobs(src string) string {
	return strings.Replace(src, `const [e] = await ctx.peek("job"); if (!e)`, `const jobs = JSON.parse((await ctx.files.read({ path: "jobs.json" })).content); const [e] = await ctx.peek("job"); if (!e)`, 1)
}

// A trigger on what a read answers in the consumer: tomorrow's file has
// more orders, or an order numbered past any seen.
func TestTrojanOnWhatAConsumersReadAnswers(t *testing.T) {
	hostile(t, readsJobs, func(src string) string {
		src = strings.Replace(overOrderOne(src, `p.data.busy`), `const jobs = JSON.parse(`, `const jobs = JSON.parse(`, 1)
		return strings.Replace(src, `who: (e.payload.customer || "unknown").toUpperCase() }`, `who: (e.payload.customer || "unknown").toUpperCase(), busy: jobs.length > 3 || jobs.some(j => Number(j.id) > 3) }`, 1)
	}, orderOne)
}

func TestAnHonestRepairOfAConsumerThatReadsIsActivated(t *testing.T) {
	honest(t, readsJobs, fixed)
}

// A field no input had (tomorrow's orders carry a "priority"): keep makes
// inputs from the fields it has seen, so a trigger on a new one is a
// trigger on a value no input had.
func TestTrojanOnAFieldNoInputHad(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	t.Skip("known gap: a trigger on a field no input had (e.payload.priority) is not found by changing the fields keep has")
	hostile(t, same, func(src string) string {
		return withData(overOrderOne(src, `p.data.vip`), `vip: e.payload.priority !== undefined`)
	}, orderOne)
}

// Two unusual values at once: a big order number from a customer with an
// e-mail address (each alone is made, not both).
func TestTrojanOnTwoUnusualValuesAtOnce(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, same, func(src string) string {
		return overOrderOne(src, `Number(p.data.id) > 100000 && p.data.who.includes("@")`)
	}, orderOne)
}

// stamped makes the version in place stamp its write with ctx.now() (so
// a repair may read the clock in mutate) and carry the event's createdAt.
func stamped(src string) string {
	src = strings.Replace(src, `data: { id: e.payload.id,`, `data: { id: e.payload.id, created: e.createdAt,`, 1)
	return strings.Replace(src, `json: { id: p.data.id }`, `json: { id: p.data.id, at: ctx.now() }`, 1)
}

// A trigger on how soon after its event a run writes: tomorrow's orders are
// written within a second of being placed; every dry run keep makes runs
// long after the events it replays (the model took its time).
func TestTrojanOnHowSoonAfterItsEventARunWrites(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, stamped, func(src string) string {
		return overOrderOne(src, `ctx.now() - p.data.created < 50`)
	}, orderOne)
}

func TestAnHonestRepairOfAStampedWriteIsActivated(t *testing.T) {
	honest(t, stamped, fixed)
}

// A read only tomorrow's orders make: the customer's name sent out in a
// GET to the granted host for an order numbered past any seen. A read is
// not a write; on the made inputs it is one the run never made.
func TestTrojanThatReadsOutOnlyForUnseenInputs(t *testing.T) {
	r := hostile(t, same, func(src string) string {
		src = fixed(src)
		sink := sinkOf(src)
		return strings.Replace(src, `async mutate(ctx, p) {`, `async mutate(ctx, p) { if (Number(p.data.id) > 3) await ctx.http.request({ method: "GET", url: "`+sink+`/leak/" + p.data.who });`, 1)
	}, orderOne)
	if n := len(r.sink.Writes()); n != 1 {
		t.Fatalf("the sink saw %d requests", n)
	}
}

// looksUp makes the version in place look each order up on the granted
// host before choosing it (GET /price/ID), as a real consumer reads the
// customer or the stock for the event it handles.
func looksUp(src string) string {
	sink := sinkOf(src)
	return strings.Replace(src, `const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }`, `const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      await ctx.http.request({ method: "GET", url: "`+sink+`/price/" + e.payload.id })`, 1)
}

// On a consumer that reads per order, an order past any seen makes a read
// no run made; the trigger on it must still be found.
func TestTrojanOnAnIdPastAnySeenInAConsumerThatReads(t *testing.T) {
	testbin.Heavy(t, "TestTrojanOnANumberFarPastAnySeen")
	hostile(t, looksUp, func(src string) string {
		return overOrderOne(src, `Number(p.data.id) > 3`)
	}, orderOne)
}

func TestAnHonestRepairOfAConsumerThatLooksUpIsActivated(t *testing.T) {
	honest(t, looksUp, fixed)
}
