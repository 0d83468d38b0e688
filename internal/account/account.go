// Package account keeps the accounts keep acts with (`keep connect
// google`): their OAuth 2.0 tokens sealed with AES-256-GCM in the store, the
// key in a 0600 file of the data directory or KEEP_SECRET_KEY, refreshed
// when they expire and saved again, never printed.
package account

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/store"
)

// KeyEnv names the environment variable that holds the secret key (32
// bytes, hex or base64). Nodes sharing a PostgreSQL store need the same one.
const KeyEnv = "KEEP_SECRET_KEY"

// KeyFile is the key's file in the data directory when KeyEnv is unset.
const KeyFile = "secret.key"

// Box seals and opens credentials.
type Box struct{ aead cipher.AEAD }

// LoadKey returns the box of KEEP_SECRET_KEY, or of dataDir/secret.key,
// which it creates (0600) on first use.
func LoadKey(dataDir string) (*Box, error) {
	if v := strings.TrimSpace(os.Getenv(KeyEnv)); v != "" {
		key, err := decodeKey(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", KeyEnv, err)
		}
		return newBox(key)
	}
	path := filepath.Join(dataDir, KeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return LoadKey(dataDir) // another process made it first
		}
		if err != nil {
			return nil, fmt.Errorf("create the secret key %s: %w", path, err)
		}
		_, err = f.WriteString(hex.EncodeToString(key) + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("write the secret key %s: %w", path, err)
		}
		return newBox(key)
	}
	if err != nil {
		return nil, fmt.Errorf("read the secret key %s: %w", path, err)
	}
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the secret key %s can be read by others (mode %v); run chmod 600 %s", path, info.Mode().Perm(), path)
	}
	key, err := decodeKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("the secret key %s: %v", path, err)
	}
	return newBox(key)
}

