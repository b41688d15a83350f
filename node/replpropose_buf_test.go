package node

import "testing"

// TestEntryBufClasses checks the publish entry buffers' size classes: a buffer taken for n
// bytes holds them, one given back serves the next take of its class, and buffers outside
// the classes (grown, or past the largest) are not kept.
func TestEntryBufClasses(t *testing.T) {
	for _, n := range []int{0, 1, entryBufMin, entryBufMin + 1, 300 << 10, maxBatchBytes + 40<<10} {
		b := takeEntryBuf(n)
		if len(b) != 0 || cap(b) < n {
			t.Fatalf("takeEntryBuf(%d): len %d cap %d", n, len(b), cap(b))
		}
		if c := entryBufClass(n); c >= entryBufClasses {
			t.Fatalf("a publish batch of %d bytes falls past the classes (%d)", n, c)
		}
	}
	if b := takeEntryBuf(entryBufMin << entryBufClasses); cap(b) != entryBufMin<<entryBufClasses {
		t.Fatalf("a buffer past the classes: cap %d", cap(b))
	}
	// A buffer given back comes out of its class again empty (sync.Pool may drop it, so
	// reuse itself is not asserted).
	b := append(takeEntryBuf(100<<10), 1, 2, 3)
	putEntryBuf(b)
	if again := takeEntryBuf(100 << 10); len(again) != 0 || cap(again) != cap(b) {
		t.Fatalf("after a put: len %d cap %d, want 0 and %d", len(again), cap(again), cap(b))
	}
	putEntryBuf(make([]byte, 0, 3*entryBufMin)) // not a class size: dropped, no panic
}
