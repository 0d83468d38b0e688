package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/keep-run/keep/internal/store"
)

// exerciseNotices covers notices.
func exerciseNotices(run runCase) {
	ctx := context.Background()
	run("notices: sent once per key and channel", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.NoticePut("run-1", "webhook", 5) }))
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.NoticePut("run-1", "webhook", 9) })) // a second record keeps the first time
		must(t, s.View(ctx, func(tx store.Tx) error {
			if at, err := tx.NoticeSent("run-1", "webhook"); err != nil || at != 5 {
				return fmt.Errorf("run-1 webhook: %d %v", at, err)
			}
			if at, err := tx.NoticeSent("run-1", "email"); err != nil || at != 0 {
				return fmt.Errorf("run-1 email, never sent: %d %v", at, err)
			}
			if l, err := tx.NoticeList(); err != nil || len(l) != 1 || l[0] != (store.Notice{Key: "run-1", Channel: "webhook", SentAt: 5}) {
				return fmt.Errorf("the list of notices: %+v %v", l, err)
			}
			return nil
		}))
	})
}
