package schedule

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 10, 2, 0, 0, time.UTC)
	for decl, want := range map[string]time.Time{
		"30s": base.Add(30 * time.Second), "5m": base.Add(5 * time.Minute), "2h": base.Add(2 * time.Hour), "1d": base.Add(24 * time.Hour),
	} {
		s, err := Parse(map[string]any{"interval": decl})
		if err != nil || !s.Next(base).Equal(want) {
			t.Errorf("interval %s: %v %v", decl, s, err)
		}
	}
	s, err := Parse(map[string]any{"cron": "*/5 * * * *"})
	if err != nil || !s.Next(base).Equal(time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC)) {
		t.Fatalf("cron: %v %v", s, err)
	}
	for _, bad := range []map[string]any{nil, {}, {"interval": "5"}, {"interval": "0m"}, {"interval": "1w"}, {"interval": 5}, {"cron": "* * *"},
		{"cron": "@every 5m"}, {"cron": "61 * * * *"}, {"cron": "0 0 30 2 *"}, {"cron": "0 0 31 4 *"}, {"interval": "1m", "cron": "* * * * *"}} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"5m", "*/5 * * * *", "1d", "0 0 1 1 *", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sc, err := ParseInterval(s); err == nil {
			now := time.Now()
			if !sc.Next(now).After(now) {
				t.Fatalf("interval %q does not move forward", s)
			}
		}
		if sc, err := ParseCron(s); err == nil {
			_ = sc.Next(time.Now())
		}
	})
}
