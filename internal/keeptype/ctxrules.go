package keeptype

import "strings"

// What a handler may call through ctx, by phase (SPEC §3), as one table:
// the engine's host refuses a call the table does not allow ("phase
// violation"), and `keep types` writes each phase's ctx from it, so an
// editor flags the same call before keep runs it.

// CtxPhase is a part of a handler that keep serves a ctx to.
type CtxPhase string

const (
	CtxProducer CtxPhase = "producer" // a producer's handler
	CtxPrepare  CtxPhase = "prepare"  // a consumer's prepare
	CtxMutate   CtxPhase = "mutate"   // a consumer's mutate
	CtxNext     CtxPhase = "next"     // a consumer's next
	CtxTask     CtxPhase = "task"     // a task's run, outside withItem
	CtxItem     CtxPhase = "item"     // the handler withItem runs for one item
	CtxWebhook  CtxPhase = "webhook"  // a webhook's handler, for one delivery
	// A phase added here gets a row in ctxRules and a title in
	// CtxPhaseTitle; keep types then declares its ctx.
)

// CtxPhases lists every phase, in the order a workflow's handlers run.
var CtxPhases = []CtxPhase{CtxProducer, CtxWebhook, CtxPrepare, CtxMutate, CtxNext, CtxTask, CtxItem}

// CtxCall is a kind of ctx call the table rules. The first three are the
// kinds of connector methods (connector.Kind's values).
type CtxCall string

const (
	CallRead          CtxCall = "read"          // a connector's list/search read
	CallReadByID      CtxCall = "readById"      // a connector's read of one thing by its id
	CallWrite         CtxCall = "mutate"        // a connector's write
	CallEvents        CtxCall = "events"        // ctx.peek, ctx.getByIds
	CallRegisterInput CtxCall = "registerInput" // ctx.registerInput
	CallPublish       CtxCall = "publish"       // ctx.publish
	CallWithItem      CtxCall = "withItem"      // ctx.withItem
)

// ctxRules is SPEC §3's table: the calls each phase may make. ctx.log,
// ctx.now and ctx.random are allowed everywhere.
var ctxRules = map[CtxPhase][]CtxCall{
	CtxProducer: {CallRead, CallReadByID, CallRegisterInput, CallPublish},
	CtxWebhook:  {CallRead, CallReadByID, CallRegisterInput, CallPublish},
	CtxPrepare:  {CallRead, CallReadByID, CallEvents},
	CtxMutate:   {CallReadByID, CallWrite},
	CtxNext:     {CallPublish},
	CtxTask:     {CallRead, CallReadByID, CallWithItem},
	CtxItem:     {CallRead, CallReadByID, CallWrite},
}

// CtxAllows reports whether a handler in phase p may make a call of kind c.
func CtxAllows(p CtxPhase, c CtxCall) bool {
	for _, x := range ctxRules[p] {
		if x == c {
			return true
		}
	}
	return false
}

// CtxPhaseTitle names a phase for people ("a producer", "prepare").
func CtxPhaseTitle(p CtxPhase) string {
	switch p {
	case CtxProducer:
		return "a producer"
	case CtxTask:
		return "a task's run"
	case CtxItem:
		return "withItem's handler"
	case CtxWebhook:
		return "a webhook's handler"
	}
	return string(p)
}

// CtxAllowedIn says where a call of kind c is allowed, for an error
// ("a producer or next").
func CtxAllowedIn(c CtxCall) string {
	var in []string
	for _, p := range CtxPhases {
		if CtxAllows(p, c) {
			in = append(in, CtxPhaseTitle(p))
		}
	}
	if len(in) == 0 {
		return "no phase"
	}
	return strings.Join(in, " or ")
}
