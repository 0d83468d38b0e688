package api_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/apiclient"
)

// Issue 44: keep's own page reads the API's answers compact (ForPage) and
// decodes them in place from pooled buffers; a person and the CLI still
// read them indented. Both decode to the same values, also while several
// pages read at once (a buffer given back is never read again).
func TestThePageReadsTheSameAnswersCompact(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(script, "hook.js")
	runID := r.openRun("hook").ID
	if code, msg := r.apiSays("/api/v1/runs/"+runID+"/approve", nil); code != 200 {
		t.Fatalf("approve: %d %s", code, msg)
	}
	r.settle()
	h := (&api.Server{Store: r.k.Store, Engine: r.k.Engine}).Handler()

	raw := func(handler http.Handler) []byte {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/workflows/hook/outputs", nil))
		if rec.Code != 200 {
			t.Fatalf("outputs: %d %s", rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	if b := bytes.TrimSpace(raw(api.ForPage(h))); bytes.IndexByte(b, '\n') >= 0 {
		t.Errorf("the page's answer is indented:\n%s", b)
	}
	if b := raw(api.InProcess(h)); !bytes.Contains(b, []byte("\n  ")) {
		t.Errorf("a person's answer is not indented:\n%s", b)
	}

	ctx := context.Background()
	page, cli := apiclient.InProcess(api.ForPage(h), "web page"), apiclient.InProcess(api.InProcess(h), "operator")
	read := func(c *apiclient.Client) any {
		outs, _, err := c.OutputsPage(ctx, "hook", apiclient.ListOptions{Limit: 50})
		if err != nil {
			t.Error(err)
		}
		item, err := c.Item(ctx, "system:schedule:a", "hook")
		if err != nil {
			t.Error(err)
		}
		return []any{outs, item}
	}
	want := read(cli)
	if outs := want.([]any)[0]; reflect.ValueOf(outs).Len() != 1 {
		t.Fatalf("outputs %+v, want the applied write", outs)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if got := read(page); !reflect.DeepEqual(got, want) {
					t.Errorf("the page read\n%+v\nthe CLI\n%+v", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
