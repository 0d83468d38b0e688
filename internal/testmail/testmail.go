// Package testmail runs real mail servers on 127.0.0.1 for tests: an IMAP
// server (go-imap's imapserver with its in-memory backend) and an SMTP
// server (go-smtp) that delivers into it, with faults: the connection cut
// right after the server took a message, before its answer; an answer held
// back; and package fault's kinds that SMTP has (QueueKind). Options shape them like the stock servers keep meets: Debian's
// Dovecot (INBOX only, SPECIAL-USE, TRYCREATE on APPEND to a folder that
// does not exist, a certificate of its own, STARTTLS before login) and
// Postfix (files nothing into Sent; submission requires STARTTLS).
package testmail

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"net"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/keep-run/keep/internal/fake/fault"
)

// User and Password log in to both servers.
const (
	User     = "keep@example.com"
	Password = "secret-pw"
)

// Options shape the servers.
type Options struct {
	// KeepsSent makes the SMTP server file what it sends into the Sent folder.
	KeepsSent bool
	// Sent names the Sent folder, marked \Sent (SPECIAL-USE); "" makes
	// none, as stock Dovecot has none.
	Sent string
	// TLS gives both servers a certificate signed by a CA of the test's own
	// (CAFile) and refuses a login before STARTTLS.
	TLS bool
	// Password is User's password on both servers ("" is Password).
	Password string
}

// Server is an IMAP and an SMTP server for one mailbox.
type Server struct {
	IMAPAddr, SMTPAddr string
	// KeepsSent makes the SMTP server file what it sends into Sent.
	KeepsSent bool
	// CAFile is the PEM file of the CA that signed the servers' certificate (Options.TLS).
	CAFile   string
	opts     Options
	stall    chan struct{} // closed to answer a held-back DATA
	held     chan struct{} // closed when a DATA is being held back
	user     *imapmemserver.User
	mu       sync.Mutex
	sent     []string // Message-IDs the SMTP server took
	subjects []string // and their subjects
	raw      []string // and the messages as the server took them
	cut      int      // cut this many connections after taking the message
	before   []string // fault.Drop or fault.Timeout for the next messages: not taken
	refuse   map[string]int
}

// Start runs both servers until the test ends, with a Sent folder.
func Start(t testing.TB, keepsSent bool) *Server {
	return StartWith(t, Options{KeepsSent: keepsSent, Sent: "Sent"})
}

// StartWith runs both servers shaped by o until the test ends.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	if o.Password == "" {
		o.Password = Password
	}
	s := &Server{KeepsSent: o.KeepsSent, opts: o, user: imapmemserver.NewUser(User, o.Password), refuse: map[string]int{}}
	if err := s.user.Create("INBOX", nil); err != nil {
		t.Fatal(err)
	}
	if o.Sent != "" {
		if err := s.user.Create(o.Sent, &imap.CreateOptions{SpecialUse: []imap.MailboxAttr{imap.MailboxAttrSent}}); err != nil {
			t.Fatal(err)
		}
	}
	var tlsCfg *tls.Config
	if o.TLS {
		tlsCfg, s.CAFile = certificate(t)
	}
	mem := imapmemserver.New()
	mem.AddUser(s.user)
	isrv := imapserver.New(&imapserver.Options{NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
		return mem.NewSession(), nil, nil
	}, Caps: imap.CapSet{imap.CapIMAP4rev1: {}, imap.CapSpecialUse: {}, imap.CapListExtended: {}}, InsecureAuth: !o.TLS, TLSConfig: tlsCfg})
	iln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go isrv.Serve(iln)
	ssrv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &session{s: s, c: c}, nil }))
	ssrv.Domain, ssrv.AllowInsecureAuth, ssrv.TLSConfig = "localhost", !o.TLS, tlsCfg
	ssrv.ReadTimeout, ssrv.WriteTimeout = time.Minute, time.Minute
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ssrv.Serve(sln)
	t.Cleanup(func() { s.Release(); isrv.Close(); ssrv.Close() })
	s.IMAPAddr, s.SMTPAddr = iln.Addr().String(), sln.Addr().String()
	return s
}

// Config is the [connectors.email] section that points keep at the servers.
func (s *Server) Config() string {
	c := fmt.Sprintf("[connectors.email]\nimap = \"imap://%s:%s@%s\"\nsmtp = \"smtp://%s:%s@%s\"\nfrom = %q\nserver_keeps_sent = %v\n",
		"keep%40example.com", url.PathEscape(s.opts.Password), s.IMAPAddr, "keep%40example.com", url.PathEscape(s.opts.Password), s.SMTPAddr, User, s.KeepsSent)
	if s.opts.TLS {
		c += fmt.Sprintf("starttls = true\nca_file = %q\n", s.CAFile)
	}
	return c
}

// Hold makes the SMTP server hold back its answer to the next message it
// takes (after taking it whole) until Release, as a stalled relay does;
// the returned channel is closed when it is holding one.
func (s *Server) Hold() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stall, s.held = make(chan struct{}), make(chan struct{})
	return s.held
}

