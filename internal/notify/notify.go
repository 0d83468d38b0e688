// Package notify tells a person when keep needs them (issue 16): each
// blocked run's card goes out once on every channel of [notify] (a
// webhook, an email), and a daily digest lists what still waits. What was
// sent is kept in the store (notices), so a restart does not send it
// again; a channel that fails is tried again at the next pass and never
// holds a workflow up.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector/email"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// Notice is what a channel sends.
type Notice struct {
	// Kind is "blocked" (one run) or "digest" (all that still wait).
	Kind string `json:"kind"`
	// Subject is one line for people.
	Subject string `json:"subject"`
	// Text is the body for people: what, why, what to do, the link.
	Text string `json:"text"`
	// Link is the run's page (blocked) or the overview (digest).
	Link string `json:"link,omitempty"`
	// Cards are the blocked runs' cards, as `keep status --json` has them.
	Cards []apitype.Card `json:"cards"`
}

// Channel is one way to reach a person.
type Channel interface {
	Name() string
	Send(ctx context.Context, n Notice) error
}

// Notifier sends the notices.
type Notifier struct {
	Store    store.Store
	Channels []Channel
	PageURL  string
	Digest   string // "HH:MM" UTC, or ""
	Now      func() time.Time
	Log      *slog.Logger
}

// Senders are how the channels of [notify] send.
type Senders struct {
	// Mail is the mail server an email notice goes through.
	Mail email.Config
	// Slack posts to a Slack channel as the connected bot (nil: no Slack).
	Slack Poster
	// Guard is what the webhook's connections pass, as the http
	// connector's do ([connectors.http] allow): a webhook on this machine
	// or a private network must be allowed there. (Slack's endpoint is
	// Slack's, or a stand-in keep.toml names; no script chooses it.)
	Guard *netguard.Guard
}

// New builds the notifier of [notify], sending through s; nil when it
// names no channel.
func New(st store.Store, n config.Notify, s Senders, log *slog.Logger) *Notifier {
	var chans []Channel
	if n.Webhook != "" {
		base := http.DefaultTransport.(*http.Transport)
		chans = append(chans, &Webhook{URL: n.Webhook, Client: &http.Client{Timeout: 15 * time.Second, Transport: s.Guard.Transport(base)}})
	}
	if n.Email != "" {
		chans = append(chans, &Email{To: n.Email, Mail: s.Mail})
	}
	if n.Slack != "" && s.Slack != nil {
		chans = append(chans, &Slack{Channel: n.Slack, Post: s.Slack})
	}
	if len(chans) == 0 {
		return nil
	}
	return &Notifier{Store: st, Channels: chans, PageURL: n.PageURL, Digest: n.Digest, Now: time.Now, Log: log}
}

