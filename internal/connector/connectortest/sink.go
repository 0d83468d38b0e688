package connectortest

import (
	"fmt"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// OnSink points tg at a testsink: the writes counted there, faults queued
// there, and the credential secret (opened from {secret:name}) that the
// call's headers send.
func (tg *Target) OnSink(sink *testsink.Sink, name, secret string) *Target {
	tg.Secret = secret
	tg.Open = func(n, _ string) (string, error) {
		if n != name {
			return "", fmt.Errorf("no secret %q", n)
		}
		return secret, nil
	}
	tg.Applied = func(t *testing.T) int { return len(sink.Writes()) }
	tg.Arm = func(t *testing.T, kind string, retryAfter int) {
		if !sink.QueueKind(kind, retryAfter) {
			t.Fatalf("the sink cannot inject %q", kind)
		}
	}
	return tg
}
