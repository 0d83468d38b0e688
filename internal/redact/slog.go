package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Logger wraps a log handler so that every message and attribute it writes
// is masked as String masks text: keep's own log lines quote errors and
// targets, which may carry what a server echoed back.
func Logger(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(maskAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(as))
	for i, a := range as {
		masked[i] = maskAttr(a)
	}
	return logHandler{h.Handler.WithAttrs(masked)}
}

func (h logHandler) WithGroup(name string) slog.Handler { return logHandler{h.Handler.WithGroup(name)} }

func maskAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		masked := make([]any, len(group))
		for i, g := range group {
			masked[i] = maskAttr(g)
		}
		return slog.Group(a.Key, masked...)
	case slog.KindAny:
		return slog.String(a.Key, String(fmt.Sprint(v.Any())))
	}
	return a
}