// Run sends notices every interval (and when woken) until ctx ends.
func (nt *Notifier) Run(ctx context.Context, interval time.Duration, wake <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := nt.Pass(ctx); err != nil && ctx.Err() == nil {
			nt.Log.Warn("notices", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
	}
}

// Pass sends what is due: each blocked run's notice on each channel that
// has not had it, and the digest once a day after its time.
func (nt *Notifier) Pass(ctx context.Context) error {
	cards, err := report.Blocked(ctx, nt.Store, "")
	if err != nil {
		return err
	}
	var errs []string
	for _, c := range cards {
		n := nt.blocked(c)
		if err := nt.sendOnce(ctx, "run:"+c.RunID, n); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if nt.Digest != "" && len(cards) > 0 {
		now := nt.Now().UTC()
		if now.Format("15:04") >= nt.Digest {
			if err := nt.sendOnce(ctx, "digest:"+now.Format("2006-01-02"), nt.digest(cards)); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// sendOnce sends n on every channel that has not sent key, and records
// each success. A crash between a send and its record sends it again:
// a person told twice beats a person never told.
func (nt *Notifier) sendOnce(ctx context.Context, key string, n Notice) error {
	var errs []string
	for _, ch := range nt.Channels {
		var sent int64
		if err := nt.Store.View(ctx, func(tx store.Tx) error {
			var err error
			sent, err = tx.NoticeSent(key, ch.Name())
			return err
		}); err != nil {
			return err
		}
		if sent != 0 {
			continue
		}
		if err := ch.Send(ctx, n); err != nil {
			errs = append(errs, fmt.Sprintf("%s notice %s: %v", ch.Name(), key, err))
			continue
		}
		if err := nt.Store.Update(ctx, func(tx store.Tx) error { return tx.NoticePut(key, ch.Name(), nt.Now().UnixMilli()) }); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func (nt *Notifier) link(path string) string {
	if nt.PageURL == "" {
		return ""
	}
	return nt.PageURL + path
}

func what(c apitype.Card) string {
	switch {
	case c.Mutation != nil:
		return c.Mutation.Tool + "." + c.Mutation.Method + " → " + c.Mutation.Target
	case c.Title != "":
		return c.Title
	}
	return c.Handler
}

func doLines(c apitype.Card) []string {
	var out []string
	if c.Reconnect != "" {
		out = append(out, "keep connect "+c.Reconnect+" (reconnect the account first)")
	}
	// Safest first, each with what it risks (the card's order and words).
	for _, ch := range c.Choices {
		out = append(out, ch.Command(c.RunID)+" ("+ch.Risk.Label()+": "+ch.Says+")")
	}
	return out
}

func (nt *Notifier) blocked(c apitype.Card) Notice {
	var b strings.Builder
	fmt.Fprintf(&b, "%s needs you (run %s, %s).\n\nWhat: %s\n", c.Workflow, c.RunID, c.Status, what(c))
	for _, in := range c.Inputs {
		fmt.Fprintf(&b, "Input: %s\n", in.Title)
	}
	fmt.Fprintf(&b, "Why: %s\n\nWhat you can do:\n  %s\n", c.Reason, strings.Join(doLines(c), "\n  "))
	link := nt.link("/runs/" + c.RunID)
	if link != "" {
		fmt.Fprintf(&b, "\nThe card: %s\n", link)
	}
	return Notice{Kind: "blocked", Subject: fmt.Sprintf("keep: %s needs you: %s", c.Workflow, what(c)), Text: b.String(), Link: link, Cards: []apitype.Card{c}}
}

func (nt *Notifier) digest(cards []apitype.Card) Notice {
	var b strings.Builder
	fmt.Fprintf(&b, "%d runs still wait for you:\n\n", len(cards))
	for _, c := range cards {
		fmt.Fprintf(&b, "- %s: %s — %s\n", c.Workflow, what(c), c.Reason)
	}
	if l := nt.link("/"); l != "" {
		fmt.Fprintf(&b, "\nAll of them: %s\n", l)
	}
	return Notice{Kind: "digest", Subject: fmt.Sprintf("keep: %d runs still wait for you", len(cards)), Text: b.String(), Link: nt.link("/"), Cards: cards}
}

// Webhook POSTs the notice as JSON; any 2xx is delivered.
type Webhook struct {
	URL    string
	Client *http.Client
}

func (w *Webhook) Name() string { return "webhook" }

func (w *Webhook) Send(ctx context.Context, n Notice) error {
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "keep")
	resp, err := w.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}

// Email sends the notice through [connectors.email]'s SMTP server.
type Email struct {
	To   string
	Mail email.Config
}

func (e *Email) Name() string { return "email" }

func (e *Email) Send(ctx context.Context, n Notice) error {
	return email.Notify(ctx, e.Mail, e.To, n.Subject, n.Text)
}

// Poster posts a text to a Slack channel (the slack connector's bot).
type Poster func(ctx context.Context, channel, text string) error

// Slack posts the notice into a channel.
type Slack struct {
	Channel string
	Post    Poster
}

func (s *Slack) Name() string { return "slack" }

// Send posts the subject on its first line and the text below, as plain
// text: the poster turns Slack's formatting off (a notice quotes outside
// data — a title, an error — which must show as it is written, never as
// bold, a quote, code or a link), so the subject is not made bold either.
func (s *Slack) Send(ctx context.Context, n Notice) error {
	return s.Post(ctx, s.Channel, n.Subject+"\n"+n.Text)
}
