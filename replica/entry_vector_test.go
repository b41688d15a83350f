package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// vectorState is a group state with a vector: two entries (one per origin) and one
// outstanding record elsewhere.
func vectorState() *wal.GroupState {
	return &wal.GroupState{Floor: 10, Next: 20,
		Entries: []wal.GroupEntry{{Offset: 12, Deliveries: 1, Origin: wal.OriginRef{Region: "eu", Offset: 40}}, {Offset: 15, Deliveries: 2, Origin: wal.OriginRef{Region: "us", Offset: 7}}},
		Vector:  &wal.GroupVector{Through: map[string]uint64{"eu": 44, "us": 9}, Elsewhere: []wal.OriginRef{{Region: "us", Offset: 3}}, Skipping: true}}
}

// vectorEntries are the entries of the portable-position layouts (sampleEntries has them).
func vectorEntries() []*WalEntry {
	mirrored := vectorState()
	mirrored.Updated = time.Unix(0, 1_700_000_000_123_456_789)
	return []*WalEntry{
		{Kind: EntrySetPosition, Topic: "t", Name: "tenant/a/durable", Value: 41, Vector: map[string]uint64{"eu": 1 << 40, "us": 0, "ap": 3}},
		{Kind: EntrySetGroup, Topic: "t", Name: "tenant/a/workers", Group: &GroupOp{State: vectorState()}},
		{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{Settings: &wal.GroupSettings{Pattern: "t"},
			State: &wal.GroupState{Floor: 3, Next: 3, Vector: &wal.GroupVector{Through: map[string]uint64{}}}}},
		{Kind: EntryMirrorPosition, Topic: "t", Name: "mirror/us/durable/tenant/a/d", Value: 1_700_000_000_000_000_000, Vector: map[string]uint64{"us": 9}},
		{Kind: EntryMirrorGroup, Topic: "t", Name: "mirror/us/group/tenant/a/g", Group: &GroupOp{State: mirrored}},
	}
}

func sameGroupVector(a, b *wal.GroupVector) bool {
	if a == nil || b == nil {
		return a == b
	}
	return maps.Equal(a.Through, b.Through) && slices.Equal(a.Elsewhere, b.Elsewhere) && a.Skipping == b.Skipping
}

// TestEntryPositionLayouts: a set position without a vector is encoded in layout 1, byte for
// byte as before vectors (so entries already in raft logs decode as they did), and one with a
// vector in layout 2; a set group likewise in group layout 1 or 2.
func TestEntryPositionLayouts(t *testing.T) {
	// Layout 1, built by hand as the encoder before vectors wrote it.
	old := []byte{entryVersion, 0, 0, 0, 0, byte(EntrySetPosition), 1, 't', 2, 'd', '1', 7}
	binary.LittleEndian.PutUint32(old[1:5], crc32.Checksum(old[5:], castagnoli))
	e, err := DecodeEntry(old)
	if err != nil || e.Name != "d1" || e.Value != 7 || e.Vector != nil {
		t.Fatalf("layout 1 set position: %+v, %v", e, err)
	}
	if p, _ := EncodeEntry(nil, e); !bytes.Equal(p, old) {
		t.Fatalf("a set position without a vector encodes as % x, want layout 1 % x", p, old)
	}
	withVec := *e
	withVec.Vector = map[string]uint64{"us": 5, "eu": 3}
	p, err := EncodeEntry(nil, &withVec)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(bytes.Clone(old[5:]), posLayoutVector, 2, 2, 'e', 'u', 3, 2, 'u', 's', 5); !bytes.Equal(p[5:], want) {
		t.Fatalf("layout 2 body % x, want % x", p[5:], want)
	}
	got, err := DecodeEntry(p)
	if err != nil || !maps.Equal(got.Vector, withVec.Vector) {
		t.Fatalf("layout 2 set position: %+v, %v", got, err)
	}

	layoutOf := func(st *wal.GroupState) byte {
		t.Helper()
		p, err := EncodeEntry(nil, &WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{State: st}})
		if err != nil {
			t.Fatal(err)
		}
		return p[entryHeaderLen+2+2] // topic str, name str, then the group layout
	}
	plain := vectorState()
	plain.Vector = nil
	if l := layoutOf(plain); l != groupLayout {
		t.Fatalf("a group state without a vector in layout %d, want %d", l, groupLayout)
	}
	if l := layoutOf(vectorState()); l != groupLayoutVector {
		t.Fatalf("a group state with a vector in layout %d, want %d", l, groupLayoutVector)
	}
}

