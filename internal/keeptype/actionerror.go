package keeptype

import "fmt"

// ActionError is a person's action (or a request of keep's API) that does
// not apply; the message says why and what to do. It is keep's one coded
// error family: its Code tells the kinds apart, and errors.Is(err,
// ErrNotFound) holds for an unknown workflow, run, item or action
// (ErrUnknownAction: a verb that is no action at all, a bad route),
// errors.Is(err, ErrConflict) for an action that does not fit the current
// state (and one that waits for consent) — the same sentinels the store's
// reads answer with. It lives here, beside those sentinels, because the
// engine (deploy), transition (the writers' reads), control (people's
// actions), intake (the event API) and report (bad query parameters) all
// answer with it.
type ActionError struct {
	Msg  string
	Code ActionCode
}

// ActionCode is the kind of an ActionError.
type ActionCode int

const (
	// CodeNotApplicable: the action does not fit the current state (an
	// ErrConflict).
	CodeNotApplicable ActionCode = iota
	// CodeNotFound: what it acts on does not exist (an ErrNotFound).
	CodeNotFound
	// CodeUnknownAction: no action of that name (an ErrNotFound).
	CodeUnknownAction
	// CodeBadInput: what the request carries is not valid (a missing id,
	// a payload that is not JSON or over its bound).
	CodeBadInput
	// CodeNeedsConsent: a major version that leaves work behind (other
	// item, message or input ids: orphans) waits for the person's yes
	// (--accept-orphans; ch 12 §12.6); an ErrConflict.
	CodeNeedsConsent
)

// The kinds of ActionError finer than ErrNotFound and ErrConflict, for
// errors.Is.
var (
	ErrUnknownAction = &ActionError{Code: CodeUnknownAction}
	ErrBadInput      = &ActionError{Code: CodeBadInput}
	ErrNeedsConsent  = &ActionError{Code: CodeNeedsConsent}
)

func (e *ActionError) Error() string { return e.Msg }

// Is matches ErrNotFound or ErrConflict by e's kind, and the sentinel of
// e's own kind.
func (e *ActionError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == CodeNotFound || e.Code == CodeUnknownAction
	case ErrConflict:
		return e.Code == CodeNotApplicable || e.Code == CodeNeedsConsent
	}
	t, ok := target.(*ActionError)
	return ok && t.Code == e.Code
}

// Refuse is an ActionError for an action that does not fit the current
// state (CodeNotApplicable).
func Refuse(format string, args ...any) error {
	return &ActionError{Msg: fmt.Sprintf(format, args...)}
}

// Missing is the error for a workflow, run, item or action that does not
// exist (CodeNotFound).
func Missing(format string, args ...any) error {
	return &ActionError{Msg: fmt.Sprintf(format, args...), Code: CodeNotFound}
}
