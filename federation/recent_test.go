package federation

import (
	"fmt"
	"testing"
)

// recentMoves lists the topics that moved last, the most recent first, each once; a topic
// whose moves all left the ring is forgotten, and moves of mirrored records only are not
// counted.
func TestRecentMovesNewestFirst(t *testing.T) {
	r := newRecentMoves(4)
	for _, topic := range []string{"a", "b", "a", "c"} {
		r.add(topic, true)
	}
	r.add("mirrored", false)
	if got, want := fmt.Sprint(r.newest(10)), "[c a b]"; got != want {
		t.Fatalf("newest: %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(r.newest(2)), "[c a]"; got != want {
		t.Fatalf("newest 2: %s, want %s", got, want)
	}
	r.add("d", true)
	r.add("e", true) // b's only move and a's first have left the ring
	if got, want := fmt.Sprint(r.newest(10)), "[e d c a]"; got != want {
		t.Fatalf("after the ring wrapped: %s, want %s", got, want)
	}
	for range 8 {
		r.add("hot", true)
	}
	if got, want := fmt.Sprint(r.newest(10)), "[hot]"; got != want {
		t.Fatalf("one topic moving: %s, want %s", got, want)
	}
	if len(r.mu.last) != 1 {
		t.Fatalf("%d topics kept, want 1", len(r.mu.last))
	}
}