// TestEntryVectorRefusals: entries of the new layouts that cannot be stored, or bodies that
// decode wrong, are refused with an error naming the problem.
func TestEntryVectorRefusals(t *testing.T) {
	uncovered := vectorState()
	uncovered.Vector.Through["us"] = 5 // the entry of us@7 is past it
	noTime := vectorState()
	long := strings.Repeat("r", wal.MaxNameLen+1)
	for _, tc := range []struct {
		e    WalEntry
		want string
	}{
		{WalEntry{Kind: EntrySetPosition, Topic: "t", Name: "d", Vector: map[string]uint64{"": 1}}, "empty region"},
		{WalEntry{Kind: EntrySetPosition, Topic: "t", Name: "d", Vector: map[string]uint64{long: 1}}, "region of 256 bytes"},
		{WalEntry{Kind: EntryMirrorPosition, Topic: "t", Name: "m"}, "mirror position without a vector"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{State: uncovered}}, "not covered by its vector"},
		{WalEntry{Kind: EntryMirrorGroup, Topic: "t", Name: "m", Group: &GroupOp{State: noTime}}, "without its origin's time"},
		{WalEntry{Kind: EntryMirrorGroup, Topic: "t", Name: "m", Group: &GroupOp{Remove: true}}, "a state alone"},
		{WalEntry{Kind: EntryMirrorGroup, Topic: "t", Name: "m", Group: &GroupOp{State: &wal.GroupState{Updated: time.Unix(1, 0)}}}, "without a vector"},
	} {
		_, err := EncodeEntry(nil, &tc.e)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.e, err, tc.want)
		}
	}

	body := func(kind EntryKind, b ...byte) []byte {
		p := append([]byte{entryVersion, 0, 0, 0, 0, byte(kind), 1, 't', 1, 'd', 7}, b...)
		binary.LittleEndian.PutUint32(p[1:5], crc32.Checksum(p[5:], castagnoli))
		return p
	}
	for _, tc := range []struct {
		p    []byte
		want string
	}{
		{body(EntrySetPosition, 3, 1, 1, 'a', 1), "position layout 3 (this build knows up to 2)"},
		{body(EntrySetPosition, 2, 0), "bad position vector count"},
		{body(EntrySetPosition, 2, 200, 1, 'a', 1), "bad position vector count"},
		{body(EntrySetPosition, 2, 2, 1, 'b', 1, 1, 'a', 1), "out of order or twice"},
		{body(EntrySetPosition, 2, 2, 1, 'a', 1, 1, 'a', 2), "out of order or twice"},
		{body(EntrySetPosition, 2, 1, 0, 1, 0), "empty"},
		{body(EntrySetPosition, 2, 1, 1, 'a'), "bad position vector count"}, // bounded before it is read
		{body(EntryMirrorPosition), "without its vector"},
		// A mirror group's time is the 7 after its name.
		{body(EntryMirrorGroup, 2, 2, 0, 0, 0, 1, 0), "group vector: vector truncated"},
		{body(EntryMirrorGroup, 2, 2, 0, 0, 0, 1), "length past the end"},
		{body(EntryMirrorGroup, 1, 2, 0, 0, 0), "without a vector"}, // layout 1: no vector
		{body(EntryMirrorGroup, 2, 0), "layout 2 (a vector) without a state"},
	} {
		_, err := DecodeEntry(tc.p)
		if !errors.Is(err, errEntry) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("% x: error %v, want one naming %q", tc.p, err, tc.want)
		}
	}
}

