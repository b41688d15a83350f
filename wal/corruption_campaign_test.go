package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Campaign 5 (disk corruption): the stored files of a stopped log are damaged
// (one bit flipped, or the file cut short) and the log is opened again with
// VerifyOnOpen. The judge: either Open fails with an error that names what is
// damaged, or every acknowledged record and position comes back exactly.
// Serving a wrong record, or opening with acknowledged records missing, fails
// the test.
//
// WAL_CORRUPT_TRIALS=N sets the number of random trials (default 60; 20 with
// -short); WAL_CORRUPT_SEED the seed.

var corruptTopics = []string{"orders", "payments", "audit"}

const (
	corruptFlushed = 400 // records per topic written before a flush: in sstables
	corruptTail    = 60  // records per topic written after it: in the WAL only
)

// buildCorruptStore writes the store a trial damages: sstables, a live WAL, a
// MANIFEST, positions, then a clean Close (which writes the close marker).
func buildCorruptStore(t *testing.T, dir string) {
	t.Helper()
	l, err := Open(dir, Options{Logger: testLogger(t), RetentionInterval: -1, MemTableSize: 4 << 20, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < corruptFlushed; i += 50 {
		for _, tp := range corruptTopics {
			mustAppend(t, l, tp, i, 50)
		}
	}
	if err := l.pdb.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tp := range corruptTopics {
		if err := l.SetPosition(t.Context(), Position{Name: "billing", Topic: tp, Value: 123}); err != nil {
			t.Fatal(err)
		}
		for i := corruptFlushed; i < corruptFlushed+corruptTail; i += 6 {
			mustAppend(t, l, tp, i, 6)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkCorruptStore opens dir and returns the Open error, or checks that every
// acknowledged record and position is there and whole; a read error (damage
// found on read) is returned too. A wrong or missing record fails t.
func checkCorruptStore(t *testing.T, name, dir string, verify bool) (err error) {
	t.Helper()
	l, err := Open(dir, Options{Logger: testLogger(t), RetentionInterval: -1, VerifyOnOpen: verify})
	if err != nil {
		return err
	}
	defer l.Close()
	for _, tp := range corruptTopics {
		first, next, ok := l.Bounds(tp)
		if !ok || first != 0 || next != corruptFlushed+corruptTail {
			t.Errorf("%s: opened without error, but %s has bounds [%d, %d) (%v), want [0, %d): acknowledged records silently dropped",
				name, tp, first, next, ok, corruptFlushed+corruptTail)
			return nil
		}
		for from := uint64(0); from < next; {
			recs, err := l.Read(tp, from, 100, 0)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if want := testPayload(tp, int(r.Offset)); r.Offset != from || !bytes.Equal(r.Payload, want) {
					t.Errorf("%s: %s offset %d served as %q, want offset %d %q", name, tp, r.Offset, r.Payload, from, want)
					return nil
				}
				from++
			}
		}
		if v, ok, _ := l.Position("billing", tp); !ok || v != 123 {
			t.Errorf("%s: opened without error, but position billing/%s = %d (%v), want 123", name, tp, v, ok)
		}
	}
	return nil
}

func copyStore(t *testing.T, from string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(dir, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// storeFiles lists the files a trial may damage, by kind.
func storeFiles(t *testing.T, dir string) map[string][]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string][]string{}
	for _, e := range entries {
		n := e.Name()
		var kind string
		switch {
		case strings.HasSuffix(n, ".sst"):
			kind = "sstable"
		case strings.HasSuffix(n, ".log"):
			kind = "wal"
		case strings.HasPrefix(n, "MANIFEST-"):
			kind = "manifest"
		case n == closeMarkFile:
			kind = "closemark"
		default:
			continue // OPTIONS (parsed text: a flip may well be harmless), LOCK, markers
		}
		info, err := e.Info()
		if err != nil || info.Size() == 0 {
			continue
		}
		kinds[kind] = append(kinds[kind], n)
	}
	return kinds
}

func flipBit(t *testing.T, path string, rng *rand.Rand) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := rng.IntN(len(b))
	bit := byte(1) << rng.IntN(8)
	b[i] ^= bit
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("flip bit %#x at byte %d of %d", bit, i, len(b))
}

func truncate(t *testing.T, path string, rng *rand.Rand) string {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	n := rng.Int64N(info.Size())
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("truncate to %d of %d bytes", n, info.Size())
}

func TestCorruptionCampaign(t *testing.T) {
	trials := int(envInt("WAL_CORRUPT_TRIALS"))
	if trials == 0 {
		trials = 60
		if testing.Short() {
			trials = 20
		}
	}
	seed := envInt("WAL_CORRUPT_SEED")
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("trials %d, seed %d (rerun with WAL_CORRUPT_SEED=%d)", trials, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 5))

	pristine := filepath.Join(t.TempDir(), "pristine")
	buildCorruptStore(t, pristine)
	// Opening replays the WAL into a new sstable: check a copy, damage copies
	// of the store exactly as the stopped node left it.
	if err := checkCorruptStore(t, "pristine", copyStore(t, pristine), true); err != nil {
		t.Fatalf("the undamaged store does not open: %v", err)
	}
	kinds := storeFiles(t, pristine)
	for _, k := range []string{"sstable", "wal", "manifest", "closemark"} {
		if len(kinds[k]) == 0 {
			t.Fatalf("the store has no %s file to damage: %v", k, kinds)
		}
	}
	kindNames := []string{"sstable", "wal", "manifest", "closemark"}
	type tally struct{ detected, harmless int }
	results := map[string]*tally{}
	for i := range trials {
		kind := kindNames[i%len(kindNames)]
		file := kinds[kind][rng.IntN(len(kinds[kind]))]
		dir := copyStore(t, pristine)
		var what string
		if rng.IntN(2) == 0 {
			what = flipBit(t, filepath.Join(dir, file), rng)
		} else {
			what = truncate(t, filepath.Join(dir, file), rng)
		}
		name := fmt.Sprintf("trial %d: %s %s: %s", i, kind, file, what)
		err := checkCorruptStore(t, name, dir, true)
		if t.Failed() {
			t.Fatalf("%s: the damage was not detected (seed %d)", name, seed)
		}
		key := kind + " " + strings.Fields(what)[0]
		if results[key] == nil {
			results[key] = &tally{}
		}
		if err != nil {
			results[key].detected++
			if !namesDamage(err, file) {
				t.Errorf("%s: detected, but the error names neither the file nor a topic and offset: %v", name, err)
			}
			t.Logf("%s: %v", name, firstLine(err))
		} else {
			results[key].harmless++
			t.Logf("%s: harmless (every record and position intact)", name)
		}
	}
	keys := make([]string, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("%-20s detected %3d, harmless %3d", k, results[k].detected, results[k].harmless)
	}
}

// namesDamage says whether err points at what is damaged: the file (Pebble
// names sstables, WALs and the MANIFEST by number) or a topic and offset.
func namesDamage(err error, file string) bool {
	msg := err.Error()
	num := strings.TrimLeft(strings.TrimSuffix(strings.TrimSuffix(file, ".sst"), ".log"), "0")
	if i := strings.IndexByte(file, '-'); i >= 0 {
		num = strings.TrimLeft(file[i+1:], "0")
	}
	var ce *CorruptError
	return strings.Contains(msg, file) || (num != "" && strings.Contains(msg, num)) ||
		(errors.As(err, &ce) && (ce.Topic != "" || strings.Contains(ce.Reason, closeMarkFile)))
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// TestCorruptWALTailAfterCleanClose is the case Pebble alone gets wrong: the last
// batch of the WAL, synced and acknowledged, is damaged. Pebble reads that as a
// torn write and drops it; the close marker turns it into an error naming the
// topic and the offset where the log now ends. After a crash (no fresh marker)
// the same torn tail is accepted: it held only records never acknowledged.
func TestCorruptWALTailAfterCleanClose(t *testing.T) {
	pristine := filepath.Join(t.TempDir(), "pristine")
	buildCorruptStore(t, pristine)
	wals := storeFiles(t, pristine)["wal"]
	slices.Sort(wals)
	last := wals[len(wals)-1]
	for _, damage := range []string{"flip", "truncate"} {
		dir := copyStore(t, pristine)
		path := filepath.Join(dir, last)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The last record appended: its payload is stored as is in the WAL.
		i := bytes.LastIndex(b, fmt.Appendf(nil, "/%d/", corruptFlushed+corruptTail-1))
		if i < 0 {
			t.Fatalf("the last record is not in %s", last)
		}
		if damage == "flip" {
			b[i+1] ^= 0x10
		} else {
			b = b[:i]
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		err = checkCorruptStore(t, damage, dir, false)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Topic == "" || !strings.Contains(err.Error(), "acknowledged records lost") {
			t.Fatalf("%s of the WAL's last batch after a clean close: %v, want a CorruptError naming the topic", damage, err)
		}
		t.Logf("%s: %v", damage, err)

		// The same bytes after a crash: no marker newer than the tail.
		if err := os.Remove(filepath.Join(dir, closeMarkFile)); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, Options{Logger: testLogger(t), RetentionInterval: -1, VerifyOnOpen: true})
		if err != nil {
			t.Fatalf("%s without a close marker (a crash): %v", damage, err)
		}
		_, next, _ := l.Bounds(ce.Topic)
		if next != ce.Offset {
			t.Errorf("after a crash %s ends at %d, want %d", ce.Topic, next, ce.Offset)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCorruptSSTableFoundOnRead: without VerifyOnOpen a damaged data block is
// found when it is read, and reported with the sstable's name; the log does not
// crash (Pebble's default is a fatal error) and intact topics stay readable.
func TestCorruptSSTableFoundOnRead(t *testing.T) {
	pristine := t.TempDir()
	buildCorruptStore(t, pristine)
	ssts := storeFiles(t, pristine)["sstable"]
	if len(ssts) != 1 {
		t.Fatalf("want one sstable, got %v", ssts)
	}
	num := strings.TrimLeft(strings.TrimSuffix(ssts[0], ".sst"), "0")
	// Blocks are compressed, so find by trial a byte inside a block that Open
	// does not read (not a topic's first or last record) but a full read does.
	for pct := 10; pct < 90; pct += 5 {
		dir := copyStore(t, pristine)
		path := filepath.Join(dir, ssts[0])
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)*pct/100] ^= 0x01
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, Options{Logger: testLogger(t), RetentionInterval: -1})
		if err != nil {
			if !strings.Contains(err.Error(), num) {
				t.Fatalf("Open over a damaged block: %v, want the sstable named", err)
			}
			continue // Open read that block itself: not the case under test
		}
		_, verr := l.Verify(context.Background())
		var intact []string
		damaged := ""
		for _, tp := range corruptTopics {
			var got int
			var rerr error
			for from := uint64(0); from < corruptFlushed+corruptTail; from += 100 {
				recs, err := l.Read(tp, from, 100, 0)
				if err != nil {
					rerr = err
					break
				}
				for _, r := range recs {
					if !bytes.Equal(r.Payload, testPayload(tp, int(r.Offset))) {
						t.Fatalf("%s offset %d served wrong", tp, r.Offset)
					}
				}
				got += len(recs)
			}
			switch {
			case rerr != nil:
				if !pebble.IsCorruptionError(rerr) || !strings.Contains(rerr.Error(), num) {
					t.Fatalf("read %s over a damaged block: %v, want Pebble's corruption error naming %s", tp, rerr, ssts[0])
				}
				damaged = tp
				t.Logf("found on read of %s: %v", tp, firstLine(rerr))
			case got == corruptFlushed+corruptTail:
				intact = append(intact, tp)
			default:
				t.Fatalf("%s: %d records without an error", tp, got)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if verr == nil && damaged == "" {
			continue // the flip hit something no read uses (e.g. a shadowed key)
		}
		if verr == nil || damaged == "" || len(intact) == 0 {
			t.Fatalf("Verify %v, damaged topic %q, intact %v: want an error from both and intact topics served", verr, damaged, intact)
		}
		return
	}
	t.Fatal("no damaged byte was found by a read but not by Open: cannot test the read path")
}

// FuzzCloseMark: the close marker is read from disk at every Open, so its
// decoder must never panic, and what it accepts must round-trip.
func FuzzCloseMark(f *testing.F) {
	f.Add(encodeCloseMark(map[string]uint64{"orders": 460, "a.b.c": 0}))
	f.Add(encodeCloseMark(map[string]uint64{}))
	f.Add([]byte(closeMarkMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		marks, err := decodeCloseMark(b)
		if err != nil {
			return
		}
		again, err := decodeCloseMark(encodeCloseMark(marks))
		if err != nil || len(again) != len(marks) {
			t.Fatalf("round trip of %v: %v, %v", marks, again, err)
		}
		for k, v := range marks {
			if again[k] != v {
				t.Fatalf("round trip of %v: %v", marks, again)
			}
		}
	})
}

// BenchmarkVerify measures what VerifyOnOpen costs: a full read of a 64 MiB store of
// 1 KiB records in 8 topics, flushed to sstables (reported as MB/s of stored bytes).
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	l, err := Open(dir, Options{RetentionInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte("v"), 1024)
	recs := make([]Record, 256)
	for i := range recs {
		recs[i].Payload = payload
	}
	for i := range 256 {
		res := l.Append(context.Background(), AppendRequest{Topic: fmt.Sprintf("t%d", i%8), Records: recs})
		if res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	if err := l.pdb.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var st VerifyStats
	for b.Loop() {
		if st, err = l.Verify(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(st.Bytes))
	b.StopTimer()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}
