package wal

import (
	"maps"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestPositionVector: a position written with a vector reads back with it after a reopen
// (v3), one written without has none (v2), a position rewritten without a vector loses it,
// and a v2 value written before vectors still reads.
func TestPositionVector(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{})
	mustAppend(t, l, "a", 0, 3)
	vec := map[string]uint64{"eu": 41, "us": 0, "ap": 1 << 40}
	if err := l.SetPosition(t.Context(), Position{Name: "d", Topic: "a", Value: 2, Vector: vec}); err != nil {
		t.Fatal(err)
	}
	vec["eu"] = 99 // the log keeps its own copy
	if err := l.SetPosition(t.Context(), Position{Name: "plain", Topic: "a", Value: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	resume, got, ok, err := l.PositionVector("d", "a")
	if want := map[string]uint64{"eu": 41, "us": 0, "ap": 1 << 40}; err != nil || !ok || resume != 3 || !maps.Equal(got, want) {
		t.Fatalf("PositionVector after reopen = %d %v %v %v, want 3 %v", resume, got, ok, err, want)
	}
	got["eu"] = 7 // a copy
	if _, again, _, _ := l.PositionVector("d", "a"); again["eu"] != 41 {
		t.Error("PositionVector hands out the stored map")
	}
	if resume, got, ok, _ := l.PositionVector("plain", "a"); !ok || resume != 2 || got != nil {
		t.Errorf("position without a vector: %d %v %v", resume, got, ok)
	}
	if err := l.SetPosition(t.Context(), Position{Name: "d", Topic: "a", Value: 2}); err != nil {
		t.Fatal(err)
	}
	if _, got, _, _ := l.PositionVector("d", "a"); got != nil {
		t.Errorf("rewritten without a vector, still has %v", got)
	}
	err = l.SetPosition(t.Context(), Position{Name: "d", Topic: "a", Value: 2, Vector: map[string]uint64{"": 1}})
	if err == nil {
		t.Error("a vector with an empty region was stored")
	}
}

// TestPositionVectorCorrupt: a v3 value whose vector does not decode is reported as
// corrupt at Open, never read as a position without it.
func TestPositionVectorCorrupt(t *testing.T) {
	for name, vec := range map[string][]byte{
		"count 0":         {0},
		"region too long": {1, 9, 'e'},
		"no offset":       {1, 2, 'e', 'u'},
		"trailing":        {1, 2, 'e', 'u', 1, 0},
		"region twice":    {2, 1, 'e', 1, 1, 'e', 2},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{testLogger(t)}})
			if err != nil {
				t.Fatal(err)
			}
			k := positionKey("a", "d")
			p := append(make([]byte, posV2Len), vec...)
			if err := db.Set(k, sealMetaVersion(k, positionV3, p), pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			l, err := Open(dir, Options{Logger: testLogger(t), RetentionInterval: -1})
			if err == nil {
				l.Close()
				t.Fatal("opened a log with a corrupt position vector")
			}
			t.Logf("Open: %v", err)
		})
	}
}

// FuzzDecodePosition: whatever bytes a position value holds, decoding never panics, and a
// value that decodes re-encodes to one that decodes to the same position.
func FuzzDecodePosition(f *testing.F) {
	k := positionKey("a", "d")
	f.Add(append(make([]byte, posV2Len), 1, 2, 'e', 'u', 7), byte(positionV3))
	f.Add(make([]byte, posV2Len), byte(positionV2))
	f.Add(make([]byte, 8), byte(metaVersion))
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	f.Fuzz(func(t *testing.T, payload []byte, version byte) {
		pv, reason := decodePosition(k, sealMetaVersion(k, version, payload))
		if reason != "" {
			return
		}
		b := db.NewIndexedBatch()
		defer b.Close()
		putPosition(b, "a", "d", pv)
		val, closer, err := b.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		again, reason := decodePosition(k, val)
		if reason != "" || again.v != pv.v || again.updated != pv.updated || again.next != pv.next || !maps.Equal(again.vec, pv.vec) {
			t.Fatalf("%+v re-encoded decodes to %+v (%s)", pv, again, reason)
		}
	})
}
