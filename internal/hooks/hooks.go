// Package hooks is the webhooks' listener (issue 26): POST
// /hooks/{wf}/{name}, served by keep serve --webhooks-addr on an address
// of its own. It reads a request within its bound, hands it to its
// Deliverer (keep's intake: intake.Webhooks.Deliver), and answers the sender with what keep made of it. It
// serves nothing else: none of the API's routes, none of its
// authentication (a webhook is proven by its own verify, never by keep's
// token or instance secret), so exposing it exposes no API action.
package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/keep-run/keep/internal/hookreq"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// Deliverer carries a webhook request out (intake.Webhooks.Deliver) and
// says how large a body a workflow's webhooks take. The listener needs
// no more of keep: it knows the request and the answer (hookreq), never
// the engine, so it cannot reach a run, a store or a person's action.
type Deliverer interface {
	Deliver(ctx context.Context, h hookreq.Hook) (hookreq.Delivered, error)
	WebhookMaxBody(ctx context.Context, wf string) int64
}

// Path is where webhooks are served: Path + "{wf}/{name}".
const Path = "/hooks/"

// Reply is what a sender is answered (JSON).
type Reply struct {
	OK       bool   `json:"ok"`
	Status   string `json:"status,omitempty"` // accepted, duplicate, held, refused, failed
	Delivery string `json:"delivery,omitempty"`
	// Record is the delivery's record: what the sender quotes to the
	// workflow's owner, who sees why under it (keep webhooks WF).
	Record  int64  `json:"record,omitempty"`
	Inputs  int    `json:"inputs"`
	Events  int    `json:"events"`
	Message string `json:"message"`
}

// codes is what each outcome answers: 2xx only for a delivery whose work
// is committed (or was, before), or that keep holds durably to take it
// later (202); 5xx where the sender should retry (the handler failed, the
// webhook holds as many as keep holds, or the hold could not be written).
var codes = map[hookreq.Why]int{
	hookreq.WhyAccepted:  http.StatusOK,
	hookreq.WhyDuplicate: http.StatusOK,
	hookreq.WhyNotFound:  http.StatusNotFound,
	hookreq.WhyTooLarge:  http.StatusRequestEntityTooLarge,
	hookreq.WhyBadSig:    http.StatusUnauthorized,
	hookreq.WhyBadInput:  http.StatusBadRequest,
	hookreq.WhyNoSecret:  http.StatusServiceUnavailable,
	hookreq.WhyFailed:    http.StatusInternalServerError,
	// Kept for a reason of keep's own: taken once it is gone (issue 40).
	hookreq.WhyHeld:     http.StatusAccepted,
	hookreq.WhyHeldFull: http.StatusServiceUnavailable,
}

// The listener's bounds: it faces the internet, so no sender, signed or
// not, holds more of keep than these. At most MaxConns connections are
// open at once (the next wait in the system's queue until one closes),
// so senders cannot take every file descriptor keep has, which its store
// and connectors need too. A request's headers are at most MaxHeaderBytes
// (431 beyond); its headers come within 10 seconds and its body within a
// minute of the connection's start (then it is cut); at most MaxInFlight
// deliveries are read or handled at once, so the bodies held are at most
// MaxInFlight times webhook_max_body, and the sender beyond them is
// answered 503 at once, its body not read: it sends it again.
const (
	MaxConns       = 1024
	MaxHeaderBytes = 64 << 10
	MaxInFlight    = 64
)

// Server is the webhooks' http.Server, within the listener's bounds.
func Server(e Deliverer, log *slog.Logger) *http.Server {
	return &http.Server{Handler: Handler(e, log), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		IdleTimeout: time.Minute, MaxHeaderBytes: MaxHeaderBytes}
}

// Serve serves srv on ln, at most MaxConns connections at once; it returns
// when srv is closed.
func Serve(srv *http.Server, ln net.Listener) error {
	return srv.Serve(netutil.LimitListener(ln, MaxConns))
}

