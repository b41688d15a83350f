package federation

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// A link mirrors 25 times more topics than it may hold streams (200 topics, 8 streams):
// the backlog of every topic is caught up in turn within the bound, quiet mirrors give their
// streams back, records published later to parked topics arrive (the origin's head notice
// reopens them), and so do records published to many topics at once, hot ones among them,
// across a cut of the link. Every record arrives exactly once, in order per topic, and the
// link never holds more than 8 mirror streams. The schedule of topics and counts is seeded.
func TestMirrorsMoreTopicsThanStreams(t *testing.T) {
	const topics, bound = 200, 8
	rng := testlog.Rand(t, "records per topic and the topics published to")
	m := newFedMesh(t)
	b := m.addNode("b", nodeOpts{})
	name := func(i int) string { return fmt.Sprintf("m.t%03d", i) }
	total := 0
	for i := range topics { // a backlog before the mirroring region exists: a new region's catch-up
		n := 1 + rng.IntN(20)
		b.publishSeq(t, name(i), 0, n)
		total += n
	}
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}, maxStreams: bound,
		parkAfter: 200 * time.Millisecond, slice: 100 * time.Millisecond})
	lagging := ""
	caughtUp := func() bool {
		for i := range topics {
			if c, next := a.cursor(t, "b", name(i)), b.next(name(i)); c != int64(next)-1 {
				lagging = fmt.Sprintf("%s: cursor %d, origin head %d, %s", name(i), c, next, a.fedNow().mirrorState("b", name(i)))
				return false
			}
		}
		return true
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("first topic behind: %s", lagging)
		}
	})
	start := time.Now()
	testlog.WaitFor(t, 60*time.Second, "every topic's backlog mirrored", caughtUp)
	t.Logf("backlog of %d records in %d topics mirrored in %v through %d streams", total, topics, time.Since(start).Round(time.Millisecond), bound)
	parked := func() bool { open, _ := a.fedNow().mirrorStreams("b"); return open == 0 }
	testlog.WaitFor(t, 10*time.Second, "every quiet mirror to park", parked)

	// Records published later to parked topics: one at a time, each reopened by its head.
	var took []time.Duration
	for range 20 {
		topic := name(rng.IntN(topics))
		off := b.next(topic)
		at := time.Now()
		b.publish(t, topic, fmt.Sprintf("late-%d", off))
		testlog.WaitFor(t, 10*time.Second, "a record of a parked topic mirrored", func() bool { return a.cursor(t, "b", topic) >= int64(off) })
		took = append(took, time.Since(at))
	}
	slices.Sort(took)
	t.Logf("a record to a parked topic mirrored after p50 %v, max %v (head reports gathered for 20 ms)",
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))

	// Many topics at once, a few hot ones (published to in every round) among them, with the
	// link cut in the middle.
	hot := []string{name(0), name(1), name(2)}
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		for round := 0; ; round++ {
			select {
			case <-stop:
				return
			default:
			}
			targets := append([]string(nil), hot...)
			for range 10 {
				targets = append(targets, name(rng.IntN(topics)))
			}
			for _, topic := range targets {
				recs := make([]wal.Record, 1+rng.IntN(3))
				for i := range recs {
					recs[i] = wal.Record{Payload: fmt.Appendf(nil, "r%d-%d", round, i)}
				}
				if res := b.log.Append(context.Background(), wal.AppendRequest{Topic: topic, Records: recs}); res.Err != nil {
					t.Errorf("publish to %s: %v", topic, res.Err)
					return
				}
			}
			testlog.Pause(context.Background(), 2*time.Millisecond) // the publishing rate, not a wait for an event
		}
	}()
	testlog.WaitFor(t, 10*time.Second, "topics waiting for a stream", func() bool {
		li, _ := a.link("b")
		return li.MirrorsWaiting > 0 || li.MirrorStreams == bound
	})
	cutAt := time.Now()
	if n := a.fedNow().cutLinks("b"); n != 1 {
		t.Fatalf("cut %d connections, want 1", n)
	}
	waitReconnected(t, a, "b", cutAt, 20*time.Second)
	testlog.WaitFor(t, 10*time.Second, "mirrors to run again after the cut", func() bool {
		open, _ := a.fedNow().mirrorStreams("b")
		return open > 0
	})
	close(stop)
	<-done
	testlog.WaitFor(t, 60*time.Second, "every record mirrored after the cut", caughtUp)

	records := 0
	for i := range topics {
		got := checkMirrored(t, a, b, name(i))
		if want := int(b.next(name(i))); got != want {
			t.Fatalf("%s: %d records mirrored, want %d", name(i), got, want)
		}
		records += got
	}
	_, most := a.fedNow().mirrorStreams("b")
	if most > bound {
		t.Fatalf("the link held %d mirror streams at once, bound %d", most, bound)
	}
	li, _ := a.link("b")
	if li.MirroredTopics != topics {
		t.Fatalf("link mirrors %d topics, want %d", li.MirroredTopics, topics)
	}
	testlog.WaitFor(t, 10*time.Second, "every quiet mirror to park again", parked)
	if w := a.logs.find(slog.LevelWarn, "mirror stream ended"); len(w) > 0 {
		t.Fatalf("mirror streams failed:%s", fmtRecords(w))
	}
	t.Logf("%d records in %d topics mirrored exactly once and in order; at most %d streams open at once (bound %d)",
		records, topics, most, bound)
}

