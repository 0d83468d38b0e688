package dts

import (
	"fmt"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// tableCalls are the columns of docs/scripts.md's "ctx in every phase".
var tableCalls = []struct {
	call  kt.CtxCall
	title string
}{
	{kt.CallRead, "list/search reads"},
	{kt.CallReadByID, "read by id"},
	{kt.CallEvents, "`peek`/`getByIds`"},
	{kt.CallRegisterInput, "`registerInput`"},
	{kt.CallPublish, "`publish`"},
	{kt.CallWrite, "write"},
	{kt.CallWithItem, "`withItem`"},
}

// cellNotes say more than "yes" where the engine checks more than the
// phase: which topics, which ids, how many writes.
var cellNotes = map[kt.CtxPhase]map[kt.CtxCall]string{
	kt.CtxProducer: {kt.CallPublish: "declared topics, `inputId` required"},
	kt.CtxWebhook:  {kt.CallPublish: "declared topics, `inputId` required"},
	kt.CtxPrepare:  {kt.CallEvents: "subscribed topics"},
	kt.CtxMutate:   {kt.CallWrite: "at most one, its last call"},
	kt.CtxNext:     {kt.CallPublish: "declared topics, no `inputId`"},
	kt.CtxItem:     {kt.CallWrite: "yes, one after another"},
}

var rowTitles = map[kt.CtxPhase]string{
	kt.CtxProducer: "producer `handler`",
	kt.CtxWebhook:  "webhook `handler`",
	kt.CtxPrepare:  "`prepare`",
	kt.CtxMutate:   "`mutate`",
	kt.CtxNext:     "`next`",
	kt.CtxTask:     "task `run`, outside `withItem`",
	kt.CtxItem:     "inside `withItem`'s handler",
}

// PhaseTable renders keeptype's ctx table for docs/scripts.md (a test
// fails when the document's copy is stale). It fails on a note for a call
// the table does not allow, and on a phase without a title.
func PhaseTable() (string, error) {
	var b strings.Builder
	b.WriteString("|")
	for _, c := range tableCalls {
		b.WriteString(" | " + c.title)
	}
	b.WriteString(" |\n|---" + strings.Repeat("|---", len(tableCalls)) + "|\n")
	for _, p := range kt.CtxPhases {
		title, ok := rowTitles[p]
		if !ok {
			return "", fmt.Errorf("the phase %s has no title in docs/scripts.md's table (dts.rowTitles)", p)
		}
		b.WriteString("| " + title)
		for _, c := range tableCalls {
			cell, allowed := cellNotes[p][c.call], kt.CtxAllows(p, c.call)
			switch {
			case cell != "" && !allowed:
				return "", fmt.Errorf("dts.cellNotes says %q of %s in %s, which keeptype's table does not allow", cell, c.call, p)
			case !allowed:
				cell = "no"
			case cell == "":
				cell = "yes"
			}
			b.WriteString(" | " + cell)
		}
		b.WriteString(" |\n")
	}
	return b.String(), nil
}