// Handler serves the webhooks of e's store.
func Handler(e Deliverer, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	slots := make(chan struct{}, MaxInFlight)
	mux.HandleFunc("POST "+Path+"{wf}/{name}", func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			w.Header().Set("Retry-After", "10")
			answer(w, http.StatusServiceUnavailable, Reply{Message: fmt.Sprintf("keep is taking as many webhook deliveries as it takes at once (%d); this one was not read, and nothing of it was kept: send it again", MaxInFlight)})
			return
		}
		deliver(w, r, e, log)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			answer(w, http.StatusMethodNotAllowed, Reply{Message: "this address serves only webhooks: POST " + Path + "WORKFLOW/NAME"})
			return
		}
		answer(w, http.StatusNotFound, Reply{Message: "this address serves only webhooks: POST " + Path + "WORKFLOW/NAME"})
	})
	return mux
}

func deliver(w http.ResponseWriter, r *http.Request, e Deliverer, log *slog.Logger) {
	h := hookreq.Hook{Workflow: r.PathValue("wf"), Name: r.PathValue("name"), Method: r.Method, Header: r.Header, Query: r.URL.Query()}
	limit := e.WebhookMaxBody(r.Context(), h.Workflow)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		h.TooLarge = true
	case err != nil:
		// The sender went away or sent a broken body: there is no one to answer.
		answer(w, http.StatusBadRequest, Reply{Message: fmt.Sprintf("the body could not be read: %v", err)})
		return
	default:
		h.Body = body
	}
	// The delivery is carried out to its end even when the sender hangs up:
	// either its commit is made or nothing is (the sender retries).
	d, err := e.Deliver(context.WithoutCancel(r.Context()), h)
	if err != nil {
		// Keep's own error (its store, its paths) is for its log: the
		// sender may be anyone on the internet.
		log.Error("a webhook delivery failed inside keep", "workflow", h.Workflow, "webhook", h.Name, "err", err)
		answer(w, http.StatusInternalServerError, Reply{Message: "keep could not take this delivery because of an error of its own (its log says which); nothing of it was kept: send it again"})
		return
	}
	if d.Why == hookreq.WhyChallenge {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(d.Reply)
		return
	}
	code, ok := codes[d.Why]
	if !ok {
		code = http.StatusInternalServerError
	}
	if d.Why == hookreq.WhyHeldFull {
		w.Header().Set("Retry-After", "600")
	}
	answer(w, code, Reply{OK: d.Status == kt.DeliveryAccepted || d.Status == kt.DeliveryDuplicate || d.Status == kt.DeliveryHeld, Status: string(d.Status), Delivery: d.DeliveryID, Record: d.Record, Inputs: d.Inputs, Events: d.Events, Message: toldSender(h, d)})
}

// toldSender is the message a sender is answered for d. The listener's
// rule: a sender, who may be anyone on the internet and is not verified
// yet in these cases, learns nothing it did not send. So which workflows
// and webhooks exist is not said; and a delivery held or refused for a
// reason of keep's own — a webhook the active version does not declare
// (the owner's text names the ones it does), a secret not set (it names
// the secret), the holding full — is answered with what happened and the
// record under which the workflow's owner sees why (keep webhooks WF, the
// page): the reason stays the record's. Every other answer is about what
// the sender sent (its signature, its body, its delivery id) or comes
// after its signature was verified, and says it in full.
func toldSender(h hookreq.Hook, d hookreq.Delivered) string {
	owner := fmt.Sprintf("the workflow's owner sees why under record %d (keep webhooks %s)", d.Record, h.Workflow)
	switch d.Why {
	case hookreq.WhyNotFound:
		return fmt.Sprintf("there is no webhook %s/%s here", h.Workflow, h.Name)
	case hookreq.WhyHeld:
		return fmt.Sprintf("webhook %s of %s, delivery %s: held (record %d): keep cannot take it yet for a reason of its own, and takes it once that is done; it need not be sent again; %s", h.Name, h.Workflow, d.DeliveryID, d.Record, owner)
	case hookreq.WhyHeldFull:
		return fmt.Sprintf("webhook %s of %s, delivery %s: refused (record %d): keep cannot take it yet for a reason of its own, and holds as many deliveries waiting for it as it holds, so this one was not kept: send it again later; %s", h.Name, h.Workflow, d.DeliveryID, d.Record, owner)
	case hookreq.WhyNoSecret:
		return fmt.Sprintf("webhook %s of %s, delivery %s: refused (record %d): keep cannot verify it yet, so nothing of it was kept: send it again later; %s", h.Name, h.Workflow, d.DeliveryID, d.Record, owner)
	}
	return d.Message
}

func answer(w http.ResponseWriter, code int, r Reply) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(r)
}
