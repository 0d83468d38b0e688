package hooks_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/daemon"
)

// TestKeepsOwnErrorIsNotToldToTheSender: the webhooks address faces the
// internet, so when keep itself fails (here its store is closed) the
// sender is told to send the delivery again, and nothing of keep's
// inside (the store's error, its SQL, its paths): that goes to keep's log.
func TestKeepsOwnErrorIsNotToldToTheSender(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	k, err := daemon.Open(daemon.Options{DataDir: filepath.Join(dir, "data"), FilesRoot: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(k.WebhooksServer().Handler)
	defer srv.Close()
	k.Close() // every read of the store fails from here on

	resp, err := http.Post(srv.URL+"/hooks/orders/github", "application/json", strings.NewReader(`{"id": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "send it again") {
		t.Fatalf("a delivery keep could not take: %d %s, want 500 saying to send it again", resp.StatusCode, body)
	}
	for _, inside := range []string{"sql", "closed", "workflow \\\"orders\\\"", dir} {
		if strings.Contains(string(body), inside) {
			t.Errorf("the sender is told %q of keep's inside: %s", inside, body)
		}
	}
	if !strings.Contains(logs.String(), "closed") {
		t.Errorf("keep's log does not say what failed:\n%s", logs.String())
	}
}
