package wal

import (
	"context"
	"encoding/binary"
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
		"orders.a": {Floor: 10, Next: 15, Entries: []GroupEntry{{Offset: 10, Deliveries: 2}, {Offset: 14, Deliveries: 1}}},
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

// oldGroupState encodes a state in the layout before groupStateSparse: every offset of
// [floor, next) it knows, with a done bit, then the time when withTime.
func oldGroupState(floor, next uint64, entries [][3]uint64, withTime bool) []byte {
	b := binary.AppendUvarint(nil, floor)
	b = binary.AppendUvarint(b, next)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries { // offset, deliveries, done
		b = binary.AppendUvarint(b, e[0]-floor)
		b = binary.AppendUvarint(b, e[1]<<1|e[2])
	}
	if withTime {
		b = binary.AppendUvarint(b, 1764590000123456789)
	}
	return b
}

// TestGroupStateLayouts: a state reads back as written (its outstanding records only, one
// far above the floor); the layouts stored before (with and without the time) read back in
// the sparse form: their done offsets dropped, their unlisted offsets outstanding once;
// damaged layouts are refused.
func TestGroupStateLayouts(t *testing.T) {
	st := &GroupState{Floor: 4, Next: 1_000_007, Entries: []GroupEntry{{Offset: 5, Deliveries: 3}, {Offset: 1_000_006, Deliveries: 1}},
		Updated: time.Unix(0, 1764590000123456789)}
	if got, reason := decodeGroupState(encodeGroupState(st)); reason != "" || !reflect.DeepEqual(got, st) {
		t.Fatalf("sparse layout: %+v %q", got, reason)
	}
	want := []GroupEntry{{Offset: 4, Deliveries: 1}, {Offset: 5, Deliveries: 3}, {Offset: 7, Deliveries: 1}}
	for _, withTime := range []bool{false, true} {
		got, reason := decodeGroupState(oldGroupState(4, 8, [][3]uint64{{5, 3, 0}, {6, 0, 1}}, withTime))
		if reason != "" || got.Floor != 4 || got.Next != 8 || !reflect.DeepEqual(got.Entries, want) || got.Updated.IsZero() != !withTime {
			t.Fatalf("old layout (time %v): %+v %q, want entries %+v", withTime, got, reason, want)
		}
	}
	for name, b := range map[string][]byte{
		"trailing byte":  append(encodeGroupState(st), 1),
		"unknown layout": append(oldGroupState(4, 8, nil, true), 3),
		"done flagged":   append(oldGroupState(4, 8, [][3]uint64{{6, 0, 1}}, true), groupStateSparse),
		"listed twice":   append(oldGroupState(4, 8, [][3]uint64{{6, 1, 0}, {6, 1, 0}}, true), groupStateSparse),
		"out of order":   append(oldGroupState(4, 8, [][3]uint64{{6, 1, 0}, {5, 1, 0}}, true), groupStateSparse),
	} {
		if got, reason := decodeGroupState(b); reason == "" {
			t.Errorf("%s: accepted as %+v", name, got)
		}
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
