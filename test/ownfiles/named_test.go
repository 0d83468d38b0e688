package ownfiles

import (
	"bytes"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 38, attack: keep.toml names files keep reads while it runs —
// [connectors.email] ca_file, the CA keep trusts for the mail servers,
// read again at each connection. With the README's layout it lies in the
// script's folder, the files root, and a workflow granted only
// files.write replaced it: keep then trusted the script's CA for IMAP and
// SMTP (where it logs in with the mailbox's password). Now a file
// keep.toml names is keep's own like keep.toml: the write fails as a
// logic error saying so, and the file is unchanged.
func TestAFileKeepTomlNamesIsKeepsOwn(t *testing.T) {
	ca := httptest.NewTLSServer(http.NotFoundHandler())
	ca.Close()
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw}))
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "mail-ca.pem"), []byte(caPEM), 0o644)
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[connectors.email]\nca_file = \"mail-ca.pem\"\n"), 0o644)
	wf := strings.NewReplacer("%GRAB%", planted("mail-ca.pem"), "%SINK%", "http://127.0.0.1:9").Replace(thief)
	os.WriteFile(filepath.Join(dir, "thief.js"), []byte(wf), 0o644)
	code, out := run(t, dir, "run", "thief.js")
	if b, _ := os.ReadFile(filepath.Join(dir, "mail-ca.pem")); string(b) != caPEM {
		t.Fatalf("the script replaced the CA keep.toml names (keep run exited %d): it holds\n%s\n%s", code, b, out)
	}
	if code == 0 || !strings.Contains(out, "keep's own") || !strings.Contains(out, "mail-ca.pem") {
		t.Fatalf("keep run exited %d; want the write refused, saying mail-ca.pem is keep's own:\n%s", code, out)
	}
}

// Issue 38, attack: the quick start puts the keep binary in the script's
// folder (./keep run workflow.js), the files root. A workflow granted
// only files.write replaced ./keep: keep starts every sandbox worker from
// its own path, so every later run failed, and the person's next ./keep
// did not start. Now keep's own program is keep's own file: the write
// fails as a logic error saying so, and ./keep is unchanged.
func TestKeepsOwnProgramIsKeepsOwn(t *testing.T) {
	dir := t.TempDir()
	bin, err := os.ReadFile(keepBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	wf := strings.NewReplacer("%GRAB%", planted("keep"), "%SINK%", "http://127.0.0.1:9").Replace(thief)
	os.WriteFile(filepath.Join(dir, "thief.js"), []byte(wf), 0o644)
	cmd := exec.Command("./keep", "run", "thief.js")
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	if now, _ := os.ReadFile(filepath.Join(dir, "keep")); !bytes.Equal(now, bin) {
		t.Fatalf("the script replaced ./keep (%d bytes now):\n%s", len(now), out)
	}
	if !strings.Contains(string(out), "keep's own program") {
		t.Fatalf("want the write refused, saying ./keep is keep's own program:\n%s", out)
	}
}
