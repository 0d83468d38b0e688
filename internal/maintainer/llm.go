package maintainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

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

// Model is an OpenAI-compatible chat-completions endpoint.
type Model struct {
	client openai.Client
	model  string
}

// NewModel returns the endpoint of [llm] (its key from api_key_env).
func NewModel(cfg config.LLM) *Model {
	// Only [llm]'s own key is sent, and only when it is set (Ollama and
	// llama.cpp's server need none): the client library's defaults read
	// OPENAI_API_KEY, OPENAI_ORG_ID and friends from the environment, which
	// must never reach an endpoint keep.toml did not give them to.
	opts := []option.RequestOption{option.WithBaseURL(cfg.BaseURL + "/"), option.WithAPIKey(os.Getenv(cfg.APIKeyEnv)),
		option.WithAdminAPIKey(""), option.WithOrganization(""), option.WithProject(""), option.WithMaxRetries(1)}
	for _, h := range []string{"OpenAI-Organization", "OpenAI-Project"} {
		opts = append(opts, option.WithHeaderDel(h))
	}
	return &Model{client: openai.NewClient(opts...), model: cfg.Model}
}

// Ask sends the conversation: POST {base_url}/chat/completions.
func (m *Model) Ask(ctx context.Context, chat []Chat) (Answer, error) {
	var msgs []openai.ChatCompletionMessageParamUnion
	for _, c := range chat {
		switch c.Role {
		case "system":
			msgs = append(msgs, openai.SystemMessage(c.Content))
		case "assistant":
			msgs = append(msgs, openai.AssistantMessage(c.Content))
		default:
			msgs = append(msgs, openai.UserMessage(c.Content))
		}
	}
	resp, err := m.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: m.model, Messages: msgs})
	if err != nil {
		var ae *openai.Error
		if errors.As(err, &ae) {
			return Answer{}, fmt.Errorf("the model's endpoint answered %d: %s", ae.StatusCode, strings.TrimSpace(ae.Message))
		}
		return Answer{}, fmt.Errorf("the model's endpoint: %v", err)
	}
	if len(resp.Choices) == 0 {
		return Answer{Tokens: int(resp.Usage.TotalTokens)}, errors.New("the model's endpoint answered without a choice")
	}
	return Answer{Content: resp.Choices[0].Message.Content, Tokens: int(resp.Usage.TotalTokens)}, nil
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
