package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/keep-run/keep/internal/api"
)

// APISecretFile holds the instance secret of a data directory (0600):
// a state change through keep serve's API must carry it (Authorization:
// Bearer …) or keep serve's --token. keep's CLI reads it beside the data
// and sends it; whoever can read the data directory can act on it anyway.
// A header anybody can send (X-Keep-Client) once sufficed, and a script
// granted http.request acted on keep through its own API (issue 23).
const APISecretFile = api.APISecretName

// APISecretPath is the instance secret's file in dataDir.
func APISecretPath(dataDir string) string { return filepath.Join(dataDir, APISecretFile) }

// loadAPISecret returns the data directory's instance secret, creating it
// at the first start. Only the holder of the engine lock calls it, so two
// processes never create it at once.
func loadAPISecret(dataDir string) (string, error) {
	s, err := ReadAPISecret(dataDir)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	s = hex.EncodeToString(b)
	path := APISecretPath(dataDir)
	if err := writeWhole(path, []byte(s+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("create the API secret %s: %w", path, err)
	}
	return s, nil
}

// ReadAPISecret reads the instance secret of dataDir (what the CLI sends
// to the keep serve of that data directory). A file others may read is
// refused: the secret lets its reader act as any person.
func ReadAPISecret(dataDir string) (string, error) {
	path := APISecretPath(dataDir)
	info, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if info.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s may be read by other users (mode %v): run chmod 600 %s", path, info.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 32 {
		return "", fmt.Errorf("%s is not an API secret (delete it: keep serve makes a new one at start)", path)
	}
	return s, nil
}