// QueueKind injects one fault of package fault's kinds into the next send,
// as SMTP has it: the message taken, then its answer held back
// (timeout_after_apply, until Release or the test's end) or the connection
// cut (drop_after_apply); the message read whole but not taken, then the
// answer held back (timeout) or the connection cut (drop); the login
// refused (401: 535 5.7.8); the sender refused (403: 550 5.7.1, the login
// may not send as it). It reports false for a kind SMTP has not: a
// status with Retry-After (429), a server error after which the message
// may have been taken (SMTP's reply to the end of DATA is final).
func (s *Server) QueueKind(kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case fault.TimeoutAfterApply:
		s.stall, s.held = make(chan struct{}), make(chan struct{})
	case fault.DropAfterApply:
		s.cut++
	case fault.Timeout, fault.Drop:
		s.before = append(s.before, kind)
	case fault.Status401, fault.Status403:
		s.refuse[kind]++
	default:
		return false
	}
	return true
}

// refused uses up one armed refusal of kind.
func (s *Server) refused(kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse[kind] == 0 {
		return false
	}
	s.refuse[kind]--
	return true
}

// Holding reports whether the SMTP server still holds back an answer.
func (s *Server) Holding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding()
}

func (s *Server) holding() bool {
	if s.stall == nil {
		return false
	}
	select {
	case <-s.stall:
		return false
	default:
		return true
	}
}

// Release lets a held-back answer go.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holding() {
		close(s.stall)
	}
}

// CutAfterData makes the next n messages' connections close right after
// the server took them (delivered, and filed in Sent if it keeps copies),
// before it answers.
func (s *Server) CutAfterData(n int) {
	s.mu.Lock()
	s.cut += n
	s.mu.Unlock()
}

// Sent lists the Message-IDs of the messages the SMTP server took, in order.
func (s *Server) Sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// Messages lists the messages the SMTP server took, whole, in order.
func (s *Server) Messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.raw...)
}

// Subjects lists the subjects of the messages the SMTP server took, in order.
func (s *Server) Subjects() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.subjects...)
}

// Deliver puts a message into the INBOX, as if someone had mailed it.
func (s *Server) Deliver(t testing.TB, from, subject, text string) {
	t.Helper()
	msg := fmt.Sprintf("From: %s\r\nTo: %s\r\nSubject: %s\r\nMessage-ID: <%d.%s@mail.example.com>\r\nDate: %s\r\nContent-Type: text/plain; charset=UTF-8\r\n\r\n%s\r\n",
		from, User, subject, time.Now().UnixNano(), strings.ReplaceAll(from, "@", ".at."), time.Now().UTC().Format(time.RFC1123Z), text)
	if _, err := s.user.Append("INBOX", literal(msg), &imap.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
}

type lit struct{ *bytes.Reader }

func (l lit) Size() int64 { return int64(l.Len()) }

func literal(s string) imap.LiteralReader { return lit{bytes.NewReader([]byte(s))} }

type session struct {
	s *Server
	c *smtp.Conn
}

func (x *session) AuthMechanisms() []string { return []string{"PLAIN"} }

func (x *session) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != User || password != x.s.opts.Password || x.s.refused(fault.Status401) {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "bad credentials"}
		}
		return nil
	}), nil
}

func (x *session) Reset()        {}
func (x *session) Logout() error { return nil }
func (x *session) Mail(from string, _ *smtp.MailOptions) error {
	if from != User || x.s.refused(fault.Status403) {
		return &smtp.SMTPError{Code: 553, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "sender not allowed"}
	}
	return nil
}

func (x *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if strings.HasPrefix(to, "nobody@") {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	}
	return nil
}

func (x *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	msg, err := mail.ReadMessage(bytes.NewReader(b))
	if err != nil {
		return &smtp.SMTPError{Code: 554, Message: "not a message"}
	}
	s := x.s
	s.mu.Lock()
	if len(s.before) > 0 {
		kind := s.before[0]
		s.before = s.before[1:]
		s.mu.Unlock()
		if kind == fault.Drop {
			x.c.Conn().Close()
			return errors.New("cut before taking the message")
		}
		s.wait(make(chan struct{}), make(chan struct{}))
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "not taken"}
	}
	s.sent = append(s.sent, msg.Header.Get("Message-ID"))
	subj, _ := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	s.subjects = append(s.subjects, subj)
	s.raw = append(s.raw, string(b))
	cut := s.cut > 0
	if cut {
		s.cut--
	}
	stall, held := s.stall, s.held
	s.stall, s.held = nil, nil
	s.mu.Unlock()
	if s.KeepsSent {
		s.user.Append(s.opts.Sent, literal(string(b)), &imap.AppendOptions{Flags: []imap.Flag{imap.FlagSeen}})
	}
	if cut {
		x.c.Conn().Close()
	}
	if stall != nil {
		s.wait(stall, held)
	}
	return nil
}

// wait holds an answer back until Release (or a minute: a test that never
// releases it ends anyway); held is closed once Holding sees it.
func (s *Server) wait(stall, held chan struct{}) {
	s.mu.Lock()
	s.stall = stall // Holding and Release see it until released
	s.mu.Unlock()
	close(held)
	select {
	case <-stall:
	case <-time.After(time.Minute):
	}
}

// certificate makes a CA of the test's own and a certificate it signs for
// 127.0.0.1 and localhost; it returns the servers' TLS configuration and
// the CA's PEM file (with cert.pem and key.pem beside it).
func certificate(t testing.TB) (*tls.Config, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "keep test CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	// The certificate and its key as files too, next to ca.pem, for a
	// server that reads them (Postfix).
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, file
}

// DeliverRaw puts a message, as given, into the INBOX.
func (s *Server) DeliverRaw(t testing.TB, msg string) {
	t.Helper()
	if _, err := s.user.Append("INBOX", literal(msg), &imap.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
}