// TestWalSMStoresVectors: applied on every replica, a set position stores its vector as
// wal.Log.SetPosition does, a set group its state's vector, and mirrored positions and
// group states only move forward, whatever order or how often their entries come.
func TestWalSMStoresVectors(t *testing.T) {
	const topic = "orders.eu"
	rs, _, _ := startWalRegion(t, []uint64{TopicGroup(topic)})
	propose := func(e *WalEntry) {
		t.Helper()
		if res := proposeWal(t, rs, e); res.Err != nil {
			t.Fatalf("%v: %v", e.Kind, res.Err)
		}
	}
	propose(&WalEntry{Kind: EntryAppend, Topic: topic, Records: []wal.Record{{Payload: []byte("x")}}})
	vec := map[string]uint64{"eu": 0, "us": 12}
	propose(&WalEntry{Kind: EntrySetPosition, Topic: topic, Name: "tenant/a/d", Value: 0, Vector: vec})
	propose(&WalEntry{Kind: EntrySetGroup, Topic: topic, Name: "tenant/a/g", Group: &GroupOp{State: vectorState()}})

	const mp = "mirror/us/durable/tenant/a/d"
	newer := &WalEntry{Kind: EntryMirrorPosition, Topic: topic, Name: mp, Value: 2000, Vector: map[string]uint64{"us": 20}}
	older := &WalEntry{Kind: EntryMirrorPosition, Topic: topic, Name: mp, Value: 1000, Vector: map[string]uint64{"us": 10}}
	propose(newer)
	propose(older) // a late frame: stored nothing
	propose(newer) // a replay: the same

	const mg = "mirror/us/group/tenant/a/g"
	st2, st1 := vectorState(), vectorState()
	st2.Updated, st1.Updated = time.Unix(0, 2000), time.Unix(0, 1000)
	st1.Vector.Through["eu"] = 99
	propose(&WalEntry{Kind: EntryMirrorGroup, Topic: topic, Name: mg, Group: &GroupOp{State: st2}})
	propose(&WalEntry{Kind: EntryMirrorGroup, Topic: topic, Name: mg, Group: &GroupOp{State: st1}})
	propose(&WalEntry{Kind: EntrySetPosition, Topic: topic, Name: "marker", Value: 1})

	for _, r := range rs {
		// The marker came last: once it is applied here, everything before is.
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to apply the marker", r.id), func() bool {
			v, ok, _ := r.log.Position("marker", topic)
			return ok && v == 1
		})
		_, got, ok, err := r.log.PositionVector("tenant/a/d", topic)
		if err != nil || !ok || !maps.Equal(got, vec) {
			t.Fatalf("node %d: durable's vector %v %v %v, want %v", r.id, got, ok, err, vec)
		}
		v, got, ok, err := r.log.PositionVector(mp, topic)
		if err != nil || !ok || v != 2001 || !maps.Equal(got, newer.Vector) {
			t.Fatalf("node %d: mirrored position resumes %d with %v (%v %v), want the newer one, %v", r.id, v, got, ok, err, newer.Vector)
		}
		_, states, _, err := r.log.Group("tenant/a/g")
		if err != nil || states[topic] == nil || !sameGroupVector(states[topic].Vector, vectorState().Vector) || states[topic].Entries[1].Origin != (wal.OriginRef{Region: "us", Offset: 7}) {
			t.Fatalf("node %d: group state %+v (%v), want its vector and the entries' origins", r.id, states[topic], err)
		}
		_, states, _, err = r.log.Group(mg)
		if got := states[topic]; err != nil || !got.Updated.Equal(st2.Updated) || got.Vector.Through["eu"] != 44 {
			t.Fatalf("node %d: mirrored group state %+v (%v), want the newer one, kept with its origin's time", r.id, got, err)
		}
	}
}

// TestWalSMSnapshotCarriesVectors: a snapshot carries positions and group states with their
// vectors (stored layouts v3 and group layout 2), mirrored ones with their origin's time.
func TestWalSMSnapshotCarriesVectors(t *testing.T) {
	src := newSnapSM(t)
	mirrored := vectorState()
	mirrored.Updated = time.Unix(0, 5000)
	ents := []*WalEntry{
		{Kind: EntrySetPosition, Topic: "a", Name: "d", Value: 3, Vector: map[string]uint64{"eu": 3, "us": 8}},
		{Kind: EntrySetGroup, Topic: "a", Name: "g", Group: &GroupOp{State: vectorState()}},
		{Kind: EntryMirrorPosition, Topic: "a", Name: "mirror/us/durable/d", Value: 4000, Vector: map[string]uint64{"us": 9}},
		{Kind: EntryMirrorGroup, Topic: "a", Name: "mirror/us/group/g", Group: &GroupOp{State: mirrored}},
	}
	for i, e := range ents {
		src.apply(uint64(i+1), e)
	}
	applied, data, err := src.sm.SnapshotData(7)
	if err != nil || applied != uint64(len(ents)) {
		t.Fatalf("snapshot: applied %d, %v", applied, err)
	}
	dst := newSnapSM(t)
	var after func() error
	dst.commit(func(b *pebble.Batch) error {
		var err error
		after, err = dst.sm.Restore(b, 7, applied, data)
		return err
	})
	if err := after(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*snapSM{src, dst} {
		if _, v, ok, err := s.log.PositionVector("d", "a"); err != nil || !ok || !maps.Equal(v, ents[0].Vector) {
			t.Fatalf("durable's vector %v %v %v, want %v", v, ok, err, ents[0].Vector)
		}
		if r, v, ok, err := s.log.PositionVector("mirror/us/durable/d", "a"); err != nil || !ok || r != 4001 || !maps.Equal(v, ents[2].Vector) {
			t.Fatalf("mirrored position resumes %d with %v (%v %v)", r, v, ok, err)
		}
		_, states, _, err := s.log.Group("g")
		if err != nil || states["a"] == nil || !sameGroupVector(states["a"].Vector, vectorState().Vector) {
			t.Fatalf("group state %+v (%v), want its vector", states["a"], err)
		}
		_, states, _, err = s.log.Group("mirror/us/group/g")
		if err != nil || states["a"] == nil || !states["a"].Updated.Equal(mirrored.Updated) || !sameGroupVector(states["a"].Vector, mirrored.Vector) {
			t.Fatalf("mirrored group state %+v (%v), want its vector and its origin's time", states["a"], err)
		}
	}
}
