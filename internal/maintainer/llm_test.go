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