// Two regions mirroring each other: a record published in b and mirrored into a moves a's
// head of the topic, but a reports no head to b for it (b is served only a's own records), so
// b opens no stream for the copies of its own records; a record published in a is reported
// and mirrored into b as before.
func TestMirroredRecordsReopenNothing(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}, parkAfter: 100 * time.Millisecond, slice: 50 * time.Millisecond})
	b := m.addNode("b", nodeOpts{mirror: []string{"m.>"}, parkAfter: 100 * time.Millisecond, slice: 50 * time.Millisecond})
	name := func(i int) string { return fmt.Sprintf("m.t%02d", i) }
	for i := range 10 {
		b.publish(t, name(i), "first")
	}
	a.publish(t, "m.sentinel", "s0")
	testlog.WaitFor(t, 10*time.Second, "b's topics mirrored into a, a's into b", func() bool {
		for i := range 10 {
			if a.cursor(t, "b", name(i)) != 0 {
				return false
			}
		}
		return b.cursor(t, "a", "m.sentinel") == 0
	})
	parked := func(n *fedNode, region string) func() bool {
		return func() bool { open, _ := n.fedNow().mirrorStreams(region); return open == 0 }
	}
	testlog.WaitFor(t, 10*time.Second, "every mirror parked", func() bool { return parked(a, "b")() && parked(b, "a")() })
	before := b.fedNow().mirrorsOpened("a")
	for round := range 3 {
		for i := range 10 {
			b.publish(t, name(i), fmt.Sprintf("r%d", round))
		}
		testlog.WaitFor(t, 10*time.Second, "b's records mirrored into a", func() bool {
			for i := range 10 {
				if a.cursor(t, "b", name(i)) != int64(round+1) {
					return false
				}
			}
			return true
		})
	}
	// A record of a's own, after the copies: a's head reports are in order on its catalog
	// stream, so once b mirrored it, b has read every head a reported for the copies.
	a.publish(t, "m.sentinel", "s1")
	testlog.WaitFor(t, 10*time.Second, "a's own record mirrored into b", func() bool { return b.cursor(t, "a", "m.sentinel") == 1 })
	if opened := b.fedNow().mirrorsOpened("a") - before; opened != 1 {
		t.Fatalf("b opened %d mirrors from a for 30 copies of its own records and one record of a's; want 1 (the record's)", opened)
	}
}

