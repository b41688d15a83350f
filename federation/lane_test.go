package federation

import (
	"fmt"
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
	l.mu.announced = make(map[string]bool)
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
		l.mu.announced[n] = true
		l.mu.health[n] = &mirrorHealth{}
		l.enqueueLocked(n)
		l.mu.Unlock()
	}
	for _, n := range names {
		l.headReported(n, 5, heads[n], false)
	}
	if got, want := fmt.Sprint(take()), "[m.b m.d m.c m.e m.a]"; got != want {
		t.Fatalf("backlog served %s, want the newest head first (FIFO among equals): %s", got, want)
	}
	// Heads not known: in the order queued.
	for _, n := range []string{"m.z", "m.y", "m.x"} {
		l.mu.Lock()
		l.mu.announced[n] = true
		l.mu.health[n] = &mirrorHealth{}
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
