package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func vectorState() *GroupState {
	return &GroupState{Floor: 4, Next: 20, Updated: time.Unix(0, 1764590000123456789),
		Entries: []GroupEntry{
			{Offset: 5, Deliveries: 2, Origin: OriginRef{Region: "us", Offset: 3}},
			{Offset: 9, Deliveries: 1, Origin: OriginRef{Region: "eu", Offset: 40}},
			{Offset: 12, Deliveries: 1, Origin: OriginRef{Region: "us", Offset: 6}},
		},
		Vector: &GroupVector{Through: map[string]uint64{"eu": 44, "us": 9}, Elsewhere: []OriginRef{{Region: "eu", Offset: 41}, {Region: "eu", Offset: 43}}, Skipping: true}}
}

// TestGroupStateVector: a state with a vector reads back as written (entries with their
// origins, Elsewhere, Skipping); one without a vector is still written in the sparse layout
// (byte for byte what it was before vectors, so a node that knows only that reads it); every
// damage to the vector part is refused with a reason naming it.
func TestGroupStateVector(t *testing.T) {
	st := vectorState()
	if got, reason := decodeGroupState(encodeGroupState(st)); reason != "" || !reflect.DeepEqual(got, st) {
		t.Fatalf("vector layout: %+v %q", got, reason)
	}
	empty := &GroupState{Floor: 3, Next: 3, Entries: []GroupEntry{}, Vector: &GroupVector{Through: map[string]uint64{}}}
	if got, reason := decodeGroupState(encodeGroupState(empty)); reason != "" || !reflect.DeepEqual(got, empty) {
		t.Fatalf("vector layout, nothing handed out: %+v %q", got, reason)
	}
	plain := *st
	plain.Vector = nil
	plain.Entries = []GroupEntry{{Offset: 5, Deliveries: 2}, {Offset: 9, Deliveries: 1}}
	b := encodeGroupState(&plain)
	if b[len(b)-1] != groupStateSparse {
		t.Fatalf("a state without a vector ends with layout %d, want %d", b[len(b)-1], groupStateSparse)
	}
	if got, reason := decodeGroupState(b); reason != "" || !reflect.DeepEqual(got, &plain) {
		t.Fatalf("sparse layout: %+v %q", got, reason)
	}

	// The sparse part of st, then the layout number: the vector part is appended per case.
	head := func() []byte {
		b := binary.AppendUvarint(nil, 4)
		b = binary.AppendUvarint(b, 20)
		b = binary.AppendUvarint(b, 1)
		b = binary.AppendUvarint(b, 1) // offset 5
		b = binary.AppendUvarint(b, 2)
		b = binary.AppendUvarint(b, 0)
		return binary.AppendUvarint(b, groupStateVector)
	}
	uv := func(b []byte, vs ...uint64) []byte {
		for _, v := range vs {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	region := func(b []byte, r string, through uint64) []byte {
		return binary.AppendUvarint(append(binary.AppendUvarint(b, uint64(len(r))), r...), through)
	}
	good := uv(region(uv(head(), 0, 1), "eu", 9), 0, 3, 0)
	if got, reason := decodeGroupState(good); reason != "" || got.Entries[0].Origin != (OriginRef{Region: "eu", Offset: 3}) {
		t.Fatalf("hand-made vector state: %+v %q", got, reason)
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"truncated":            {uv(head(), 0), "vector truncated"},
		"unknown flags":        {uv(head(), 2, 0), "flags 0x2 unknown"},
		"too many origins":     {uv(head(), 0, maxVector+1), "at most 256"},
		"origins past bytes":   {uv(head(), 0, 50), "origins in"},
		"empty region":         {uv(region(uv(head(), 0, 1), "", 9), 0, 3, 0), "empty region"},
		"regions out of order": {uv(region(region(uv(head(), 0, 2), "us", 9), "eu", 9), 0, 3, 0), `"eu" out of order`},
		"entry index":          {uv(region(uv(head(), 0, 1), "eu", 9), 1, 3, 0), "entry origin index 1 of 1"},
		"entry past through":   {uv(region(uv(head(), 0, 1), "eu", 9), 0, 10, 0), "past the vector's 9"},
		"elsewhere too many":   {uv(region(uv(head(), 0, 1), "eu", 9), 0, 3, MaxGroupElsewhere+1), "at most 65536"},
		"elsewhere past bytes": {uv(region(uv(head(), 0, 1), "eu", 9), 0, 3, 40), "outstanding records in"},
		"elsewhere an entry":   {uv(region(uv(head(), 0, 1), "eu", 9), 0, 3, 1, 0, 3), "is an entry too"},
		"elsewhere twice":      {uv(region(uv(head(), 0, 1), "eu", 9), 0, 3, 2, 0, 4, 0, 4), "out of order or twice"},
		"trailing":             {uv(good, 0), "trailing bytes"},
	} {
		got, reason := decodeGroupState(c.b)
		if reason == "" || !strings.Contains(reason, c.want) {
			t.Errorf("%s: got %+v, reason %q, want one naming %q", name, got, reason, c.want)
		}
	}
	// Entries of one origin out of its order.
	bad := *st
	bad.Entries = []GroupEntry{{Offset: 5, Origin: OriginRef{Region: "us", Offset: 6}}, {Offset: 9, Origin: OriginRef{Region: "us", Offset: 3}}}
	bad.Vector = &GroupVector{Through: map[string]uint64{"us": 9}}
	if _, reason := decodeGroupState(encodeGroupState(&bad)); !strings.Contains(reason, "not ascending") {
		t.Errorf("entries out of their origin's order: reason %q", reason)
	}
}

// TestSetMirroredGroup: a mirrored state is stored with its origin's time and read back by
// Group and GroupStatesOf; an older or equally old one does not replace it, a newer one does;
// a state without a vector, or with an outstanding record its vector does not cover, is
// refused.
func TestSetMirroredGroup(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	ctx := context.Background()
	mustAppend(t, l, "a", 0, 3)
	st := &GroupState{Updated: time.Unix(0, 1000), Vector: &GroupVector{Through: map[string]uint64{"eu": 7}, Elsewhere: []OriginRef{{Region: "eu", Offset: 5}}, Skipping: true}}
	name := "mirror/eu/group/g"
	if ok, err := l.SetMirroredGroup(ctx, name, "a", st); !ok || err != nil {
		t.Fatalf("first: %v %v", ok, err)
	}
	older := &GroupState{Updated: time.Unix(0, 1000), Vector: &GroupVector{Through: map[string]uint64{"eu": 2}}}
	if ok, err := l.SetMirroredGroup(ctx, name, "a", older); ok || err != nil {
		t.Fatalf("as old: stored %v %v", ok, err)
	}
	_, got, ok, err := l.Group(name)
	if err != nil || !ok || !got["a"].Updated.Equal(st.Updated) || !reflect.DeepEqual(got["a"].Vector, st.Vector) {
		t.Fatalf("Group: %+v %v %v", got, ok, err)
	}
	newer := &GroupState{Updated: time.Unix(0, 2000), Vector: &GroupVector{Through: map[string]uint64{"eu": 9}}}
	if ok, err := l.SetMirroredGroup(ctx, name, "a", newer); !ok || err != nil {
		t.Fatalf("newer: %v %v", ok, err)
	}
	if err := l.SetGroup(ctx, "g", nil, map[string]*GroupState{"a": {Floor: 1, Next: 1}, "b": {Floor: 0, Next: 0}}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	if err := l.GroupStatesOf("a", func(group string, s *GroupState) bool {
		seen[group] = s.Next
		if group == name && s.Vector.Through["eu"] != 9 {
			t.Errorf("mirrored state %+v, want the newer", s.Vector)
		}
		return true
	}); err != nil || len(seen) != 2 {
		t.Fatalf("GroupStatesOf: %v %v", seen, err)
	}
	for what, s := range map[string]*GroupState{
		"no vector":         {Updated: time.Unix(0, 3000)},
		"not covered":       {Updated: time.Unix(0, 3000), Vector: &GroupVector{Through: map[string]uint64{"eu": 1}, Elsewhere: []OriginRef{{Region: "eu", Offset: 5}}}},
		"unknown":           {Updated: time.Unix(0, 3000), Vector: &GroupVector{Through: map[string]uint64{}, Elsewhere: []OriginRef{{Region: "us", Offset: 0}}}},
		"outstanding twice": {Updated: time.Unix(0, 3000), Vector: &GroupVector{Through: map[string]uint64{"eu": 9}, Elsewhere: []OriginRef{{Region: "eu", Offset: 1}, {Region: "eu", Offset: 1}}}},
	} {
		if _, err := l.SetMirroredGroup(ctx, name, "a", s); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", what, err)
		}
	}
}

// FuzzDecodeGroupState: whatever bytes a group state holds, decoding never panics, and a state
// that decodes re-encodes to one that decodes to the same state.
func FuzzDecodeGroupState(f *testing.F) {
	f.Add(encodeGroupState(vectorState()))
	f.Add(encodeGroupState(&GroupState{Floor: 1, Next: 3, Entries: []GroupEntry{{Offset: 2, Deliveries: 1}}}))
	f.Add(oldGroupState(4, 8, [][3]uint64{{5, 3, 0}, {6, 0, 1}}, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, reason := decodeGroupState(b)
		if reason != "" {
			return
		}
		again, reason := decodeGroupState(encodeGroupState(s))
		if reason != "" || !reflect.DeepEqual(again, s) {
			t.Fatalf("%+v re-encoded decodes to %+v (%s)", s, again, reason)
		}
	})
}
