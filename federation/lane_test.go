package federation

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// A topic that moves while a link catches up a backlog of many topics is mirrored ahead of
// the backlog (park.go's live lane): a new region's link to an origin holding 400 topics
// with records, through 2 streams, queues them in name order; a record published to the
// last of them once every topic is announced arrives while topics before it in the queue
// still wait. Without the lane it waits for its turn, after the whole backlog (issue 34's
// figure 2: records published after a 30 s cut waited behind the cut's backlog).
func TestMovedTopicMirroredAheadOfBacklog(t *testing.T) {
	const topics, bound = 400, 2
	m := newFedMesh(t)
	b := m.addNode("b", nodeOpts{})
	name := func(i int) string { return fmt.Sprintf("m.t%03d", i) }
	for i := range topics {
		b.publishSeq(t, name(i), 0, 3)
	}
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}, maxStreams: bound,
		parkAfter: 200 * time.Millisecond, slice: 100 * time.Millisecond})
	testlog.WaitFor(t, 30*time.Second, "every topic announced on a's link", func() bool {
		li, _ := a.link("b")
		return li.MirroredTopics == topics
	})
	live := name(topics - 1) // last in the backlog's order
	behind := func() (n int) {
		for i := range topics - 1 {
			if a.cursor(t, "b", name(i)) < int64(b.next(name(i)))-1 {
				n++
			}
		}
		return n
	}
	off := b.next(live)
	b.publish(t, live, "live")
	t.Logf("published to %s with %d of the other %d topics' backlogs behind", live, behind(), topics-1)
	testlog.WaitFor(t, 60*time.Second, "the live topic's record mirrored", func() bool { return a.cursor(t, "b", live) >= int64(off) })
	left := behind()
	t.Logf("the live topic's record mirrored with %d of the other %d topics' backlogs still behind", left, topics-1)
	if left == 0 {
		t.Fatalf("the record published to %s during the catch-up waited for the whole backlog", live)
	}
	testlog.WaitFor(t, 60*time.Second, "every backlog mirrored", func() bool { return behind() == 0 })
	for i := range topics {
		if got, want := checkMirrored(t, a, b, name(i)), int(b.next(name(i))); got != want {
			t.Fatalf("%s: %d records mirrored, want %d", name(i), got, want)
		}
	}
}

// The backlog lane is served while the moved lane never empties: one pick in backlogShare.
func TestBacklogNotStarvedByMovedLane(t *testing.T) {
	l := &link{sched: make(chan struct{}, 1)}
	l.mu.queued = make(map[string]bool)
	l.mu.hurried = make(map[string]bool)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.enqueueLocked("backlog")
	for i := range 100 {
		l.hurryLocked(fmt.Sprintf("moved-%d", i))
	}
	for pick := 1; ; pick++ {
		topic, ok := l.nextWaitingLocked(true)
		if !ok || pick > 16 { // backlogShare (4) at the most
			t.Fatalf("pick %d: %q, %v: the backlog waited past its share", pick, topic, ok)
		}
		if topic == "backlog" {
			return
		}
		l.hurryLocked(topic) // the moved lane never empties
	}
}

