package tail

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/wal"
)

// openTailLog opens a log in t.TempDir() with retention r (applied only when the test calls
// EnforceRetention: the log's own pass runs once a minute).
func openTailLog(t *testing.T, r ...wal.Retention) *wal.Log {
	t.Helper()
	opts := wal.Options{Logger: slog.New(slog.DiscardHandler)}
	if len(r) > 0 {
		opts.Retention = r[0]
	}
	l, err := wal.Open(filepath.Join(t.TempDir(), "log"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// newTestTail opens a log and returns it, a tail set over it and topic's tail (released by
// t.Cleanup).
func newTestTail(t *testing.T, records, maxBytes int, topic string) (*wal.Log, *Set, *Topic) {
	t.Helper()
	l := openTailLog(t)
	ts := NewSet(l, Config{Records: records, Bytes: maxBytes})
	tl := ts.Acquire(topic)
	t.Cleanup(func() { ts.Release(tl) })
	return l, ts, tl
}

// appendN appends count records to topic, each its own append, with payload "p<offset>"
// (the topic's offsets so far are given by first).
func appendN(t *testing.T, l *wal.Log, topic string, first, count int, size int) {
	t.Helper()
	for i := range count {
		p := []byte(fmt.Sprintf("p%d", first+i))
		p = append(p, bytes.Repeat([]byte{'.'}, max(0, size-len(p)))...)
		if res := l.Append(context.Background(), wal.AppendRequest{Topic: topic, Records: []wal.Record{{Payload: p}}}); res.Err != nil {
			t.Fatal(res.Err)
		} else if res.First != uint64(first+i) {
			t.Fatalf("appended at %d, want %d", res.First, first+i)
		}
	}
}

// tailRead reads from the tail and returns the offsets and payloads it got (copied).
func tailRead(t *testing.T, tl *Topic, from uint64, maxRecords, maxBytes int) ([]uint64, [][]byte, bool) {
	t.Helper()
	var offs []uint64
	var pays [][]byte
	got, ok, err := tl.Read(from, maxRecords, maxBytes, func(r *wal.Record) {
		offs = append(offs, r.Offset)
		pays = append(pays, r.Payload) // kept on purpose: the tail's bytes must never change
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != len(offs) {
		t.Fatalf("read reported %d records, gave %d", got, len(offs))
	}
	return offs, pays, ok
}

func checkRun(t *testing.T, offs []uint64, pays [][]byte, from uint64, want int) {
	t.Helper()
	if len(offs) != want {
		t.Fatalf("got %d records %v, want %d from %d", len(offs), offs, want, from)
	}
	for i, o := range offs {
		if o != from+uint64(i) || !bytes.HasPrefix(pays[i], []byte(fmt.Sprintf("p%d.", o))) && string(pays[i]) != fmt.Sprintf("p%d", o) {
			t.Fatalf("record %d: offset %d payload %q, want offset %d", i, o, pays[i], from+uint64(i))
		}
	}
}

// The tail is read from the log once per batch for all readers, starts at the
// high-watermark, sends readers behind it to the log, restarts when it fell further behind
// than it holds, and its bytes never change once handed out.
func TestTailReadsOnceForAll(t *testing.T) {
	l := openTailLog(t)
	appendN(t, l, "a", 0, 10, 0)
	ts := NewSet(l, Config{Records: 8, Bytes: 1 << 20})
	tl := ts.Acquire("a")
	if ts.Acquire("a") != tl {
		t.Fatal("a second acquire made a second tail")
	}
	if offs, _, ok := tailRead(t, tl, 10, 100, 1<<20); !ok || len(offs) != 0 {
		t.Fatalf("at the head: %v ok=%v, want nothing, ok", offs, ok)
	}
	if _, _, ok := tailRead(t, tl, 5, 100, 1<<20); ok {
		t.Fatal("offset 5, before the tail, was served by it")
	}
	appendN(t, l, "a", 10, 5, 0)
	var kept [][]byte
	for range 5 { // five caught-up readers
		offs, pays, ok := tailRead(t, tl, 10, 100, 1<<20)
		if !ok {
			t.Fatal("caught-up reader not served")
		}
		checkRun(t, offs, pays, 10, 5)
		kept = append(kept, pays...)
	}
	if got := ts.fills.Load(); got != 1 {
		t.Fatalf("%d reads of the log for five readers of one batch, want 1", got)
	}
	// 20 more: further than the 8 records the tail holds.
	appendN(t, l, "a", 15, 20, 0)
	offs, pays, ok := tailRead(t, tl, 15, 100, 1<<20)
	if !ok {
		t.Fatal("reader at the tail's end not served")
	}
	checkRun(t, offs, pays, 15, 8)
	if offs, pays, ok = tailRead(t, tl, 23, 100, 1<<20); !ok {
		t.Fatal("reader at 23 not served")
	}
	checkRun(t, offs, pays, 23, 8)
	if _, _, ok := tailRead(t, tl, 15, 100, 1<<20); ok {
		t.Fatal("offset 15, evicted from the 8-record tail, was served by it")
	}
	// Limits of one read.
	offs, pays, _ = tailRead(t, tl, 24, 3, 1<<20)
	checkRun(t, offs, pays, 24, 3)
	for i, p := range kept {
		if want := fmt.Sprintf("p%d", 10+i%5); string(p) != want {
			t.Fatalf("a payload handed out earlier changed to %q, want %q", p, want)
		}
	}
	ts.Release(tl)
	ts.Release(tl)
	ts.mu.Lock()
	left := len(ts.mu.byTopic)
	ts.mu.Unlock()
	if left != 0 {
		t.Fatal("the last release kept the tail")
	}
}

// TailBytes bounds what a tail holds, and a record cut off by retention is never served
// from it: the reader goes to the log, which reports the gap.
func TestTailBytesAndRetention(t *testing.T) {
	l := openTailLog(t, wal.Retention{MaxBytes: 1})
	appendN(t, l, "b", 0, 1, 100)
	ts := NewSet(l, Config{Records: 64, Bytes: 250})
	tl := ts.Acquire("b")
	appendN(t, l, "b", 1, 10, 100)
	offs, pays, ok := tailRead(t, tl, 1, 100, 1<<20)
	if !ok || len(offs) == 0 {
		t.Fatal("caught-up reader not served")
	}
	checkRun(t, offs, pays, 1, len(offs))
	tl.mu.RLock()
	held, heldBytes, first := tl.next-tl.first, tl.bytes, tl.first
	tl.mu.RUnlock()
	if heldBytes > 250 || held > 2 {
		t.Fatalf("the tail holds %d records, %d bytes; TailBytes is 250", held, heldBytes)
	}
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if lf, _, _ := l.Bounds("b"); lf <= first {
		t.Fatalf("retention kept offset %d on", lf)
	}
	if _, _, ok := tailRead(t, tl, first, 100, 1<<20); ok {
		t.Fatal("a record deleted by retention was served from the tail")
	}
}

// A connection's subscriptions are woken one after the other, whatever order they came in,
// and a cancelled one is not woken.
func TestTailWakesByConnection(t *testing.T) {
	l, _, tl := newTestTail(t, 8, 1<<20, "w")
	s1, s2 := &testConn{}, &testConn{}
	order := make(chan string, 8)
	chans := map[chan struct{}]string{}
	add := func(s *testConn, name string) func() {
		ch := make(chan struct{}, 1)
		chans[ch] = name
		return tl.Watch(s, ch)
	}
	add(s1, "a")
	add(s2, "b")
	add(s1, "c")
	cancelD := add(s2, "d")
	add(s1, "e")
	cancelD()
	cancelD()
	tl.wmu.Lock()
	for _, w := range tl.waiters {
		order <- chans[w.ch]
	}
	tl.wmu.Unlock()
	close(order)
	var got []string
	for name := range order {
		got = append(got, name)
	}
	if strings.Join(got, "") != "aceb" {
		t.Fatalf("wake order %v, want a c e (one connection) then b", got)
	}
	appendN(t, l, "w", 0, 1, 0)
	for ch, name := range chans {
		select {
		case <-ch:
			if name == "d" {
				t.Fatal("a cancelled waiter was woken")
			}
		default:
			if name != "d" {
				t.Fatalf("waiter %s not woken by an append", name)
			}
		}
	}
}

// A tail starts small and grows with its appends up to TailRecords, keeping its records in
// order.
func TestTailGrows(t *testing.T) {
	l, ts, tl := newTestTail(t, 100, 1<<20, "g")
	appendN(t, l, "g", 0, 70, 0)
	offs, pays, ok := tailRead(t, tl, 0, 1000, 1<<20)
	if !ok {
		t.Fatal("caught-up reader not served")
	}
	checkRun(t, offs, pays, 0, 70)
	if n := len(tl.ring); n != 100 {
		t.Fatalf("ring of %d slots for 70 records, want 100 (16 doubled, capped at TailRecords)", n)
	}
	offs, pays, _ = tailRead(t, tl, 0, 1000, 1<<20) // served again, from memory
	checkRun(t, offs, pays, 0, 70)
	if got := ts.fills.Load(); got != 1 {
		t.Fatalf("%d fills, want 1", got)
	}
}

// Small records, one per append batch, cost the tail their own size, not a copy chunk each
// (a tail of 1,024 such records once kept 64 MiB alive).
func TestTailSmallRecordsHoldLittle(t *testing.T) {
	l, _, tl := newTestTail(t, 1024, 1<<20, "s")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 1000 {
		appendN(t, l, "s", i, 1, 10)
		if offs, _, ok := tailRead(t, tl, uint64(i), 10, 1<<20); !ok || len(offs) != 1 {
			t.Fatalf("record %d: %v ok=%v", i, offs, ok)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if held := tl.next - tl.first; held != 1000 {
		t.Fatalf("the tail holds %d records, want 1000", held)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
		t.Fatalf("the heap grew by %d MiB for a tail of 1,000 records of 10 B", grew>>20)
	}
}

// testConn is a connection for the tail's wake-ups (not zero-sized: two must differ).
type testConn struct{ sent uint64 }

func (c *testConn) ConnectionStats() quic.ConnectionStats {
	return quic.ConnectionStats{BytesSent: c.sent}
}
