package wal

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestGroupStateRoundTrip: settings and per-topic states stored in one batch read back as
// written, survive a reopen, are kept apart from a group whose name is a prefix, and a
// damaged value is ErrCorrupt naming the group.
func TestGroupStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	set := &GroupSettings{Pattern: "orders.>", AckWait: 1500 * time.Millisecond, MaxDeliver: 4, DeadLetter: "dlq", Order: 2}
	states := map[string]*GroupState{
		"orders.a": {Floor: 10, Next: 15, Entries: []GroupEntry{{Offset: 10, Deliveries: 2}, {Offset: 12, Done: true}, {Offset: 14, Deliveries: 1}}},
		"orders.b": {Floor: 3, Next: 3, Entries: []GroupEntry{}},
	}
	ctx := context.Background()
	if err := l.SetGroup(ctx, "g", set, states); err != nil {
		t.Fatal(err)
	}
	if err := l.SetGroup(ctx, "gg", &GroupSettings{Pattern: "x"}, map[string]*GroupState{"x": {Floor: 1, Next: 1, Entries: []GroupEntry{}}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	gotSet, got, ok, err := l.Group("g")
	if err != nil || !ok || gotSet != *set || !reflect.DeepEqual(got, states) {
		t.Fatalf("Group: %+v %+v %v %v", gotSet, got, ok, err)
	}
	if _, _, ok, err := l.Group("none"); ok || err != nil {
		t.Fatalf("unknown group: %v %v", ok, err)
	}
	// Damage one state: the load fails naming the group, it is never served.
	k := groupKey("g", "orders.a")
	if err := l.pdb.Set(k, []byte{1, 2, 3, 4, 1, 9}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Group("g"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged state: %v, want ErrCorrupt", err)
	}
	l.Close()
	if err := l.SetGroup(ctx, "g", set, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetGroup after Close: %v", err)
	}
}