// A mirror parked at its origin's head with nothing of the origin's past its cursor (the
// origin's log holds only copies of this region's records) keeps how far it scanned, so the
// node, restarted, opens no stream to learn it again (issue 34: after a kill of the region
// holding 100,000 topics, one stream per copy at the other region). Before: b opened 31
// mirrors from a after its restart, one per copy and the sentinel's.
func TestParkedMirrorKeepsItsScanAcrossRestart(t *testing.T) {
	const topics, bound = 30, 4
	m := newFedMesh(t)
	opts := nodeOpts{mirror: []string{"m.>"}, maxStreams: bound, parkAfter: 100 * time.Millisecond, slice: 50 * time.Millisecond}
	a := m.addNode("a", opts)
	b := m.addNode("b", opts)
	name := func(i int) string { return fmt.Sprintf("m.t%02d", i) }
	for i := range topics {
		b.publish(t, name(i), "first")
	}
	// Each copy's scan is kept (its cursor at the copy's offset 0) once one of its mirrors
	// parked at a's head: one parked earlier, to give its stream to another topic under
	// the bound, kept nothing and is opened again, so "every mirror opened and parked" is
	// not yet the state the restart must keep (it failed so at load 12-16).
	testlog.WaitFor(t, 30*time.Second, "b's records mirrored into a, and b's mirrors of a's copies scanned and parked", func() bool {
		for i := range topics {
			if a.cursor(t, "b", name(i)) != 0 || b.cursor(t, "a", name(i)) != 0 {
				return false
			}
		}
		open, _ := b.fedNow().mirrorStreams("a")
		return b.fedNow().mirrorsOpened("a") >= topics && open == 0
	})
	b.stop()
	b.restart()
	// a's catalog announces its copies before the sentinel created now, and b queues the
	// topics it opens streams for in the order announced: once the sentinel is mirrored, b
	// has decided for every copy. The restarted federation counts from 0.
	a.publish(t, "m.zz", "s0") // listed after the copies, in name order, or announced as new
	testlog.WaitFor(t, 30*time.Second, "a's sentinel mirrored into b", func() bool { return b.cursor(t, "a", "m.zz") == 0 })
	if opened := b.fedNow().mirrorsOpened("a"); opened != 1 {
		// Say which: a copy opened (its scan not kept), or the sentinel twice (two links).
		var states []string
		for i := range topics {
			states = append(states, fmt.Sprintf("%s: cursor %d, %s", name(i), b.cursor(t, "a", name(i)), b.fedNow().mirrorState("a", name(i))))
		}
		links := 0
		for _, l := range b.fedNow().links() {
			if l.peer.Region == "a" {
				links++
			}
		}
		t.Fatalf("b opened %d mirrors from a after its restart for %d copies of its own records and one record of a's; want 1 (the record's); %d link(s) to a; sentinel: %s; copies:\n%s",
			opened, topics, links, b.fedNow().mirrorState("a", "m.zz"), strings.Join(states, "\n"))
	}
}

// A catch-up's end is reported (Config.CatchupEnded: the node gives its garbage back
// there) once the link's mirrors have all parked with none waiting, and a topic that moves
// now and then is no catch-up: 60 topics with a backlog caught up through 8 streams, then
// one record to one parked topic at a time.
func TestCatchupEndedAfterEveryMirrorParked(t *testing.T) {
	const topics, bound = 60, 8
	m := newFedMesh(t)
	b := m.addNode("b", nodeOpts{})
	name := func(i int) string { return fmt.Sprintf("m.t%03d", i) }
	for i := range topics {
		b.publishSeq(t, name(i), 0, 3)
	}
	var ended, openAtEnd atomic.Int64
	var node atomic.Pointer[fedNode] // set once addNode returns: the catch-up may end before
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}, maxStreams: bound,
		parkAfter: 100 * time.Millisecond, slice: 50 * time.Millisecond,
		catchupEnded: func() {
			if a := node.Load(); a != nil {
				open, _ := a.fedNow().mirrorStreams("b")
				openAtEnd.Add(int64(open))
			}
			ended.Add(1)
		}})
	node.Store(a)
	testlog.WaitFor(t, 60*time.Second, "every topic mirrored and its mirror parked, and the catch-up's end reported", func() bool {
		for i := range topics {
			if a.cursor(t, "b", name(i)) != 2 {
				return false
			}
		}
		open, _ := a.fedNow().mirrorStreams("b")
		return open == 0 && ended.Load() > 0
	})
	if n := openAtEnd.Load(); n != 0 {
		t.Fatalf("the catch-up's end was reported with %d mirror streams open", n)
	}
	after := ended.Load()
	for i := range 5 {
		topic := name(i * 7)
		b.publish(t, topic, "late")
		testlog.WaitFor(t, 10*time.Second, "a late record mirrored and its mirror parked", func() bool {
			open, _ := a.fedNow().mirrorStreams("b")
			return a.cursor(t, "b", topic) == 3 && open == 0
		})
	}
	if n := ended.Load(); n != after {
		t.Fatalf("one record to one parked topic at a time was reported as %d catch-ups ending", n-after)
	}
	t.Logf("a catch-up of %d topics through %d streams reported ended %d times", topics, bound, after)
}
