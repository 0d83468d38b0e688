package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/daemon"
)

// viaAPI sends a request to a keep serve running on the data directory,
// so that a person's action acts at once and open pages update, and
// decodes its reply into out. handled is false when no keep serve answers;
// the caller then works on the store itself.
func (a *app) viaAPI(method, path string, body, out any) (handled bool, err error) {
	apiErr, handled, err := a.callAPI(method, path, body, out)
	if apiErr != nil {
		return handled, errors.New(apiErr.Message)
	}
	return handled, err
}

// callAPI is viaAPI that hands back the API's error object whole (its code
// and, for an invalid script, its problems).
func (a *app) callAPI(method, path string, body, out any) (apiErr *api.ErrorBody, handled bool, err error) {
	addr, instance, rerr := daemon.ReadAddr(a.dataDir)
	if rerr != nil || !a.isOurServe(addr, instance) {
		return nil, false, nil
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	if err != nil {
		return nil, false, nil
	}
	req.Header.Set("X-Keep-Actor", a.by)
	req.Header.Set("Content-Type", "application/json")
	// The data directory's instance secret proves this is its owner (and
	// makes keep serve believe --by); KEEP_TOKEN serves who cannot read it.
	if secret, err := daemon.ReadAPISecret(a.dataDir); err == nil {
		req.Header.Set("Authorization", "Bearer "+secret)
	} else if t := os.Getenv("KEEP_TOKEN"); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	} else if method != http.MethodGet {
		return nil, true, fmt.Errorf("a keep serve runs on %s, and acting through it needs the instance secret, which cannot be read: %v (or set KEEP_TOKEN to keep serve's --token)", a.dataDir, err)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, false, nil // no keep serve there (a stale address file)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, true, fmt.Errorf("reading keep serve's answer: %w", err)
	}
	if resp.StatusCode >= 400 {
		var e api.ErrorReply
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Message == "" {
			return nil, true, fmt.Errorf("keep serve answered %s with something that is not an error object", resp.Status)
		}
		return &e.Error, true, nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, true, fmt.Errorf("keep serve answered %s with something that is not the expected JSON: %v", resp.Status, err)
	}
	return nil, true, nil
}

// isOurServe asks the address whether it is the keep serve that recorded
// it (the instance id in serve.addr), before anything — a decision, the
// token — is sent there. After a kill -9 the file stays behind, and the port
// may belong to another program or another data directory's keep serve.
func (a *app) isOurServe(addr, instance string) bool {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + api.InstancePath)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var who struct {
		Instance string `json:"instance"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&who) != nil {
		return false
	}
	return who.Instance == instance
}
