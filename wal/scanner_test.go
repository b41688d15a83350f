package wal

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// A Scanner read in batches hands over exactly what ReadFunc does: every record once, in
// order, whatever the batch limits, across appends made while its iterator is open (a read
// past the high-watermark it was opened at opens a new one), after a Release, after a jump
// backwards or forwards, and after a callback error (the refused record comes again).
func TestScannerBatches(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	mustAppend(t, l, "sc", 0, 500)
	sc := l.NewScanner("sc")
	defer sc.Release()
	var got []uint64
	collect := func(r *Record) error {
		if want := testPayload("sc", int(r.Offset)); !bytes.Equal(r.Payload, want) {
			t.Fatalf("offset %d: payload %q, want %q", r.Offset, r.Payload, want)
		}
		got = append(got, r.Offset)
		return nil
	}
	read := func(from uint64, maxRecords, maxBytes int) int {
		t.Helper()
		n, err := sc.ReadFunc(from, maxRecords, maxBytes, collect)
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		return n
	}
	next := uint64(0)
	for i := 0; next < 300; i++ {
		next += uint64(read(next, 7+i%5, 200+i*37%900)) // batches of both limits
	}
	mustAppend(t, l, "sc", 500, 100) // while the iterator is open
	for next < 500 {
		next += uint64(read(next, 50, 0))
	}
	if sc.opens != 1 {
		t.Fatalf("%d iterators opened for reading up to the old high-watermark, want 1", sc.opens)
	}
	next += uint64(read(next, 40, 0)) // past the old high-watermark: a new iterator
	if sc.opens != 2 || next != 540 {
		t.Fatalf("read on to %d with %d iterators opened, want 540 and 2", next, sc.opens)
	}
	sc.Release()
	next += uint64(read(next, 10, 0))
	// A jump backwards (below the iterator's lower bound) and one forwards; their records are
	// dropped again, and the reading goes on from next.
	if read(20, 3, 0) != 3 || read(next+5, 5, 0) != 5 {
		t.Fatal("short jump reads")
	}
	if want := []uint64{20, 21, 22, 555, 556, 557, 558, 559}; !slices.Equal(got[len(got)-8:], want) {
		t.Fatalf("jump reads gave %v, want %v", got[len(got)-8:], want)
	}
	got = got[:len(got)-8]
	stop := errors.New("stop")
	n, err := sc.ReadFunc(next, 0, 0, func(r *Record) error {
		if r.Offset == 570 {
			return stop
		}
		return collect(r)
	})
	if err != stop || n != 20 {
		t.Fatalf("stopped read: %d, %v", n, err)
	}
	next = 570
	for next < 600 {
		next += uint64(read(next, 0, 0))
	}
	if n := read(600, 0, 0); n != 0 {
		t.Fatalf("read at the high-watermark: %d records", n)
	}
	for i, off := range got {
		if off != uint64(i) {
			t.Fatalf("record %d has offset %d: %v", i, off, got)
		}
	}
	if len(got) != 600 {
		t.Fatalf("%d records, want 600", len(got))
	}
}

// A Scanner sees retention: a read before the new first offset is out of range even while
// its iterator (opened before the deletion) is open, and a read after it continues.
func TestScannerRetention(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	payload := make([]byte, 1000)
	for range 100 {
		if res := l.Append(t.Context(), AppendRequest{Topic: "r", Records: []Record{{Payload: payload}}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	sc := l.NewScanner("r")
	defer sc.Release()
	nop := func(*Record) error { return nil }
	if n, err := sc.ReadFunc(0, 10, 0, nop); n != 10 || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	perRecord := l.Topics()[0].Bytes / 100
	mustSetRetention(t, l, "r", Retention{MaxBytes: int64(50 * perRecord)})
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	var oor *OffsetOutOfRangeError
	if _, err := sc.ReadFunc(10, 10, 0, nop); !errors.As(err, &oor) || oor.First != 50 {
		t.Fatalf("read below the new first offset: %v", err)
	}
	if n, err := sc.ReadFunc(50, 0, 0, nop); n != 50 || err != nil {
		t.Fatalf("read from the new first offset: %d, %v", n, err)
	}
}

// Release before Close leaves Close clean; a Scanner released or used after Close fails
// with ErrClosed and does not panic.
func TestScannerClose(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	mustAppend(t, l, "c", 0, 10)
	sc := l.NewScanner("c")
	if n, err := sc.ReadFunc(0, 5, 0, func(*Record) error { return nil }); n != 5 || err != nil {
		t.Fatalf("read: %d, %v", n, err)
	}
	sc.Release()
	if err := l.Close(); err != nil {
		t.Fatalf("close after release: %v", err)
	}
	if _, err := sc.ReadFunc(5, 5, 0, func(*Record) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	sc.Release()
}
