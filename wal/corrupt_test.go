package wal

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCorruptValueIsNeverServed flips bytes of stored values behind the log's
// back: every read path reports ErrCorrupt with the topic and offset.
func TestCorruptValueIsNeverServed(t *testing.T) {
	fs := vfs.NewMem()
	l := openTestLog(t, "db", Options{FS: fs})
	mustAppend(t, l, "c", 0, 10)
	id := l.mu.topics["c"].id
	get := func(off uint64) []byte {
		v, closer, err := l.pdb.Get(recordKey(id, off))
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		return append([]byte(nil), v...)
	}
	// A flipped payload byte at offset 4.
	bad := get(4)
	bad[len(bad)-1] ^= 1
	if err := l.pdb.Set(recordKey(id, 4), bad, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	// A valid value stored under the wrong key (offset 6 holds 7's value).
	if err := l.pdb.Set(recordKey(id, 6), get(7), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from uint64
		want uint64
	}{{0, 4}, {4, 4}, {5, 6}} {
		recs, err := l.Read("c", tc.from, 10, 0)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Topic != "c" || ce.Offset != tc.want || recs != nil {
			t.Errorf("Read from %d: %v (%d records), want corrupt at %d", tc.from, err, len(recs), tc.want)
		}
	}
	if recs, err := l.Read("c", 7, 10, 0); err != nil || len(recs) != 3 {
		t.Errorf("intact tail: %v %v", recs, err)
	}
	// A truncated value.
	if err := l.pdb.Set(recordKey(id, 9), get(9)[:10], pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read("c", 9, 1, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated: %v", err)
	}
	// The binary search for a time past the end probes 5, 7, 8, 9: the
	// truncated value fails it rather than being guessed around.
	if _, err := l.OffsetForTime("c", 1<<62); !errors.Is(err, ErrCorrupt) {
		t.Errorf("OffsetForTime over a corrupt value: %v", err)
	}
	if off, err := l.OffsetForTime("c", 0); err != nil || off != 0 {
		t.Errorf("OffsetForTime at the start: %d %v", off, err)
	}
	mustAppend(t, l, "c", 10, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen with a corrupt last record: Open refuses instead of guessing
	// the next offset.
	db, err := pebble.Open("db", &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatNewest, Logger: pebbleLogger{testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(recordKey(id, 10), []byte("garbage garbage garbage"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err := Open("db", Options{FS: fs}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf("Open with corrupt tail: %v", err)
		if err == nil {
			l.Close()
		}
	}
}

// TestCommitFailureStopsAppends injects an fsync error on Pebble's WAL: the
// append fails with ErrFailed, every later append too (no offset is reused,
// no hole is made), and what was durable stays readable.
func TestCommitFailureStopsAppends(t *testing.T) {
	var armed atomic.Bool
	injected := errors.New("injected fsync failure")
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && strings.HasSuffix(op.Path, ".log") &&
			(op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) {
			return injected
		}
		return nil
	}))
	l, err := Open("db", Options{FS: fs, Logger: testLogger(t), RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "a", 0, 3)
	armed.Store(true)
	res := l.Append(t.Context(), AppendRequest{Topic: "a", Records: []Record{{Payload: []byte("lost")}}})
	if !errors.Is(res.Err, ErrFailed) || !errors.Is(res.Err, injected) {
		t.Fatalf("append during fsync failure: %+v", res)
	}
	armed.Store(false) // a disk that "recovers" must not make the log accept appends again
	for range 3 {
		res = l.Append(t.Context(), AppendRequest{Topic: "a", Records: []Record{{Payload: []byte("after")}}})
		if !errors.Is(res.Err, ErrFailed) {
			t.Fatalf("append after the failure: %+v", res)
		}
	}
	if err := l.SetPosition(t.Context(), Position{Name: "p", Topic: "a", Value: 1}); !errors.Is(err, ErrFailed) {
		t.Errorf("SetPosition after the failure: %v", err)
	}
	if recs, err := l.Read("a", 0, 10, 0); err != nil || len(recs) != 3 {
		t.Errorf("durable records after the failure: %d, %v", len(recs), err)
	}
	if _, next, _ := l.Bounds("a"); next != 3 {
		t.Errorf("HWM moved to %d", next)
	}
	if st := l.Stats(); !errors.Is(st.Failed, injected) {
		t.Errorf("Stats.Failed = %v", st.Failed)
	}
	_ = l.Close() // Pebble may report the WAL error again
	checkNoGoroutines(t)
}
