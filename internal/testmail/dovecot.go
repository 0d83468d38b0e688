package testmail

import (
	"bufio"
	"fmt"
	"github.com/keep-run/keep/internal/testbin"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Dovecot runs Debian's Dovecot (package dovecot-imapd) as an IMAP server
// on 127.0.0.1 for one test, configured as Debian ships it where keep
// meets it: the mailboxes of conf.d/15-mailboxes.conf (Sent marked \Sent,
// none created until asked), TRYCREATE on APPEND to a folder that does not
// exist. Its user is User with Password. It returns the server's address.
// It runs as the test's user (as root, as Debian's dovecot user). Without
// the dovecot binary the test is skipped saying so — unless
// KEEP_REQUIRE_DOVECOT is set (.ci/run installs the package and sets it),
// where that is a failure.
func Dovecot(t testing.TB) string {
	t.Helper()
	addr, _ := DovecotMaildir(t)
	return addr
}

// DovecotMaildir is Dovecot, and the Maildir it keeps User's mail in (a
// folder F is its subdirectory .F), for a test that changes what Dovecot
// keeps beside the mail (its index files) as an administrator would.
func DovecotMaildir(t testing.TB) (addr, maildir string) {
	t.Helper()
	bin, err := exec.LookPath("dovecot")
	if err != nil {
		if os.Getenv("KEEP_REQUIRE_DOVECOT") != "" {
			t.Fatalf("Dovecot cannot run here (KEEP_REQUIRE_DOVECOT is set; apt-get install dovecot-imapd): %v", err)
		}
		t.Skipf("Dovecot cannot run here, so this test against it does not run (apt-get install dovecot-imapd): %v", err)
	}
	dir, err := os.MkdirTemp("", "keep-dovecot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	who, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	group, err := user.LookupGroupId(who.Gid)
	if err != nil {
		t.Fatal(err)
	}
	owner, grp := who.Username, group.Name
	if os.Geteuid() == 0 { // Dovecot serves no mail as root
		owner, grp = "dovecot", "dovecot"
		if out, err := exec.Command("chown", "dovecot:dovecot", home).CombinedOutput(); err != nil {
			t.Fatalf("chown the mail home to dovecot: %v %s", err, out)
		}
	}
	addr, port := freeAddr(t)
	conf := filepath.Join(dir, "dovecot.conf")
	if err := os.WriteFile(conf, []byte(dovecotConf(dir, home, port, owner, grp)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-F", "-c", conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		cmd.Wait()
	})
	waitGreeting(t, addr, filepath.Join(dir, "dovecot.log"))
	// userdb's home is HOME/%n (the user's name before the @), and
	// mail_location ~/Maildir.
	name, _, _ := strings.Cut(User, "@")
	return addr, filepath.Join(home, name, "Maildir")
}

// freeAddr is an address on 127.0.0.1 no one listens on, and its port,
// for a server the test starts.
func freeAddr(t testing.TB) (addr, port string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	_, port, _ = net.SplitHostPort(addr)
	return addr, port
}

func dovecotConf(dir, home, port, owner, group string) string {
	return strings.NewReplacer("DIR", dir, "HOME", home, "PORT", port, "OWNER", owner, "GROUP", group).Replace(`base_dir = DIR/run
state_dir = DIR/state
log_path = DIR/dovecot.log
listen = 127.0.0.1
protocols = imap
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
mail_location = maildir:~/Maildir
first_valid_uid = 1
default_internal_user = OWNER
default_internal_group = GROUP
default_login_user = OWNER
passdb {
  driver = static
  args = password=` + Password + `
}
userdb {
  driver = static
  args = uid=OWNER gid=GROUP home=HOME/%n
}
namespace inbox {
  inbox = yes
  mailbox Drafts {
    special_use = \Drafts
  }
  mailbox Junk {
    special_use = \Junk
  }
  mailbox Trash {
    special_use = \Trash
  }
  mailbox Sent {
    special_use = \Sent
  }
  mailbox "Sent Messages" {
    special_use = \Sent
  }
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = PORT
  }
  inet_listener imaps {
    port = 0
  }
  chroot =
}
service anvil {
  chroot =
}
`)
}

// waitGreeting waits until Dovecot greets on addr; its log says why not.
func waitGreeting(t testing.TB, addr, log string) {
	t.Helper()
	if err := awaitGreeting(addr, "* OK", "", nil); err != nil {
		b, _ := os.ReadFile(log)
		t.Fatalf("Dovecot did not greet on %s: %v\n%s", addr, err, b)
	}
}

// awaitGreeting dials addr until the server's first line starts with
// prefix (then sends bye, if any), or stopped says the server is gone. It
// waits as long as testbin.Patience: a server starting on a busy machine
// is not a failure, only one that never greets.
func awaitGreeting(addr, prefix, bye string, stopped func() error) error {
	var last error
	deadline := time.Now().Add(testbin.Patience())
	for time.Now().Before(deadline) {
		if stopped != nil {
			if err := stopped(); err != nil {
				return err
			}
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if bye != "" {
				c.Write([]byte(bye))
			}
			c.Close()
			if err == nil && strings.HasPrefix(line, prefix) {
				return nil
			}
			last = fmt.Errorf("greeting %q: %v", line, err)
		} else {
			last = err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return last
}
