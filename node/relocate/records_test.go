package relocate

import (
	"reflect"
	"testing"
	"time"
)

// The drain and move records and the gossip tags, decoded and encoded alone. Their
// behaviour in a region (drains, moves, removals, the balancers) is tested with whole nodes:
// node/drain_test.go, move_test.go, movelead_test.go, grow_test.go.

func TestDrainRecordRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		q    drainReq
	}{{"eu-1", drainReq{true, 1}}, {"a-much-longer-node-name", drainReq{false, time.Now().UnixNano()}}} {
		name, q, err := decodeDrain(encodeDrain(c.name, c.q))
		if err != nil || name != c.name || q != c.q {
			t.Fatalf("%q %v: decoded %q %v %v", c.name, c.q, name, q, err)
		}
	}
	for _, bad := range [][]byte{nil, {DrainVersion}, {DrainVersion, 0, 1, 0}, {DrainVersion, 1, 'a'}, {DrainVersion, 1, 'a', 1},
		{DrainVersion, 1, 'a', 2, 0}, {DrainVersion, 1, 'a', 1, 0, 0}, {DrainVersion, 1, 'a', 1, 0x80, 0}, {3, 1, 'a', 1, 0} /* a groups record (node/replgroups.go) */} {
		if _, _, err := decodeDrain(bad); err == nil {
			t.Errorf("%v decoded", bad)
		}
	}
	got := parseDrainReq("a=1@5,b=0@7,,c=2@1,=1@1,d,e=1,f=1@x,g=0@-3")
	if len(got) != 2 || got["a"] != (drainReq{true, 5}) || got["b"] != (drainReq{false, 7}) {
		t.Errorf("parseDrainReq: %v", got)
	}
	reqs := map[string]drainReq{"a": {true, 5}}
	newest(reqs, map[string]drainReq{"a": {false, 4}, "b": {true, 1}})
	newest(reqs, map[string]drainReq{"a": {false, 6}})
	if reqs["a"] != (drainReq{false, 6}) || reqs["b"] != (drainReq{true, 1}) {
		t.Errorf("newest: %v", reqs)
	}
}

func FuzzDrainRecord(f *testing.F) {
	f.Add(encodeDrain("eu-1", drainReq{true, 1}))
	f.Add([]byte{DrainVersion, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		name, q, err := decodeDrain(p)
		if err != nil {
			return
		}
		if b := encodeDrain(name, q); string(b) != string(p) {
			t.Fatalf("%x decoded to %q %v, which encodes as %x", p, name, q, b)
		}
	})
}

func TestMoveRecordRoundTrip(t *testing.T) {
	for _, rec := range []moveRec{
		{kind: moveKindRemove, name: "eu-4", dead: true, at: 12345},
		{kind: moveKindRemove, name: "eu-4", at: 1},
		{kind: moveKindStart, group: 7, from: "eu-1", fromID: 99, to: "eu-5", toID: 1 << 60},
		{kind: moveKindDone, group: 7, from: "eu-1", to: "eu-5", toID: 3},
		{kind: moveKindRemoved, name: "eu-1"},
		{kind: moveKindUndo, group: 7, from: "eu-1", to: "eu-5", toID: 3},
		{kind: moveKindUndone, group: 7, from: "eu-1", to: "eu-5", toID: 3},
	} {
		got, err := decodeMove(encodeMove(rec))
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Fatalf("%+v: decoded %+v, %v", rec, got, err)
		}
		b := encodeMove(rec)
		for i := range b {
			if _, err := decodeMove(b[:i]); err == nil {
				t.Fatalf("%+v cut at %d decodes", rec, i)
			}
		}
	}
	for _, bad := range []moveRec{
		{kind: moveKindStart, group: MetaGroup, from: "a", fromID: 1, to: "b", toID: 2},
		{kind: moveKindStart, group: 5, from: "a", fromID: 1, to: "a", toID: 2},
		{kind: moveKindDone, group: 5, from: "a", to: "b"},
		{kind: moveKindRemoved},
		{kind: moveKindUndo, group: 5, from: "a", to: "b"},
		{kind: moveKindUndone, group: 5, from: "a", to: "a", toID: 2},
	} {
		if _, err := decodeMove(encodeMove(bad)); err == nil {
			t.Fatalf("%+v decodes", bad)
		}
	}
}

func FuzzMoveRecord(f *testing.F) {
	f.Add(encodeMove(moveRec{kind: moveKindStart, group: 7, from: "eu-1", fromID: 99, to: "eu-5", toID: 4}))
	f.Add(encodeMove(moveRec{kind: moveKindRemove, name: "eu-4", dead: true, at: 12345}))
	f.Fuzz(func(t *testing.T, p []byte) {
		rec, err := decodeMove(p)
		if err != nil {
			return
		}
		if again := encodeMove(rec); !reflect.DeepEqual(again, p) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", p, rec, again)
		}
	})
}

func TestParseMoveBytes(t *testing.T) {
	got := parseMoveBytes("3:1024,x:1,7:,12:0,5:99999999999")
	want := map[uint64]uint64{3: 1024, 12: 0, 5: 99999999999}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	if got := parseMoveBytes(""); len(got) != 0 {
		t.Fatalf("empty tag parsed as %v", got)
	}
}