func decodeKey(v string) ([]byte, error) {
	if k, err := hex.DecodeString(v); err == nil && len(k) == 32 {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(v); err == nil && len(k) == 32 {
		return k, nil
	}
	return nil, fmt.Errorf("must be 32 bytes as 64 hex digits or base64 (make one with: openssl rand -hex 32)")
}

func newBox(key []byte) (*Box, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plain with a fresh nonce, bound to what (the provider), so
// one provider's sealed bytes cannot be passed off as another's.
func (b *Box) Seal(what string, plain []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize())
	rand.Read(nonce)
	return b.aead.Seal(nonce, nonce, plain, []byte(what))
}

// ErrWrongKey means the credentials were sealed with another key.
var ErrWrongKey = errors.New("the stored credentials were sealed with another secret key")

// Open decrypts what Seal made.
func (b *Box) Open(what string, sealed []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n {
		return nil, ErrWrongKey
	}
	plain, err := b.aead.Open(nil, sealed[:n], sealed[n:], []byte(what))
	if err != nil {
		return nil, ErrWrongKey
	}
	return plain, nil
}

// Accounts reads and writes the connected accounts.
type Accounts struct {
	Store store.Store
	Box   *Box
	Now   func() time.Time
}

func (a *Accounts) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Save records a provider's account and token (a new connection replaces
// the one before, and clears what broke it).
func (a *Accounts) Save(ctx context.Context, provider, account string, scopes []string, tok *oauth2.Token) error {
	plain, err := json.Marshal(tok)
	if err != nil {
		return err
	}
	redact.Learn(tok.AccessToken, tok.RefreshToken)
	now := a.now().UnixMilli()
	return a.Store.Update(ctx, func(tx store.Tx) error {
		c, err := tx.ConnectionGet(provider)
		if errors.Is(err, kt.ErrNotFound) {
			c = kt.Connection{Provider: provider, CreatedAt: now}
		} else if err != nil {
			return err
		}
		c.Account, c.Scopes, c.Sealed, c.Broken, c.UpdatedAt = account, scopes, a.Box.Seal(provider, plain), "", now
		return tx.ConnectionPut(c)
	})
}

// Get returns a provider's connection and its token.
func (a *Accounts) Get(ctx context.Context, provider string) (kt.Connection, *oauth2.Token, error) {
	var c kt.Connection
	err := a.Store.View(ctx, func(tx store.Tx) error {
		var err error
		c, err = tx.ConnectionGet(provider)
		return err
	})
	if err != nil {
		return c, nil, err
	}
	plain, err := a.Box.Open(provider, c.Sealed)
	if err != nil {
		return c, nil, err
	}
	var tok oauth2.Token
	if err := json.Unmarshal(plain, &tok); err != nil {
		return c, nil, fmt.Errorf("the stored %s credentials are unreadable: %v", provider, err)
	}
	redact.Learn(tok.AccessToken, tok.RefreshToken)
	return c, &tok, nil
}

// MarkBroken records why a provider's credentials stopped working (the
// page and keep connections show it until the account is connected again).
func (a *Accounts) MarkBroken(ctx context.Context, provider, why string) error {
	return a.Store.Update(ctx, func(tx store.Tx) error {
		c, err := tx.ConnectionGet(provider)
		if err != nil {
			return err
		}
		c.Broken, c.UpdatedAt = why, a.now().UnixMilli()
		return tx.ConnectionPut(c)
	})
}

// List returns every connection (never the credentials).
func (a *Accounts) List(ctx context.Context) ([]kt.Connection, error) {
	var out []kt.Connection
	err := a.Store.View(ctx, func(tx store.Tx) error {
		var err error
		out, err = tx.ConnectionList()
		return err
	})
	for i := range out {
		out[i].Sealed = nil
	}
	return out, err
}

// Source hands out a provider's access token: the stored one while it is
// valid, else a refreshed one, which it saves (sealed) for the next call
// and the next process.
type Source struct {
	a        keeper
	provider string
	conf     *oauth2.Config
	mu       sync.Mutex
	tok      *oauth2.Token
	scopes   []string
	rejected string // an access token the provider refused (Invalidate)
}

// keeper is what a Source reads and saves the account through:
// *Accounts, or what a connector was handed as its accounts
// (connector.Accounts, the same methods).
type keeper interface {
	Get(ctx context.Context, provider string) (kt.Connection, *oauth2.Token, error)
	Save(ctx context.Context, provider, account string, scopes []string, tok *oauth2.Token) error
	MarkBroken(ctx context.Context, provider, why string) error
}

// NewSource returns the token source of a provider's account kept by a.
func NewSource(a keeper, provider string, conf *oauth2.Config) *Source {
	return &Source{a: a, provider: provider, conf: conf}
}

// ErrNotConnected means no account of the provider was connected.
var ErrNotConnected = errors.New("not connected")

// ErrRevoked means the provider refused the refresh token: a person must
// connect the account again.
var ErrRevoked = errors.New("the provider refused the account's grant (revoked, or expired)")

// Token returns a valid access token.
func (s *Source) Token(ctx context.Context) (*oauth2.Token, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok == nil {
		c, tok, err := s.a.Get(ctx, s.provider)
		if errors.Is(err, kt.ErrNotFound) {
			return nil, nil, ErrNotConnected
		}
		if err != nil {
			return nil, nil, err
		}
		if c.Broken != "" {
			return nil, nil, fmt.Errorf("%w: %s", ErrRevoked, c.Broken)
		}
		s.tok, s.scopes = tok, c.Scopes
	}
	if s.tok.Valid() && s.tok.AccessToken != s.rejected {
		return s.tok, s.scopes, nil
	}
	stale := *s.tok
	stale.Expiry = time.Unix(1, 0) // refresh now, whatever the expiry said
	fresh, err := s.conf.TokenSource(ctx, &stale).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
			why := re.ErrorCode
			if re.ErrorDescription != "" {
				why = re.ErrorDescription
			}
			if merr := s.a.MarkBroken(ctx, s.provider, why); merr != nil {
				return nil, nil, merr
			}
			s.tok = nil
			return nil, nil, fmt.Errorf("%w: %s", ErrRevoked, why)
		}
		return nil, nil, fmt.Errorf("refresh the %s access token: %w", s.provider, err)
	}
	c, _, err := s.a.Get(ctx, s.provider)
	if err != nil {
		return nil, nil, err
	}
	if err := s.a.Save(ctx, s.provider, c.Account, c.Scopes, fresh); err != nil {
		return nil, nil, err
	}
	s.tok = fresh
	return fresh, s.scopes, nil
}

// Invalidate forgets the access token after the provider refused it (a
// 401): the next Token refreshes, and reads the store again first (another
// process may have connected the account anew).
func (s *Source) Invalidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != nil {
		s.rejected = s.tok.AccessToken
	}
	s.tok = nil
}
