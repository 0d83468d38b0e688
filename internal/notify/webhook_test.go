package notify_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/notify"
)

// The [notify] webhook passes the same address guard as the http
// connector: a local address keep.toml does not allow gets nothing, and
// the error names the line to add; allowed, it gets the notice.
func TestTheWebhookIsGuarded(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	defer hook.Close()
	send := func(allow ...string) error {
		n := notify.New(nil, config.Notify{Webhook: hook.URL}, notify.Senders{Guard: netguard.New(allow)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		return n.Channels[0].Send(context.Background(), notify.Notice{Kind: "blocked", Subject: "x"})
	}
	err := send()
	if _, refused := netguard.Refused(err); !refused || !strings.Contains(err.Error(), `[connectors.http] allow = ["`+hook.Listener.Addr().String()+`"]`) || got.Load() != 0 {
		t.Fatalf("undeclared webhook: %v, %d requests", err, got.Load())
	}
	if err := send(hook.Listener.Addr().String()); err != nil || got.Load() != 1 {
		t.Fatalf("declared webhook: %v, %d requests", err, got.Load())
	}
}
