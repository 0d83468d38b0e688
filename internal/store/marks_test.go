package store

import (
	"context"
	"testing"
)

// Each mark is seen where it was set, and only that one: they share a key
// type, so a mix-up would make a read skip its snapshot or a write its
// fsync.
func TestContextMarksAreEachTheirOwn(t *testing.T) {
	marks := []struct {
		name string
		set  func(context.Context) context.Context
		is   func(context.Context) bool
	}{
		{"NoSnapshot", NoSnapshot, IsNoSnapshot},
		{"ShortRead", ShortRead, IsShortRead},
		{"NoSync", NoSync, IsNoSync},
	}
	for _, m := range marks {
		if m.is(context.Background()) {
			t.Fatalf("%s on an unmarked context", m.name)
		}
		ctx := m.set(context.Background())
		for _, o := range marks {
			if got := o.is(ctx); got != (o.name == m.name) {
				t.Errorf("a context marked %s: %s says %v", m.name, o.name, got)
			}
		}
	}
	all := context.Background()
	for _, m := range marks {
		all = m.set(all)
	}
	for _, m := range marks {
		if !m.is(all) {
			t.Errorf("marked with all: %s lost", m.name)
		}
	}
}
