// Package llmfake is an OpenAI-compatible chat-completions endpoint that
// answers from a script of replies, in order, and records every request:
// what tests of the Maintainer talk to. Not linked into keep.
package llmfake

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Reply is one scripted answer: Status other than 200 answers an error.
type Reply struct {
	Status  int
	Content string
	Tokens  int
}

// Message is one message of a request.
type Message struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// Request is what the endpoint was sent.
type Request struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	// Headers are the request's HTTP headers (what credentials were sent).
	Headers http.Header `json:"-"`
}

// Text returns a message's content as text (a string or text parts).
func (m Message) Text() string {
	switch c := m.Content.(type) {
	case string:
		return c
	case []any:
		s := ""
		for _, p := range c {
			if part, ok := p.(map[string]any); ok {
				if t, ok := part["text"].(string); ok {
					s += t
				}
			}
		}
		return s
	}
	return ""
}

// Server answers POST /v1/chat/completions.
type Server struct {
	mu       sync.Mutex
	replies  []Reply
	requests []Request
	gate     chan struct{}
}

// Hold makes every answer wait until release is called (the requests are
// recorded at once): a test sees who asks while an answer is on its way.
func (s *Server) Hold() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := make(chan struct{})
	s.gate = g
	var once sync.Once
	return func() { once.Do(func() { close(g) }) }
}

// New returns a server that answers with replies, then 500s.
func New(replies ...Reply) *Server { return &Server{replies: replies} }

// Requests returns what was asked so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Handler serves the endpoint.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		req.Headers = r.Header.Clone()
		s.mu.Lock()
		s.requests = append(s.requests, req)
		var rep Reply
		if len(s.replies) > 0 {
			rep, s.replies = s.replies[0], s.replies[1:]
		} else {
			rep = Reply{Status: 500, Content: "no more scripted replies"}
		}
		gate := s.gate
		s.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if rep.Status != 0 && rep.Status != 200 {
			w.WriteHeader(rep.Status)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": rep.Content, "type": "server_error", "code": nil}})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": rep.Content}, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": rep.Tokens / 2, "completion_tokens": rep.Tokens - rep.Tokens/2, "total_tokens": rep.Tokens},
		})
	})
	return mux
}
