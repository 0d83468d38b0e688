// Package schedule parses the two schedule forms a script may declare,
// {interval: "5m"} and {cron: "*/5 * * * *"}, and computes the next due time.
// Cron parsing is robfig/cron's standard 5-field parser.
//
// It imports no package of keep.
package schedule

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule computes when a producer or task is next due.
type Schedule interface {
	Next(after time.Time) time.Time
	String() string
}

var intervalRe = regexp.MustCompile(`^(\d+)(s|m|h|d)$`)

type interval struct {
	d   time.Duration
	src string
}

func (i interval) Next(after time.Time) time.Time { return after.Add(i.d) }
func (i interval) String() string                 { return "every " + i.src }

type cronSchedule struct {
	s   cron.Schedule
	src string
}

func (c cronSchedule) Next(after time.Time) time.Time { return c.s.Next(after) }
func (c cronSchedule) String() string                 { return "cron " + c.src }

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// Parse reads a declared schedule object. The error says what is wrong and
// what a valid value looks like.
func Parse(decl map[string]any) (Schedule, error) {
	if decl == nil {
		return nil, fmt.Errorf("missing schedule: use { interval: \"5m\" } or { cron: \"*/5 * * * *\" }")
	}
	iv, hasI := decl["interval"]
	cr, hasC := decl["cron"]
	switch {
	case hasI && hasC:
		return nil, fmt.Errorf("schedule has both interval and cron; keep one")
	case hasI:
		s, ok := iv.(string)
		if !ok {
			return nil, fmt.Errorf("schedule interval must be a string like \"5m\", got %v", iv)
		}
		return ParseInterval(s)
	case hasC:
		s, ok := cr.(string)
		if !ok {
			return nil, fmt.Errorf("schedule cron must be a string like \"*/5 * * * *\", got %v", cr)
		}
		return ParseCron(s)
	}
	return nil, fmt.Errorf("schedule needs interval or cron, e.g. { interval: \"5m\" }")
}

// ParseInterval reads "<n>s|m|h|d" with n ≥ 1.
func ParseInterval(s string) (Schedule, error) {
	m := intervalRe.FindStringSubmatch(s)
	if m == nil {
		return nil, fmt.Errorf("invalid interval %q: use a whole number and a unit s, m, h or d, e.g. \"30s\", \"5m\", \"1d\"", s)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n <= 0 || n > 100000 {
		return nil, fmt.Errorf("invalid interval %q: the number must be between 1 and 100000", s)
	}
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[m[2]]
	return interval{d: time.Duration(n) * unit, src: s}, nil
}

// ParseCron reads a standard 5-field cron expression.
func ParseCron(s string) (Schedule, error) {
	c, err := parser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("invalid cron %q: %v (use 5 fields: minute hour day-of-month month day-of-week)", s, err)
	}
	// robfig/cron gives up after five years and returns the zero time: a
	// schedule such as "0 0 30 2 *" (30 February) would silently never run.
	if c.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("cron %q never fires (no such date); check the day of month and month", s)
	}
	return cronSchedule{s: c, src: s}, nil
}