// The backlog lane serves the topic whose head moved last first (FIFO among heads of the
// same time, or unknown): after a cut, the records published just before the link came
// back (announced with heads older than the return) wait for the backlog's first picks,
// not for their turn in name order behind every topic the cut touched.
func TestBacklogServesNewestHeadFirst(t *testing.T) {
	l := &link{f: &Federation{cfg: Config{Now: time.Now}}, sched: make(chan struct{}, 1)}
	l.mu.queued = make(map[string]bool)
	l.mu.hurried = make(map[string]bool)
	l.mu.conns = 1
	l.mu.health = make(map[string]*mirrorHealth)
	take := func() (order []string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for {
			topic, ok := l.nextWaitingLocked(true)
			if !ok {
				return order
			}
			order = append(order, topic)
		}
	}
	// Announced in name order, each queued before its head is known; then the heads of
	// the announcements (none moved on this connection).
	heads := map[string]int64{"m.a": 10, "m.b": 40, "m.c": 20, "m.d": 30, "m.e": 20}
	names := []string{"m.a", "m.b", "m.c", "m.d", "m.e"}
	for _, n := range names {
		l.mu.Lock()
		l.mu.health[n] = &mirrorHealth{announcedOn: 1}
		l.enqueueLocked(n)
		l.mu.Unlock()
	}
	for _, n := range names {
		l.headReported(n, &catalogHead{next: 5, own: 5, time: heads[n]})
	}
	if got, want := fmt.Sprint(take()), "[m.b m.d m.c m.e m.a]"; got != want {
		t.Fatalf("backlog served %s, want the newest head first (FIFO among equals): %s", got, want)
	}
	// Heads not known: in the order queued.
	for _, n := range []string{"m.z", "m.y", "m.x"} {
		l.mu.Lock()
		l.mu.health[n] = &mirrorHealth{announcedOn: 1}
		l.enqueueLocked(n)
		l.mu.Unlock()
	}
	if got, want := fmt.Sprint(take()), "[m.z m.y m.x]"; got != want {
		t.Fatalf("backlog of unknown heads served %s, want the order queued %s", got, want)
	}
}

// A topic that moves while the backlog holds streams that do not end (their origin serves
// nothing) gets one of the streams kept for the moved lane (movedReserve) at once: a link
// with a bound of 4 catches up 8 topics whose serving is paused at the origin, with a slice
// of 10 minutes, and a record published meanwhile to a ninth is mirrored. Without the
// reserve the backlog takes all 4 streams and the record waits for a slice to end.
func TestMovedTopicGetsReservedStream(t *testing.T) {
	const bound, stuck = 4, 8
	m := newFedMesh(t)
	b := m.addNode("b", nodeOpts{})
	live := "m.live"
	b.publish(t, live, "before") // the oldest head: last in the backlog
	name := func(i int) string { return fmt.Sprintf("m.t%d", i) }
	for i := range stuck {
		b.fedNow().pauseServing(name(i), true)
		b.publishSeq(t, name(i), 0, 2)
	}
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}, maxStreams: bound, slice: 10 * time.Minute})
	testlog.WaitFor(t, 30*time.Second, "the backlog's mirrors holding streams", func() bool {
		open, _ := a.fedNow().mirrorStreams("b")
		return open >= bound-bound/movedReserve
	})
	open, _ := a.fedNow().mirrorStreams("b")
	t.Logf("%d streams open for the backlog, %q's cursor %d", open, live, a.cursor(t, "b", live))
	b.publish(t, live, "moved")
	testlog.WaitFor(t, 20*time.Second, "the moved topic's records mirrored while the backlog holds its streams", func() bool {
		return a.cursor(t, "b", live) == 1
	})
	for i := range stuck {
		b.fedNow().pauseServing(name(i), false)
	}
	for i := range stuck {
		testlog.WaitFor(t, 30*time.Second, "the backlog mirrored", func() bool { return a.cursor(t, "b", name(i)) == 1 })
	}
	for _, topic := range append([]string{live}, name(0), name(stuck-1)) {
		if got, want := checkMirrored(t, a, b, topic), int(b.next(topic)); got != want {
			t.Fatalf("%s: %d records mirrored, want %d", topic, got, want)
		}
	}
}

