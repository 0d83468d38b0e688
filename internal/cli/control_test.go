package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// TestEveryActionHasOneCommandAndOneRoute: control.Control's list of
// people's actions is the one list; the CLI has a command for each and
// the API a route that reaches Control, and neither offers one that is not
// in it (issue 24: the API, the page and the CLI each kept their own).
func TestEveryActionHasOneCommandAndOneRoute(t *testing.T) {
	type surface struct {
		cli   []string // the command line (flags after the command)
		route string   // POST path of the API
		body  string
	}
	covered := map[kt.Action]surface{
		kt.ActTryAgain:      {[]string{"resolve", "--try-again"}, "/api/v1/runs/R/resolve", `{"action":"try-again"}`},
		kt.ActDidntHappen:   {[]string{"resolve", "--didnt-happen"}, "/api/v1/runs/R/resolve", `{"action":"didnt-happen"}`},
		kt.ActSkip:          {[]string{"resolve", "--skip"}, "/api/v1/runs/R/resolve", `{"action":"skip"}`},
		kt.ActReprocess:     {[]string{"resolve", "--reprocess"}, "/api/v1/runs/R/resolve", `{"action":"reprocess"}`},
		kt.ActApprove:       {[]string{"approve"}, "/api/v1/runs/R/approve", ""},
		kt.ActPause:         {[]string{"pause"}, "/api/v1/workflows/W/pause", ""},
		kt.ActResume:        {[]string{"resume"}, "/api/v1/workflows/W/resume", ""},
		kt.ActRunNow:        {[]string{"run-now"}, "/api/v1/workflows/W/run-now", ""},
		kt.ActGrant:         {[]string{"grant"}, "/api/v1/workflows/W/grant", ""},
		kt.ActRevoke:        {[]string{"grant", "--revoke"}, "/api/v1/workflows/W/revoke", `{"items":["http.request"]}`},
		kt.ActSkipPending:   {[]string{"skip-pending"}, "/api/v1/workflows/W/topics/T/skip-pending", ""},
		kt.ActResetState:    {[]string{"reset-state"}, "/api/v1/workflows/W/handlers/H/reset-state", ""},
		kt.ActSkipItem:      {[]string{"skip"}, "/api/v1/items/I/skip", ""},
		kt.ActReprocessItem: {[]string{"reprocess"}, "/api/v1/items/I/reprocess", ""},
		kt.ActApproveRepair: {[]string{"repairs", "--approve"}, "/api/v1/workflows/W/repairs/X/approve", ""},
		kt.ActRejectRepair:  {[]string{"repairs", "--reject"}, "/api/v1/workflows/W/repairs/X/reject", ""},
		kt.ActPublish:       {[]string{"publish", "--id", "--title", "--json"}, "/api/v1/workflows/W/topics/T/events", `{"id":"1","title":"t"}`},
		kt.ActTakeHeld:      {[]string{"webhooks", "--take", "--delivery"}, "/api/v1/workflows/W/webhooks/take-held", ""},
		kt.ActDropHeld:      {[]string{"webhooks", "--drop", "--delivery", "--yes"}, "/api/v1/workflows/W/webhooks/drop-held", `{"deliveries":[1]}`},
	}
	var listed []kt.Action
	for a := range covered {
		listed = append(listed, a)
	}
	slices.Sort(listed)
	all := slices.Clone(control.Actions())
	slices.Sort(all)
	if !slices.Equal(listed, all) {
		t.Fatalf("control.Actions() %v, covered here %v: give a new action its command and route", all, listed)
	}

	a := &app{out: io.Discard, errOut: io.Discard}
	root := a.root()
	data := t.TempDir()
	st, err := daemon.OpenStore(data, "sqlite://"+filepath.Join(data, "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(api.InProcess((&api.Server{Store: st}).Handler()))
	defer srv.Close()
	for _, act := range control.Actions() {
		s := covered[act]
		cmd, rest, err := root.Find(s.cli[:1])
		if err != nil || cmd == root || cmd.RunE == nil || len(rest) != 0 {
			t.Errorf("%s: no command keep %s", act, s.cli[0])
			continue
		}
		for _, f := range s.cli[1:] {
			if cmd.Flags().Lookup(strings.TrimPrefix(f, "--")) == nil {
				t.Errorf("%s: keep %s has no %s", act, s.cli[0], f)
			}
		}
		resp, err := http.Post(srv.URL+s.route, "application/json", strings.NewReader(s.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// Nothing named here exists: Control answers that, not the router.
		if resp.StatusCode == http.StatusMethodNotAllowed || strings.Contains(string(b), "no API route") || resp.StatusCode/100 == 2 {
			t.Errorf("%s: POST %s: %d %s", act, s.route, resp.StatusCode, b)
		}
	}
}
