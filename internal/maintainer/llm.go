package maintainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/config"
)

// Chat is one conversation turn sent to the model.
type Chat struct {
	Role    string // system, user, assistant
	Content string
}

// Answer is what the model said and what it cost.
type Answer struct {
	Content string
	Tokens  int
}

// Model is an OpenAI-compatible chat-completions endpoint (OpenAI, Ollama,
// llama.cpp's server, vLLM…), spoken to directly over net/http: keep uses
// one endpoint of that API, POST {base_url}/chat/completions, and the
// client library it used before was ≈ 100 of the 256 CPU-seconds of a
// cold build of keep (docs/performance.md, "Cold build (issue 42)").
type Model struct {
	client  *http.Client
	baseURL string
	key     string
	model   string
}

// NewModel returns the endpoint of [llm] (its key from api_key_env). Only
// [llm]'s own key is sent, and only when it is set (Ollama and llama.cpp's
// server need none): never OPENAI_API_KEY, OPENAI_ORG_ID or the like from
// the environment, which must not reach an endpoint keep.toml did not give
// them to.
func NewModel(cfg config.LLM) *Model {
	key := ""
	if cfg.APIKeyEnv != "" {
		key = os.Getenv(cfg.APIKeyEnv)
	}
	return &Model{client: &http.Client{}, baseURL: strings.TrimRight(cfg.BaseURL, "/"), key: key, model: cfg.Model}
}

// chatRequest and chatResponse are the fields of the chat-completions API
// keep sends and reads.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		TotalTokens int `json:"total_tokens"`
	} `json:"usage"`
}

// apiError is the error body of the API: {"error": {"message": …}}.
type apiError struct {
	Error struct {
		Message string `json:"message"`
	} `json:"error"`
}

// maxAnswer bounds what keep reads of an answer (a script and its test
// are far smaller).
const maxAnswer = 16 << 20

// Ask sends the conversation: POST {base_url}/chat/completions. An answer
// the endpoint may give again differently (a connection refused or cut,
// 408, 409, 429, 5xx) is asked once more, after the Retry-After the
// endpoint asks for (at most a minute) or half a second.
func (m *Model) Ask(ctx context.Context, chat []Chat) (Answer, error) {
	req := chatRequest{Model: m.model, Messages: make([]chatMessage, 0, len(chat))}
	for _, c := range chat {
		role := c.Role
		if role != "system" && role != "assistant" {
			role = "user"
		}
		req.Messages = append(req.Messages, chatMessage{Role: role, Content: c.Content})
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Answer{}, fmt.Errorf("the model's request: %v", err)
	}
	var ans Answer
	for attempt := 0; ; attempt++ {
		var again time.Duration
		ans, again, err = m.post(ctx, body)
		if err == nil || again < 0 || attempt == 1 {
			return ans, err
		}
		select {
		case <-ctx.Done():
			return ans, fmt.Errorf("the model's endpoint: %v (and then %v)", err, ctx.Err())
		case <-time.After(again):
		}
	}
}

// post sends one request; again is how long to wait before asking again,
// negative when asking again would not help.
func (m *Model) post(ctx context.Context, body []byte) (ans Answer, again time.Duration, err error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, m.baseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return Answer{}, -1, fmt.Errorf("the model's endpoint: %v", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if m.key != "" {
		hreq.Header.Set("Authorization", "Bearer "+m.key)
	}
	resp, err := m.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, -1, fmt.Errorf("the model's endpoint: %v", err)
		}
		return Answer{}, 500 * time.Millisecond, fmt.Errorf("the model's endpoint: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return Answer{}, 500 * time.Millisecond, fmt.Errorf("the model's endpoint: reading its answer: %v", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e apiError
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			msg = strings.TrimSpace(e.Error.Message)
		}
		if len(msg) > 500 {
			msg = msg[:500] + "…"
		}
		wait := time.Duration(-1)
		if s := resp.StatusCode; s == 408 || s == 409 || s == 429 || s >= 500 {
			wait = retryAfter(resp.Header.Get("Retry-After"))
		}
		return Answer{}, wait, fmt.Errorf("the model's endpoint answered %d: %s", resp.StatusCode, msg)
	}
	if len(raw) > maxAnswer {
		return Answer{}, -1, fmt.Errorf("the model's endpoint answered more than %d MiB", maxAnswer>>20)
	}
	var out chatResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return Answer{}, -1, fmt.Errorf("the model's endpoint answered what is not a chat completion: %v", err)
	}
	if len(out.Choices) == 0 {
		return Answer{Tokens: out.Usage.TotalTokens}, -1, errors.New("the model's endpoint answered without a choice")
	}
	return Answer{Content: out.Choices[0].Message.Content, Tokens: out.Usage.TotalTokens}, -1, nil
}

// retryAfter is how long a Retry-After header asks to wait (seconds, or an
// HTTP date), within a minute; half a second when it says nothing usable.
func retryAfter(h string) time.Duration {
	d := 500 * time.Millisecond
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s >= 0 {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(h); err == nil {
		d = time.Until(t)
	}
	return min(max(d, 0), time.Minute)
}

var fence = regexp.MustCompile("(?s)```(?:js|javascript|JavaScript|JS)?[ \\t]*\\n(.*?)```")

// Script returns the first fenced code block of an answer and the rest
// (the explanation); ok is false when there is no block.
// Blocks returns every fenced code block of an answer, in order, and the
// text outside them (the Planner's answer: the script, then its test).
func Blocks(content string) (blocks []string, explanation string) {
	rest := content
	var outside strings.Builder
	for {
		m := fence.FindStringSubmatchIndex(rest)
		if m == nil {
			outside.WriteString(rest)
			return blocks, strings.TrimSpace(outside.String())
		}
		blocks = append(blocks, rest[m[2]:m[3]])
		outside.WriteString(rest[:m[0]])
		rest = rest[m[1]:]
	}
}

func Script(content string) (script, explanation string, ok bool) {
	m := fence.FindStringSubmatchIndex(content)
	if m == nil {
		return "", strings.TrimSpace(content), false
	}
	script = content[m[2]:m[3]]
	explanation = strings.TrimSpace(content[:m[0]] + content[m[1]:])
	return script, explanation, strings.TrimSpace(script) != ""
}
