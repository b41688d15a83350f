package federation

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// A Resync (every gossip event, every placement change) with the watched patterns unchanged
// sends the origin no WATCH, so the origin does not list every topic again: after Resyncs
// and one new pattern, a lists its topics once more, for the pattern. Before, each Resync's
// WATCH made a relist them all (at 100,000 topics, around a cut's gossip events, a listing
// each).
func TestResyncSendsNoWatchWhenPatternsUnchanged(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}})
	var pages atomic.Int64
	a.fedNow().paceListing(4, 0, func() { pages.Add(1) })
	for i := range 10 {
		a.publish(t, fmt.Sprintf("m.t%02d", i), "x")
	}
	b := m.addNode("b", nodeOpts{mirror: []string{"m.>"}})
	testlog.WaitFor(t, 30*time.Second, "a's topics mirrored into b", func() bool {
		for i := range 10 {
			if b.cursor(t, "a", fmt.Sprintf("m.t%02d", i)) != 0 {
				return false
			}
		}
		return true
	})
	listing := pages.Load() // one listing's pages (b's catalog stream to a)
	for round := range 3 {
		for range 5 {
			b.fedNow().Resync()
		}
		b.fedNow().AddInterest(fmt.Sprintf("x%d.>", round)) // a new pattern: one WATCH, one listing
		want := listing * int64(round+2)
		testlog.WaitFor(t, 30*time.Second, fmt.Sprintf("a's listing for b's new pattern %d", round), func() bool { return pages.Load() >= want })
	}
	// The listing for the last pattern is in: any listing for a Resync was sent before it.
	a.publish(t, "m.zz", "s")
	testlog.WaitFor(t, 30*time.Second, "a's sentinel mirrored into b", func() bool { return b.cursor(t, "a", "m.zz") == 0 })
	if got, want := pages.Load(), listing*4; got != want {
		t.Fatalf("a listed %d pages, want %d (the first listing and one per new pattern, %d pages each): a WATCH for a Resync with unchanged patterns", got, want, listing)
	}
}