// A topic whose head moves while the origin is still listing its topics is announced with
// the next page, ahead of its turn in the listing, and mirrored while the listing is held:
// the origin lists 30 topics 10 a page and holds after each page; a record published to the
// last of them while the first page is out is mirrored before the third page is listed.
// Without it the topic waits for the listing to reach its name (issue 34's figure 2: a
// reconnect's listing of 30,000 topics took up to 3 s on a loaded machine).
func TestTopicMovedDuringListingAnnouncedAhead(t *testing.T) {
	const topics, page = 30, 10
	m := newFedMesh(t)
	b := m.addNode("b", nodeOpts{})
	name := func(i int) string { return fmt.Sprintf("m.t%02d", i) }
	for i := range topics {
		b.publish(t, name(topics-1-i), "first") // the last to move is on the first page
	}
	next, release := make(chan struct{}), make(chan struct{})
	b.fedNow().paceListing(page, 1, func() {
		select {
		case <-next:
		case <-release:
		}
	})
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}})
	t.Cleanup(func() { close(release) }) // before the nodes' cleanups: a held listing ends
	testlog.WaitFor(t, 30*time.Second, "the first page announced", func() bool {
		li, _ := a.link("b")
		return li.MirroredTopics == page
	})
	last := name(topics - 1)
	b.publish(t, last, "moved")
	next <- struct{}{} // the second page; the listing holds after it
	testlog.WaitFor(t, 20*time.Second, "the moved topic mirrored while the listing holds after its second page", func() bool {
		return a.cursor(t, "b", last) == 1
	})
	li, _ := a.link("b")
	t.Logf("%s mirrored with %d of %d topics announced", last, li.MirroredTopics, topics)
	if li.MirroredTopics > 2*page+1 {
		t.Fatalf("%d topics announced while the listing held after its second page", li.MirroredTopics)
	}
	close(next) // the rest of the listing
	for i := range topics {
		want := int64(0)
		if name(i) == last {
			want = 1
		}
		testlog.WaitFor(t, 30*time.Second, "every topic mirrored", func() bool { return a.cursor(t, "b", name(i)) == want })
		if got, want := checkMirrored(t, a, b, name(i)), int(b.next(name(i))); got != want {
			t.Fatalf("%s: %d records mirrored, want %d", name(i), got, want)
		}
	}
	if li, _ := a.link("b"); li.MirroredTopics != topics {
		t.Fatalf("%d topics mirrored on the link, want %d", li.MirroredTopics, topics)
	}
}

// The topics that moved last before a catalog stream began are announced ahead of its
// listing, and mirrored while the listing is held after its first page: the origin moves
// the last of 30 topics by name before the link comes up, then lists 10 a page. Without it
// the topic waits for the listing to reach its name (issue 34's figure 2: the records sent
// between a cut's end and the reconnect made the p99 of the catch-up).
func TestLastMovedTopicAnnouncedAheadOfListing(t *testing.T) {
	const topics, page = 30, 10
	m := newFedMesh(t)
	b := m.addNode("b", nodeOpts{})
	name := func(i int) string { return fmt.Sprintf("m.t%02d", i) }
	for i := range topics {
		b.publish(t, name(i), "first")
	}
	last := name(topics - 1)
	b.publish(t, last, "moved")
	release := make(chan struct{})
	b.fedNow().paceListing(page, 1, func() { <-release })
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}})
	end := sync.OnceFunc(func() { close(release) })
	t.Cleanup(end) // before the nodes' cleanups: a held listing ends
	testlog.WaitFor(t, 20*time.Second, "the last moved topic mirrored while the listing holds after its first page", func() bool {
		return a.cursor(t, "b", last) == 1
	})
	if li, _ := a.link("b"); li.MirroredTopics != page+1 {
		t.Fatalf("%d topics announced while the listing held after its first page, want %d", li.MirroredTopics, page+1)
	}
	end()
	for i := range topics - 1 {
		testlog.WaitFor(t, 30*time.Second, "every topic mirrored", func() bool { return a.cursor(t, "b", name(i)) == 0 })
	}
	for i := range topics {
		if got, want := checkMirrored(t, a, b, name(i)), int(b.next(name(i))); got != want {
			t.Fatalf("%s: %d records mirrored, want %d", name(i), got, want)
		}
	}
}
