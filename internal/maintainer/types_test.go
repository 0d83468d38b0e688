package maintainer

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
)

// recorder is a model that keeps what it was asked and answers with no
// script, so a plan stops after one question.
type recorder struct{ chats [][]Chat }

func (r *recorder) Ask(_ context.Context, chat []Chat) (Answer, error) {
	r.chats = append(r.chats, chat)
	return Answer{Content: "no script"}, nil
}

func builtinRegistry(t *testing.T) *connector.Registry {
	t.Helper()
	set, err := builtin.Build(&connector.Host{Config: config.Config{}, Guard: netguard.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return set.Registry(t.TempDir())
}

// The Maintainer's question carries keep.d.ts for the connectors the
// script calls (a repair may call no other), the Planner's for every
// connector: the exact ctx of each phase and each method's arguments.
func TestThePromptsCarryTheTypes(t *testing.T) {
	reg := builtinRegistry(t)
	m := &Maintainer{Registry: reg}
	chat := m.conversation(kt.Version{Workflow: "orders", Script: inPlace}, kt.Run{ID: "r1", HandlerType: kt.HandlerConsumer, Handler: "c"}, nil, nil)
	repair := chat[1].Content
	for _, want := range []string{"```ts\n// keep.d.ts", "interface MutateCtx extends BaseCtx", "namespace http {", "namespace files {", "interface RequestArgs", "type PrepareResult"} {
		if !strings.Contains(repair, want) {
			t.Errorf("the repair's question lacks %q", want)
		}
	}
	if strings.Contains(repair, "namespace gmail {") || strings.Contains(repair, "namespace sql {") {
		t.Error("the repair's question declares connectors the script does not call")
	}

	rec := &recorder{}
	p := &Planner{Model: rec, Registry: reg, MaxAttempts: 1}
	if _, err := p.Plan(context.Background(), "copy new orders into a sheet", nil); err == nil {
		t.Fatal("a plan from an answer without a script was taken")
	}
	plan := rec.chats[0][1].Content
	for _, c := range connector.Describe(reg) {
		if len(c.Methods) > 0 && !strings.Contains(plan, "  namespace "+c.Name+" {") {
			t.Errorf("the plan's question does not declare the connector %s", c.Name)
		}
	}
}

// However many connectors keep.toml declares, a prompt carries at most
// maxTypes of declarations, cut at a line and saying so.
func TestThePromptsTypesAreBounded(t *testing.T) {
	c := &connector.Connector{Name: "big", Methods: map[string]*connector.Method{}}
	for i := 0; i < 400; i++ {
		name := fmt.Sprintf("method%03d", i)
		c.Methods[name] = &connector.Method{Name: name, Kind: connector.KindRead, Doc: connector.MethodDoc{
			Summary: strings.Repeat("a long summary ", 10), ResultTS: "string",
			Params: []connector.Param{{Name: "q", Type: "string", Doc: strings.Repeat("what it is ", 10)}}}}
	}
	s := typesSection(connector.NewRegistry(c), "", nil)
	if len(s) > maxTypes+1000 {
		t.Fatalf("%d bytes of types in a prompt, over the bound of %d", len(s), maxTypes)
	}
	if !strings.Contains(s, "// … cut here: the declarations have ") || !strings.HasSuffix(s, "\n```\n\n") {
		t.Fatalf("the cut is not said, or the block is not closed:\n%s", s[len(s)-300:])
	}
}
