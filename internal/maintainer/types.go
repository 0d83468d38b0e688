package maintainer

import (
	"fmt"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/dts"
	"github.com/keep-run/keep/internal/script"
)

// maxTypes bounds the script API's declarations one prompt carries.
const maxTypes = 64 << 10

// typesSection is keep.d.ts as a prompt carries it (issue 26 #3): the
// exact ctx of each phase and each method's arguments and result, which
// the model writes against as a person's editor checks against them. For
// a script to repair, only the connectors it calls (a repair may call no
// other); for a plan, all. Cut at a line past maxTypes, saying so.
func typesSection(reg *connector.Registry, src string, faults []string) string {
	infos, o := connector.Describe(reg), dts.Options{Faults: faults}
	text := dts.Render(infos, o)
	if src != "" {
		if a, err := script.Analyze(src); err == nil {
			var tools []string
			for _, c := range a.Calls {
				tools = append(tools, c.Tool)
			}
			text = dts.RenderFor(infos, tools, o)
		}
	}
	if len(text) > maxTypes {
		cut := strings.LastIndexByte(text[:maxTypes], '\n') + 1
		text = text[:cut] + fmt.Sprintf("// … cut here: the declarations have %d bytes in all; the connector reference has the rest\n", len(text))
	}
	return "## The script API's types (keep.d.ts: what ctx offers in each phase, each connector method's arguments and result; a call a phase's ctx does not have is refused)\n\n```ts\n" + text + "```\n\n"
}
