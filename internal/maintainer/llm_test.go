package maintainer

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/fake/llmfake"
)

// The model's endpoint gets [llm]'s own key and nothing else: no "Bearer
// none" when no key is set (Ollama needs none), and never the OPENAI_*
// credentials of the environment keep happens to run in.
func TestTheModelIsSentOnlyItsOwnKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_ORG_ID", "org-from-the-environment")
	t.Setenv("OPENAI_PROJECT_ID", "proj-from-the-environment")
	for _, c := range []struct {
		name, key, want string
	}{
		{"no key set", "", ""},
		{"a key set", "sk-keep", "Bearer sk-keep"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := llmfake.New(llmfake.Reply{Content: "ok", Tokens: 2})
			srv := httptest.NewServer(fake.Handler())
			defer srv.Close()
			t.Setenv("KEEP_TEST_LLM_KEY", c.key)
			m := NewModel(config.LLM{BaseURL: srv.URL + "/v1", Model: "m", APIKeyEnv: "KEEP_TEST_LLM_KEY"})
			if _, err := m.Ask(context.Background(), []Chat{{Role: "user", Content: "hi"}}); err != nil {
				t.Fatal(err)
			}
			h := fake.Requests()[0].Headers
			if got := h.Get("Authorization"); got != c.want {
				t.Fatalf("Authorization %q, want %q", got, c.want)
			}
			if h.Get("OpenAI-Organization") != "" || h.Get("OpenAI-Project") != "" {
				t.Fatalf("the environment's OpenAI settings were sent: %v", h)
			}
		})
	}
}

// keep speaks the chat-completions API itself (issue 42: the client
// library was ≈ 40 % of a cold build): an answer the endpoint may give
// differently next time (5xx, 429) is asked once more, one that will not
// (400) is not, and the error says the status and the endpoint's message.
func TestTheModelIsAskedOnceMoreOnlyWhenThatCanHelp(t *testing.T) {
	for _, c := range []struct {
		name     string
		replies  []llmfake.Reply
		asked    int
		want     string
		wantText string
	}{
		{"overloaded once", []llmfake.Reply{{Status: 503, Content: "overloaded"}, {Content: "the script", Tokens: 7}}, 2, "", "the script"},
		{"overloaded twice", []llmfake.Reply{{Status: 500, Content: "overloaded"}, {Status: 500, Content: "still overloaded"}, {Content: "late"}}, 2, "the model's endpoint answered 500: still overloaded", ""},
		{"too many requests", []llmfake.Reply{{Status: 429, Content: "slow down"}, {Content: "ok"}}, 2, "", "ok"},
		{"a bad request", []llmfake.Reply{{Status: 400, Content: "model not found"}, {Content: "never"}}, 1, "the model's endpoint answered 400: model not found", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := llmfake.New(c.replies...)
			srv := httptest.NewServer(fake.Handler())
			defer srv.Close()
			m := NewModel(config.LLM{BaseURL: srv.URL + "/v1/", Model: "m"})
			ans, err := m.Ask(context.Background(), []Chat{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}})
			if got := len(fake.Requests()); got != c.asked {
				t.Fatalf("asked %d times, want %d", got, c.asked)
			}
			if c.want != "" {
				if err == nil || err.Error() != c.want {
					t.Fatalf("error %v, want %q", err, c.want)
				}
				return
			}
			if err != nil || ans.Content != c.wantText {
				t.Fatalf("answer %+v, %v", ans, err)
			}
			r := fake.Requests()[0]
			if r.Model != "m" || len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Messages[1].Text() != "hi" {
				t.Fatalf("request %+v", r)
			}
		})
	}
}
