package api

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Hub fans change notifications out to server-sent-event streams.
// MaxStreams bounds the open /events streams: each holds a descriptor and a
// goroutine, and 20,000 of them once exhausted a tokenless keep serve's
// descriptors (issue 11). A person has a few pages open, not hundreds.
const MaxStreams = 256

type Hub struct {
	mu   sync.Mutex
	subs map[chan string]struct{}
}

// NewHub builds a Hub.
func NewHub() *Hub { return &Hub{subs: map[chan string]struct{}{}} }

// Publish tells every open page that a workflow changed ("" = something did).
func (h *Hub) Publish(workflow string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs {
		select {
		case c <- workflow:
		default: // a slow page misses an update; the next one refreshes it
		}
	}
}

// ServeHTTP streams "change" events until the client goes away.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		Error(w, http.StatusInternalServerError, "internal", "streaming is not supported")
		return
	}
	c := make(chan string, 8)
	h.mu.Lock()
	if len(h.subs) >= MaxStreams {
		h.mu.Unlock()
		w.Header().Set("Retry-After", "10")
		Error(w, http.StatusServiceUnavailable, "too_many_streams",
			fmt.Sprintf("keep serves at most %d open event streams; close other pages of this keep and reload", MaxStreams))
		return
	}
	h.subs[c] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.subs, c)
		h.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	ping := time.NewTicker(20 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case wf := <-c:
			fmt.Fprintf(w, "event: change\ndata: %s\n\n", wf)
			fl.Flush()
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
			fl.Flush()
		}
	}
}
