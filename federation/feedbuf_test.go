package federation

import (
	"bufio"
	"testing"
)

// TestFeedBuffersFollowOpenFeeds: the mirror feeds' read buffers are reused while feeds turn
// over at the bound, and go once the feeds end (a catch-up's mirrors park): at most as many
// ended feeds' buffers are kept as feeds are open, or feedBuffersFloor.
func TestFeedBuffersFollowOpenFeeds(t *testing.T) {
	var b feedBuffers
	held := make([]*bufio.Reader, 0, 1000)
	for range 1000 {
		held = append(held, b.get(nil))
	}
	made := make(map[*bufio.Reader]bool, len(held))
	for _, br := range held {
		made[br] = true
	}
	// Turnover: each ended feed's buffer goes to the next feed opened.
	for i := range 1000 {
		b.put(held[i])
		held[i] = b.get(nil)
		if !made[held[i]] {
			t.Fatalf("turnover %d: a new buffer while one was free", i)
		}
	}
	// The catch-up ends: every feed ends.
	for i, br := range held {
		b.put(br)
		if open, kept := len(held)-i-1, b.kept(); kept > max(open, feedBuffersFloor) {
			t.Fatalf("%d feeds open, %d ended feeds' buffers kept", open, kept)
		}
	}
	if k := b.kept(); k != feedBuffersFloor {
		t.Fatalf("every feed ended: %d buffers kept, want %d", k, feedBuffersFloor)
	}
	if c := cap(b.mu.free); c > 4*feedBuffersFloor {
		t.Fatalf("every feed ended: the free list's array holds %d slots", c)
	}
}
