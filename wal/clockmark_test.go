package wal

import (
	"context"
	"testing"
	"time"
)

// TestClockMarkSplitsBeforeAndAfter: a clock mark is above every record appended before it
// and at or below every record appended after it, in an old topic and in one created after
// it, even when the wall clock goes back; StartOf a group from the mark is then the first
// record after it. Stored with a group's settings, the start reads back after a reopen, where
// RaiseClock keeps later records at or above it.
func TestClockMarkSplitsBeforeAndAfter(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{Now: clock.Now})
	ctx := context.Background()
	mustAppend(t, l, "a", 0, 2)
	mark, err := l.ClockMark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(-time.Hour)
	mustAppend(t, l, "b", 0, 1)
	mustAppend(t, l, "a", 2, 1)
	start := GroupStart{Kind: GroupFromMark, Time: mark}
	for topic, want := range map[string]uint64{"a": 2, "b": 0} {
		if got, ok := l.StartOf(topic, start); !ok || got != want {
			t.Fatalf("StartOf(%q) = %d %v, want %d", topic, got, ok, want)
		}
	}
	if got, ok := l.StartOf("a", GroupStart{Kind: GroupFromFirst}); !ok || got != 0 {
		t.Fatalf("StartOf(a, first) = %d %v", got, ok)
	}
	set := GroupSettings{Pattern: "*", MaxDeliver: 3, Order: 1, Start: start}
	if err := l.SetGroup(ctx, "g", &set, nil); err != nil {
		t.Fatal(err)
	}
	legacy := GroupSettings{Pattern: "x", MaxDeliver: 2}
	if err := l.SetGroup(ctx, "old", &legacy, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{Now: clock.Now})
	got, _, ok, err := l.Group("g")
	if err != nil || !ok || got != set {
		t.Fatalf("Group(g) = %+v %v %v, want %+v", got, ok, err, set)
	}
	if got, _, ok, err := l.Group("old"); err != nil || !ok || got != legacy {
		t.Fatalf("Group(old) = %+v %v %v, want %+v", got, ok, err, legacy)
	}
	clock.Advance(-time.Hour)
	l.RaiseClock(got.Start.Time)
	mustAppend(t, l, "c", 0, 1)
	if off, ok := l.StartOf("c", got.Start); !ok || off != 0 {
		t.Fatalf("StartOf(c) after the reopen = %d %v, want 0", off, ok)
	}
	for _, bad := range [][]byte{{9, 1}, {byte(GroupStartUnknown), 1}, {byte(GroupFromFirst)}} {
		p := append(encodeGroupSettings(&GroupSettings{Pattern: "p"}), bad...)
		if _, reason := decodeGroupSettings(p); reason == "" {
			t.Fatalf("settings with start bytes %v decoded", bad)
		}
	}
}
