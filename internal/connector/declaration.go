package connector

import (
	"context"
	"io"

	"golang.org/x/oauth2"

	"github.com/keep-run/keep/internal/config"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
)

// Accounts are the connected accounts as connectors use them: a
// provider's connection and its token, a new token saved (keep connect, a
// refresh), a connection marked broken (the provider refused it). Package
// account keeps them sealed in the store and implements this
// (*account.Accounts); the connector base names no store, so a connector
// reaches the store only through what it is handed (issue 41).
type Accounts interface {
	Get(ctx context.Context, provider string) (kt.Connection, *oauth2.Token, error)
	Save(ctx context.Context, provider, account string, scopes []string, tok *oauth2.Token) error
	MarkBroken(ctx context.Context, provider, why string) error
}

// Declaration is a connector as keep knows it, in one place: its keep.toml
// table with its schema, how its connectors are built from that table
// (their methods, specs, scopes and sources are on the connectors), and
// how a person connects an account (`keep connect NAME`). Package
// connector/builtin lists every declaration keep ships; the daemon, the
// config, the CLI, grants and docs/scripts.md all read that list, so a new
// connector is one new package and one line there.
type Declaration struct {
	// Name is the declaration's name: its table is [connectors.NAME] and
	// its connect command `keep connect NAME`. Its connectors may have
	// other names (google declares gmail, sheets and calendar).
	Name string
	// Doc says what the declaration sets up, for docs/scripts.md.
	Doc string
	// Config is its table's schema (config.Section, Name = Name); New nil:
	// it has none.
	Config config.Section
	// Build makes its connectors from the decoded table (a pointer to
	// Config.New's type, or nil when it has none) and what the host gives.
	Build func(table any, h *Host) ([]*Connector, error)
	// PerRoot says its connectors are built again for each workflow's
	// files root (files).
	PerRoot bool
	// Connect, when set, is `keep connect NAME`.
	Connect *Connect
}

// Host is what keep gives the connectors it builds.
type Host struct {
	// Config is the whole configuration: a connector may read another's
	// table (custom connectors reach URLs as [connectors.http] allows).
	Config config.Config
	// FilesRoot is the folder of the files connector.
	FilesRoot string
	// Accounts holds the connected accounts; nil where none is opened
	// (keep validate, the docs): calls then say to connect one.
	Accounts Accounts
	// Guard is the address guard of connectors that reach URLs a script
	// or keep.toml names.
	Guard *netguard.Guard
	// Live says the connectors will make calls (keep serve, keep run):
	// Build may open pools and connections then, and register their
	// closing with OnClose.
	Live bool
	// StoreURL is keep's own store when it is PostgreSQL (empty on
	// SQLite): the sql connector refuses a declared database that is it.
	StoreURL string
	closers  []func()
}

// OnClose registers f to run when keep closes.
func (h *Host) OnClose(f func()) { h.closers = append(h.closers, f) }

// Close runs what OnClose registered.
func (h *Host) Close() {
	for _, f := range h.closers {
		f()
	}
	h.closers = nil
}

// Connect is how a person connects an account for a declaration.
type Connect struct {
	// Usage is the command's arguments after NAME, like "--token xoxb-…".
	Usage string
	// Doc says what it does, for keep connect --help.
	Doc string
	// Run connects.
	Run func(ctx context.Context, c ConnectCall) error
}

// ConnectCall is one `keep connect NAME …`.
type ConnectCall struct {
	// Table is the declaration's decoded table.
	Table any
	// Args are the arguments after NAME.
	Args []string
	// Token is --token (or its environment variable), for a token-based
	// service.
	Token string
	// Out is where to talk to the person.
	Out io.Writer
	// Accounts opens the store's connected accounts.
	Accounts func() (Accounts, error)
	// Uses lists the methods ("gmail.send") the deployed workflows and the
	// scripts named in Args call.
	Uses func(scripts []string) ([]string, error)
}
