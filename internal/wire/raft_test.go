package wire

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

// TestWriteRaftBatch checks that a batch encoded into the Writer's buffer makes the bytes
// Write(&RaftBatch{...}) makes, beside other frames, that a failed encoding leaves the
// buffer as it was, and that KeepBuffer keeps a large buffer across flushes (and only up to
// its bound).
func TestWriteRaftBatch(t *testing.T) {
	body := func(n int) []byte { return bytes.Repeat([]byte{0xab}, n) }
	var got, want bytes.Buffer
	w, ref := NewWriter(&got), NewWriter(&want)
	w.KeepBuffer(4 << 20)
	for _, n := range []int{1, 300, 70 << 10, 0, 2 << 20, 5} {
		for _, wr := range []*Writer{w, ref} {
			wr.Write(&Raft{Class: RaftBulk, From: 3, To: uint64(n)})
		}
		size := n / 2 // a short hint: encode may still grow the buffer
		got, err := w.WriteRaftBatch(size, func(dst []byte) ([]byte, error) { return append(dst, body(n)...), nil })
		if err != nil || got != n {
			t.Fatalf("WriteRaftBatch of %d bytes: %d, %v", n, got, err)
		}
		if _, err := w.WriteRaftBatch(10, func(dst []byte) ([]byte, error) {
			return nil, errors.New("encode failed")
		}); err == nil {
			t.Fatal("an encode error was not returned")
		}
		ref.Write(&RaftBatch{Batch: body(n)})
	}
	w.Flush()
	ref.Flush()
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("%d bytes written, %d expected, not the same", got.Len(), want.Len())
	}

	kept := NewWriter(&got)
	kept.KeepBuffer(4 << 20)
	for _, c := range []struct {
		n    int
		keep bool
	}{{2 << 20, true}, {5 << 20, false}} {
		kept.WriteRaftBatch(c.n, func(dst []byte) ([]byte, error) { return append(dst, body(c.n)...), nil })
		kept.Flush()
		if big := cap(kept.buf) >= c.n; big != c.keep {
			t.Errorf("after a flush of %d bytes with KeepBuffer(4 MiB): buffer capacity %d", c.n, cap(kept.buf))
		}
	}
}

// TestWriterRelease: a stream gone idle gives back the large buffer KeepBuffer kept, and only
// when nothing is buffered.
func TestWriterRelease(t *testing.T) {
	w := NewWriter(io.Discard)
	big := bytes.Repeat([]byte{1}, 2<<20)
	fill := func() {
		t.Helper()
		w.KeepBuffer(8 << 20)
		w.Write(&RaftBatch{Batch: big})
		w.Flush()
		if cap(w.buf) < 2<<20 {
			t.Fatalf("KeepBuffer(8 MiB) kept %d bytes of buffer after a 2 MiB frame", cap(w.buf))
		}
	}
	fill()
	w.Write(&RaftBatch{Batch: []byte{1}})
	w.Release()
	if cap(w.buf) < 2<<20 || w.Buffered() == 0 {
		t.Fatal("Release gave back a buffer that held an unflushed frame")
	}
	w.Flush()
	fill()
	w.Release()
	if cap(w.buf) > 64<<10 {
		t.Fatalf("after Release the writer keeps %d bytes of buffer, want at most 64 KiB", cap(w.buf))
	}
}

// TestReaderReuseRaftBodies checks that a Reader told to reuse RAFT_BATCH bodies reads
// each of them into the one buffer it keeps (no body allocated per frame once it is large
// enough), that each batch still decodes to its own bytes, and that a body over the bound
// gets one of its own.
func TestReaderReuseRaftBodies(t *testing.T) {
	var stream bytes.Buffer
	w := NewWriter(&stream)
	bodies := [][]byte{bytes.Repeat([]byte{1}, 300<<10), bytes.Repeat([]byte{2}, 100<<10), bytes.Repeat([]byte{3}, 300<<10), bytes.Repeat([]byte{4}, 2<<20)}
	for _, b := range bodies {
		if err := w.Write(&RaftBatch{Batch: b}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(stream.Bytes()), Limits{MaxFrame: 4 << 20})
	r.ReuseRaftBodies(1 << 20)
	var first *byte
	for i, want := range bodies {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		f, err := r.Read()
		runtime.ReadMemStats(&m1)
		if err != nil {
			t.Fatal(err)
		}
		got := f.(*RaftBatch).Batch
		if !bytes.Equal(got, want) {
			t.Fatalf("batch %d: %d bytes read back differ from the %d written", i, len(got), len(want))
		}
		alloc := m1.TotalAlloc - m0.TotalAlloc
		switch {
		case i == 0:
			first = &got[0]
		case len(want) > 1<<20:
			if &got[0] == first || alloc < uint64(len(want)) {
				t.Errorf("batch %d of %d bytes, over the bound, was read into the kept buffer", i, len(want))
			}
		default:
			if &got[0] != first || alloc > 64<<10 {
				t.Errorf("batch %d of %d bytes: not read into the kept buffer (%d bytes allocated)", i, len(want), alloc)
			}
		}
	}
}
