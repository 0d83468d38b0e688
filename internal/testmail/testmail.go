// Package testmail runs real mail servers on 127.0.0.1 for tests: an IMAP
// server (go-imap's imapserver with its in-memory backend) and an SMTP
// server (go-smtp) that delivers into it, with faults: the connection cut
// right after the server took a message, before its answer.
package testmail

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// User and Password log in to both servers.
const (
	User     = "keep@example.com"
	Password = "secret-pw"
)

// Server is an IMAP and an SMTP server for one mailbox.
type Server struct {
	IMAPAddr, SMTPAddr string
	// KeepsSent makes the SMTP server file what it sends into Sent.
	KeepsSent bool
	user      *imapmemserver.User
	mu        sync.Mutex
	sent      []string // Message-IDs the SMTP server took
	subjects  []string // and their subjects
	raw       []string // and the messages as the server took them
	cut       int      // cut this many connections after taking the message
}

// Start runs both servers until the test ends.
func Start(t testing.TB, keepsSent bool) *Server {
	t.Helper()
	s := &Server{KeepsSent: keepsSent, user: imapmemserver.NewUser(User, Password)}
	for _, box := range []string{"INBOX", "Sent"} {
		if err := s.user.Create(box, nil); err != nil {
			t.Fatal(err)
		}
	}
	mem := imapmemserver.New()
	mem.AddUser(s.user)
	isrv := imapserver.New(&imapserver.Options{NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
		return mem.NewSession(), nil, nil
	}, Caps: imap.CapSet{imap.CapIMAP4rev1: {}}, InsecureAuth: true})
	iln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go isrv.Serve(iln)
	ssrv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &session{s: s, c: c}, nil }))
	ssrv.Domain, ssrv.AllowInsecureAuth = "localhost", true
	ssrv.ReadTimeout, ssrv.WriteTimeout = time.Minute, time.Minute
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ssrv.Serve(sln)
	t.Cleanup(func() { isrv.Close(); ssrv.Close() })
	s.IMAPAddr, s.SMTPAddr = iln.Addr().String(), sln.Addr().String()
	return s
}

// Config is the [connectors.email] section that points keep at the servers.
func (s *Server) Config() string {
	return fmt.Sprintf("[connectors.email]\nimap = \"imap://%s:%s@%s\"\nsmtp = \"smtp://%s:%s@%s\"\nfrom = %q\nserver_keeps_sent = %v\n",
		"keep%40example.com", Password, s.IMAPAddr, "keep%40example.com", Password, s.SMTPAddr, User, s.KeepsSent)
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
		if username != User || password != Password {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "bad credentials"}
		}
		return nil
	}), nil
}

func (x *session) Reset()        {}
func (x *session) Logout() error { return nil }
func (x *session) Mail(from string, _ *smtp.MailOptions) error {
	if from != User {
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
	s.sent = append(s.sent, msg.Header.Get("Message-ID"))
	subj, _ := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	s.subjects = append(s.subjects, subj)
	s.raw = append(s.raw, string(b))
	cut := s.cut > 0
	if cut {
		s.cut--
	}
	s.mu.Unlock()
	if s.KeepsSent {
		s.user.Append("Sent", literal(string(b)), &imap.AppendOptions{Flags: []imap.Flag{imap.FlagSeen}})
	}
	if cut {
		x.c.Conn().Close()
	}
	return nil
}
