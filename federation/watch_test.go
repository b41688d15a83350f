package federation

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// A Resync (every gossip event, every placement change) with the watched patterns unchanged
// sends the origin no WATCH, so the origin does not list every topic again; and a WATCH that
// adds a pattern makes the origin list the topics under that pattern only (issue 34's figure
// 3: each subscription set up beside 10,000 mirrored topics added a pattern, and the origin
// listed all 10,000 for each). So after Resyncs and three new patterns, each with one topic,
// a lists its topics once and one page for each new pattern. Before, each Resync's WATCH
// made a relist them all (at 100,000 topics, around a cut's gossip events, a listing each),
// and so did each new pattern (4 listings here).
func TestResyncSendsNoWatchWhenPatternsUnchanged(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}})
	var pages atomic.Int64
	a.fedNow().paceListing(4, 0, func() { pages.Add(1) })
	for i := range 10 {
		a.publish(t, fmt.Sprintf("m.t%02d", i), "x")
	}
	for round := range 3 { // a topic under each pattern b adds below
		a.publish(t, fmt.Sprintf("x%d.t", round), "x")
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
		b.fedNow().AddInterest(fmt.Sprintf("x%d.>", round)) // a new pattern: one WATCH, one page
		topic := fmt.Sprintf("x%d.t", round)
		testlog.WaitFor(t, 30*time.Second, fmt.Sprintf("%s mirrored into b for b's new pattern", topic), func() bool { return b.cursor(t, "a", topic) == 0 })
	}
	// The listing for the last pattern is in: any listing for a Resync was sent before it.
	a.publish(t, "m.zz", "s")
	testlog.WaitFor(t, 30*time.Second, "a's sentinel mirrored into b", func() bool { return b.cursor(t, "a", "m.zz") == 0 })
	if got, want := pages.Load(), listing+3; got != want {
		t.Fatalf("a listed %d pages, want %d (the first listing, %d pages, and one page per new pattern): a WATCH for a Resync with unchanged patterns, or a new pattern's listing of every topic", got, want, listing)
	}
}

// A change of interest (a subscription set up with a pattern of its own) costs the link
// nothing per parked mirror: it looks only at the announced topics it did not mirror. With
// 1,000 parked mirrors, 20 new literal patterns (as 20 subscriptions to one topic each would
// add) ask Config.ShouldMirror about the topics they make wanted, not about the 1,000; and
// the topics they name are mirrored, whether the origin announced them before or after the
// pattern. Before, every change looked at every mirrored and announced topic (2,000 asks per
// change here; at 10,000 topics and 100 patterns, 13-400 ms of the link's goroutine each,
// into the hot topics' window of issue 34's figure 3).
func TestNewInterestLooksAtNoParkedMirror(t *testing.T) {
	const topics, patterns = 1000, 20
	var asks atomic.Int64
	m := newFedMesh(t)
	b := m.addNode("b", nodeOpts{})
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}, maxStreams: 64, parkAfter: 100 * time.Millisecond, slice: 100 * time.Millisecond,
		shouldMirror: func(topic string) bool {
			if strings.HasPrefix(topic, "m.") {
				asks.Add(1)
			}
			return true
		}})
	createTopics(t, b, "m.a", topics)
	for i := range patterns / 2 { // announced before a wants them: unwanted until the pattern
		b.publish(t, fmt.Sprintf("s.t%02d", i), "x")
	}
	testlog.WaitFor(t, 60*time.Second, "every topic mirrored and its mirror parked", func() bool {
		li, ok := a.link("b")
		return ok && li.MirroredTopics >= topics && li.MirrorStreams == 0 && li.MirrorsWaiting == 0
	})
	before := asks.Load()
	for i := range patterns {
		a.fedNow().AddInterest(fmt.Sprintf("s.t%02d", i))
	}
	for i := patterns / 2; i < patterns; i++ { // created after a wants them
		b.publish(t, fmt.Sprintf("s.t%02d", i), "x")
	}
	for i := range patterns {
		topic := fmt.Sprintf("s.t%02d", i)
		testlog.WaitFor(t, 30*time.Second, topic+" mirrored into a for its new pattern", func() bool { return a.cursor(t, "b", topic) == 0 })
	}
	if got := asks.Load() - before; got >= topics/2 {
		t.Fatalf("%d new patterns made the link ask %d times whether it mirrors one of the %d parked topics: want fewer than %d, none per parked mirror", patterns, got, topics, topics/2)
	}
}
