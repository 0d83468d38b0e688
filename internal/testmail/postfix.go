package testmail

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Postfix is Debian's Postfix (package postfix) run for one test as a
// server of its own, on 127.0.0.1: it relays for 127.0.0.0/8 and delivers
// every message for example.com into one maildir (Maildir). Like Postfix
// everywhere, it files nothing into a Sent folder.
type Postfix struct {
	// Addr is the SMTP address (host:port).
	Addr string
	// CAFile is the PEM file of the CA that signed its certificate (TLS).
	CAFile string
	// Maildir is where it delivers mail for example.com.
	Maildir string
	dir     string
}

// StartPostfix runs Postfix; with requireTLS it takes no mail before
// STARTTLS (smtpd_tls_security_level = encrypt) with a certificate for
// 127.0.0.1 signed by CAFile. Postfix's master runs only as root: without
// root or the postfix binary the test is skipped saying so — unless
// KEEP_REQUIRE_POSTFIX is set (.ci/run installs the package and sets it),
// where that is a failure.
func StartPostfix(t testing.TB, requireTLS bool) *Postfix {
	t.Helper()
	bin, err := exec.LookPath("postfix")
	if err == nil && os.Geteuid() != 0 {
		err = fmt.Errorf("postfix's master runs only as root; this test runs as uid %d", os.Geteuid())
	}
	var pf *user.User
	if err == nil {
		pf, err = user.Lookup("postfix")
	}
	if err != nil {
		if os.Getenv("KEEP_REQUIRE_POSTFIX") != "" {
			t.Fatalf("Postfix cannot run here (KEEP_REQUIRE_POSTFIX is set; apt-get install postfix, run as root): %v", err)
		}
		t.Skipf("Postfix cannot run here, so this test against it does not run (apt-get install postfix, run as root): %v", err)
	}
	dir, err := os.MkdirTemp("", "keep-postfix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	p := &Postfix{dir: dir, Maildir: filepath.Join(dir, "mail", "bob") + "/"}
	for _, d := range []string{"conf", "queue", "data", "mail"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Postfix's own data and the mail it delivers belong to its user.
	for _, d := range []string{"data", "mail"} {
		if out, err := exec.Command("chown", "postfix:postfix", filepath.Join(dir, d)).CombinedOutput(); err != nil {
			t.Fatalf("chown %s to postfix: %v %s", d, err, out)
		}
	}
	var port string
	p.Addr, port = freeAddr(t)
	main := postfixMain(dir, pf.Uid, pf.Gid)
	if requireTLS {
		_, p.CAFile = certificate(t)
		certs := filepath.Dir(p.CAFile)
		main += fmt.Sprintf("smtpd_tls_security_level = encrypt\nsmtpd_tls_cert_file = %s\nsmtpd_tls_key_file = %s\n",
			filepath.Join(certs, "cert.pem"), filepath.Join(certs, "key.pem"))
	}
	conf := filepath.Join(dir, "conf")
	if err := os.WriteFile(filepath.Join(conf, "main.cf"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "master.cf"), []byte(strings.ReplaceAll(postfixMaster, "PORT", port)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf, "start-fg")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.Create(filepath.Join(dir, "postfix.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// master runs in a session of its own: stop it by Postfix's command.
		if out, err := exec.Command(bin, "-c", conf, "abort").CombinedOutput(); err != nil {
			t.Errorf("postfix abort: %v %s", err, out)
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-exited
		out.Close()
	})
	p.waitGreeting(t, exited)
	return p
}

// Delivered returns the messages delivered into the maildir, as written.
func (p *Postfix) Delivered(t testing.TB) []string {
	t.Helper()
	var msgs []string
	for _, sub := range []string{"new", "cur"} {
		files, err := os.ReadDir(filepath.Join(p.Maildir, sub))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(p.Maildir, sub, f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, string(b))
		}
	}
	return msgs
}

// WaitDelivered waits until Postfix has delivered n messages (its queue
// delivers on its own after it took the mail) and returns them; a message
// it bounced or deferred fails the test with its log. No time limit but
// the test's own.
func (p *Postfix) WaitDelivered(t testing.TB, n int) []string {
	t.Helper()
	for {
		if got := p.Delivered(t); len(got) >= n {
			return got
		}
		if log := p.Log(); strings.Contains(log, "status=bounced") || strings.Contains(log, "status=deferred") {
			t.Fatalf("Postfix did not deliver:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log is what Postfix logged, for a failure's message.
func (p *Postfix) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "postfix.log"))
	return string(b)
}

// waitGreeting waits until Postfix greets, or its master exits.
func (p *Postfix) waitGreeting(t testing.TB, exited chan error) {
	t.Helper()
	var gone error
	stopped := func() error {
		select {
		case err := <-exited:
			exited <- err
			gone = fmt.Errorf("Postfix stopped before it greeted (%v)", err)
			return gone
		default:
			return nil
		}
	}
	if err := awaitGreeting(p.Addr, "220 ", "QUIT\r\n", stopped); err != nil {
		if gone != nil {
			t.Fatalf("%v:\n%s", gone, p.Log())
		}
		t.Fatalf("Postfix did not greet on %s: %v\n%s", p.Addr, err, p.Log())
	}
}

func postfixMain(dir, uid, gid string) string {
	return strings.NewReplacer("DIR", dir, "UID", uid, "GID", gid).Replace(`compatibility_level = 3.6
queue_directory = DIR/queue
data_directory = DIR/data
maillog_file = /dev/stdout
mail_owner = postfix
setgid_group = postdrop
myhostname = localhost
mydomain = localdomain
myorigin = localhost
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
alias_maps =
alias_database =
relayhost =
virtual_mailbox_domains = example.com
virtual_mailbox_base = DIR/mail
virtual_mailbox_maps = static:bob/
virtual_uid_maps = static:UID
virtual_gid_maps = static:GID
virtual_minimum_uid = 1
`)
}

// postfixMaster is Debian's master.cf cut to what a test uses, chroot off
// (the test's directories are not under a chroot), smtpd on 127.0.0.1:PORT.
const postfixMaster = `127.0.0.1:PORT inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
virtual   unix  -       n       n       -       -       virtual
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
`
