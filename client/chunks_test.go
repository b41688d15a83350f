package client

import "testing"

// TestChunks adds past several chunks and reads every entry back by index and in order.
func TestChunks(t *testing.T) {
	var s chunks[int]
	const n = 3*chunkLen + 17
	for i := range n {
		s.add(i)
	}
	if s.len() != n || len(s.c) != 4 {
		t.Fatalf("len %d in %d chunks, want %d in 4", s.len(), len(s.c), n)
	}
	for i := range n {
		if got := *s.at(i); got != i {
			t.Fatalf("at(%d) = %d", i, got)
		}
	}
	next := 0
	s.each(func(v *int) {
		if *v != next {
			t.Fatalf("each: %d at %d", *v, next)
		}
		next++
	})
	if next != n {
		t.Fatalf("each visited %d of %d", next, n)
	}
	for _, c := range s.c[1:] {
		if cap(c) != chunkLen {
			t.Fatalf("a later chunk has cap %d, want %d", cap(c), chunkLen)
		}
	}
}
