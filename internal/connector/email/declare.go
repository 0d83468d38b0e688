package email

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
)

// Config is [connectors.email]: the mailbox of the email connector (and of
// [notify] email).
type Config struct {
	IMAP       string `toml:"imap" doc:"The mailbox keep reads, \"imaps://user:password@host:993\" (imap:// with STARTTLS)."`
	SMTP       string `toml:"smtp" doc:"The server keep sends through, \"smtp://user:password@host:587\" (STARTTLS when offered; smtps:// for TLS)."`
	From       string `toml:"from" doc:"The sender's address."`
	SentFolder string `toml:"sent_folder" doc:"The folder sent mail is filed in, where reconcile looks (default: the server's \\Sent folder)."`
	// ServerKeepsSent: the SMTP server files what it sends into the Sent
	// folder itself, so "not in Sent" proves "not sent".
	ServerKeepsSent bool `toml:"server_keeps_sent" doc:"The SMTP server files a copy of what it sends into the Sent folder itself (Gmail, Exchange, Fastmail do), so reconcile can prove \"not sent\" (once a message of keep's was seen filed by the server: the connector checks)."`
	// CAFile is a PEM file of the CA (private) that signed the servers'
	// certificates; empty trusts the system's CAs.
	CAFile string `toml:"ca_file" file:"true" doc:"A PEM file of the (private) CA that signed the servers' certificates; unset: the system's CAs."`
	// StartTLS asks STARTTLS of imap:// and smtp:// servers on this
	// machine too (elsewhere it is always asked).
	StartTLS bool `toml:"starttls" doc:"Ask STARTTLS of imap:// and smtp:// servers on this machine too (elsewhere it is always asked)."`
}

// Declaration is the email connector's declaration.
var Declaration = connector.Declaration{
	Name: "email",
	Doc:  "Any mailbox over IMAP and SMTP.",
	Config: config.Section{Name: "email", Doc: "the mailbox of the email connector and of [notify] email. Credentials stay in keep.toml.",
		New: func() any { return &Config{} }, Check: checkConfig},
	Build: func(table any, h *connector.Host) ([]*connector.Connector, error) {
		return []*connector.Connector{New(*table.(*Config))}, nil
	},
}

func checkConfig(v any, cfg *config.Config) error {
	c := v.(*Config)
	if cfg.Notify.Email != "" && (c.SMTP == "" || c.From == "") {
		return fmt.Errorf("[notify] email sends through [connectors.email]: set its smtp and from too")
	}
	scheme := func(key, s string, allowed ...string) error {
		if s == "" {
			return nil
		}
		if u, err := url.Parse(s); err == nil {
			for _, a := range allowed {
				if u.Scheme == a && u.Host != "" {
					return nil
				}
			}
		}
		return config.KeyErrorf(key, "must be a URL like \"%s://user:password@host\" (%s)", allowed[0], strings.Join(allowed, "://, ")+"://")
	}
	if err := scheme("imap", c.IMAP, "imaps", "imap"); err != nil {
		return err
	}
	if err := scheme("smtp", c.SMTP, "smtps", "smtp"); err != nil {
		return err
	}
	if c.From != "" && !strings.Contains(c.From, "@") {
		return config.KeyErrorf("from", "must be an email address, got %q", c.From)
	}
	if c.CAFile != "" {
		b, err := os.ReadFile(c.CAFile)
		if err != nil {
			return config.KeyErrorf("ca_file", "%v", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return config.KeyErrorf("ca_file", "%s holds no PEM certificate (a CA's, \"-----BEGIN CERTIFICATE-----\")", c.CAFile)
		}
	}
	return nil
}

// ConfigOf is the [connectors.email] table of cfg.
func ConfigOf(cfg config.Config) Config { return config.Get[Config](cfg, "email") }
