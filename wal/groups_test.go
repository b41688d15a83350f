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
	for _, s := range got {
		if time.Since(s.Updated) > time.Minute || time.Until(s.Updated) > time.Minute {
			t.Errorf("stored at %v, not now", s.Updated)
		}
		s.Updated = time.Time{}
	}
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

// TestGroupStateWithoutTime: a state stored before the time was kept (it ends with its last
// entry) reads back with its entries and a zero Updated.
func TestGroupStateWithoutTime(t *testing.T) {
	st := &GroupState{Floor: 4, Next: 7, Entries: []GroupEntry{{Offset: 5, Deliveries: 3}, {Offset: 6, Done: true}}}
	b := encodeGroupState(st)
	old := b[:len(b)-1] // the zero time is one byte
	got, reason := decodeGroupState(old)
	if reason != "" || !reflect.DeepEqual(got, st) {
		t.Fatalf("old layout: %+v %q", got, reason)
	}
	st.Updated = time.Unix(0, 1764590000123456789)
	if got, reason = decodeGroupState(encodeGroupState(st)); reason != "" || !got.Updated.Equal(st.Updated) {
		t.Fatalf("with its time: %+v %q", got, reason)
	}
	if _, reason := decodeGroupState(append(encodeGroupState(st), 1)); reason == "" {
		t.Fatal("a trailing byte after the time was accepted")
	}
}

// TestGroupsListDelete: Groups lists every stored group (a tenant's by prefix) with its
// settings and states; DeleteGroup removes one wholly in one batch and leaves a group whose
// name it prefixes; a state stored for a topic deleted since Open is not written back.
func TestGroupsListDelete(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	ctx := context.Background()
	mustAppend(t, l, "a", 0, 3)
	mustAppend(t, l, "b", 0, 3)
	for _, g := range []string{"tenant/x/g", "tenant/x/gg", "h"} {
		if err := l.SetGroup(ctx, g, &GroupSettings{Pattern: ">", MaxDeliver: 2}, map[string]*GroupState{
			"a": {Floor: 1, Next: 2, Entries: []GroupEntry{{Offset: 1, Deliveries: 1}}}, "b": {Floor: 3, Next: 3},
		}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(prefix string) []string {
		var names []string
		if err := l.Groups(prefix, func(g GroupInfo) bool {
			if !g.HasSettings || g.Settings.MaxDeliver != 2 || len(g.States) != 2 || g.States["a"].Floor != 1 {
				t.Errorf("group %q: %+v", g.Name, g)
			}
			names = append(names, g.Name)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return names
	}
	if got := list(""); !reflect.DeepEqual(got, []string{"h", "tenant/x/g", "tenant/x/gg"}) {
		t.Fatalf("every group: %v", got)
	}
	if got := list("tenant/x/"); !reflect.DeepEqual(got, []string{"tenant/x/g", "tenant/x/gg"}) {
		t.Fatalf("tenant x's groups: %v", got)
	}
	if n, ok, err := l.DeleteGroup(ctx, "tenant/x/g"); n != 2 || !ok || err != nil {
		t.Fatalf("DeleteGroup: %d %v %v", n, ok, err)
	}
	if _, _, ok, _ := l.Group("tenant/x/g"); ok {
		t.Fatal("a deleted group still loads")
	}
	if n, ok, err := l.DeleteGroup(ctx, "tenant/x/g"); n != 0 || ok || err != nil {
		t.Fatalf("DeleteGroup again: %d %v %v", n, ok, err)
	}
	if got := list(""); !reflect.DeepEqual(got, []string{"h", "tenant/x/gg"}) {
		t.Fatalf("after the delete: %v", got)
	}

	// Deleting topic a removes every group's state of it and nothing else; a store of it
	// after the delete is not written.
	if _, err := l.DeleteTopic(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetGroup(ctx, "h", nil, map[string]*GroupState{"a": {Floor: 2, Next: 2}}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"h", "tenant/x/gg"} {
		if _, states, _, err := l.Group(g); err != nil || states["a"] != nil || states["b"] == nil {
			t.Fatalf("group %s after deleting topic a: %+v %v", g, states, err)
		}
	}
	// Purging b moves the floors (and next offsets) to b's next offset.
	mustAppend(t, l, "b", 3, 2)
	if _, err := l.PurgeTopic(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, states, _, _ := l.Group("h"); states["b"].Floor != 5 || states["b"].Next != 5 || len(states["b"].Entries) != 0 {
		t.Fatalf("group h on b after the purge: %+v", states["b"])
	}
}
