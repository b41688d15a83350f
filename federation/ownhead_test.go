package federation

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// copiesAfterRestart runs two regions mirroring each other with the given OwnHeads
// settings (origin a's, mirroring b's): b publishes two rounds to each of topics topics,
// which a mirrors (so a's logs of them hold only copies, the second round past any scan b
// kept), then b restarts and a publishes a sentinel, listed after the copies. It returns
// a and b, and how many mirrors b opened from a after its restart, once it has decided for
// every topic (the sentinel mirrored, and no topic waiting or open).
func copiesAfterRestart(t *testing.T, topics int, aOwn, bOwn bool) (a, b *fedNode, opened uint64) {
	t.Helper()
	m := newFedMesh(t)
	opts := nodeOpts{mirror: []string{"m.>"}, maxStreams: 4, parkAfter: 100 * time.Millisecond, slice: 50 * time.Millisecond}
	aOpts, bOpts := opts, opts
	aOpts.ownHeads, bOpts.ownHeads = aOwn, bOwn
	a = m.addNode("a", aOpts)
	b = m.addNode("b", bOpts)
	name := func(i int) string { return fmt.Sprintf("m.t%02d", i) }
	for round := range 2 {
		for i := range topics {
			b.publish(t, name(i), fmt.Sprintf("r%d", round))
		}
		testlog.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d of b's records mirrored into a", round), func() bool {
			for i := range topics {
				if a.cursor(t, "b", name(i)) != int64(round) {
					return false
				}
			}
			return true
		})
	}
	b.stop()
	b.restart()
	a.publish(t, "m.zz", "s0") // listed after the copies, in name order, or announced as new
	testlog.WaitFor(t, 30*time.Second, "a's sentinel mirrored into b, and b's mirrors from a parked", func() bool {
		if b.cursor(t, "a", "m.zz") != 0 {
			return false
		}
		li, ok := b.link("a")
		return ok && li.MirrorStreams == 0 && li.MirrorsWaiting == 0
	})
	return a, b, b.fedNow().mirrorsOpened("a")
}

// With own heads (Config.OwnHeads, node/features.Catalog), a catalog's announcement of a
// topic whose log at the origin holds only copies of the mirroring region's records says so
// (its HEAD's position, the origin's own head, is 0), and the mirroring node opens no
// stream to learn it: after a restart of b, whose scans of a's copies did not reach the
// second round, b opens one mirror from a, the sentinel's. Without them (OwnHeads off on
// a, the origin) it opened one per copied topic, 31 (issue 34's wait (c): us scanning eu's
// copies of its 100,000 topics after a cut, 768-1,024 streams held at eu for it).
func TestCopiesOpenNoStreamWithOwnHeads(t *testing.T) {
	const topics = 30
	a, b, opened := copiesAfterRestart(t, topics, true, true)
	if opened != 1 {
		var states []string
		for i := range topics {
			n := fmt.Sprintf("m.t%02d", i)
			states = append(states, fmt.Sprintf("%s: cursor %d, %s", n, b.cursor(t, "a", n), b.fedNow().mirrorState("a", n)))
		}
		t.Fatalf("b opened %d mirrors from a after its restart for %d topics of copies of its own records and one record of a's; want 1 (the record's):\n%s",
			opened, topics, strings.Join(states, "\n"))
	}
	// A record of a's own after the copies is reported as a move, with no own head (next),
	// and mirrored, once.
	a.publish(t, "m.t00", "a0")
	testlog.WaitFor(t, 30*time.Second, "a's own record after the copies mirrored into b", func() bool { return b.cursor(t, "a", "m.t00") == 2 })
	for i := range topics {
		n := fmt.Sprintf("m.t%02d", i)
		want := uint64(2)
		if i == 0 {
			want = 3
		}
		if got := b.next(n); got != want {
			t.Errorf("b's log of %s holds %d records, want %d (its own two, and a's one for m.t00): a copy came back, or a record twice", n, got, want)
		}
	}
}

// An origin that does not send own heads (an older build, or a peer region with a node that
// does not announce catalog=1: OwnHeads false) is mirrored as before: b opens a stream for
// each topic a holds copies in that it has not scanned, and mirrors a's own records exactly
// once.
func TestCopiesScannedFromOriginWithoutOwnHeads(t *testing.T) {
	const topics = 30
	a, b, opened := copiesAfterRestart(t, topics, false, true)
	// One per topic whose second copy b's mirror did not scan before the restart (a mirror
	// open through both rounds kept its scan of both): most of them.
	t.Logf("b opened %d mirrors from a after its restart, for %d topics of copies and a sentinel", opened, topics)
	if opened < 2 {
		t.Fatalf("b opened %d mirrors from a after its restart; want the sentinel's and those of the copies it had not scanned: a sent own heads with OwnHeads off", opened)
	}
	a.publish(t, "m.t00", "a0")
	testlog.WaitFor(t, 30*time.Second, "a's own record after the copies mirrored into b", func() bool { return b.cursor(t, "a", "m.t00") == 2 })
	if got := b.next("m.t00"); got != 3 {
		t.Fatalf("b's log of m.t00 holds %d records, want 3", got)
	}
}

// ownHead finds the origin's own head among a topic's last records: next when the last is
// its own, after the last own record, at the first retained offset with none, and next
// (unknown) when the window ends before the last own record.
func TestOwnHeadReadsTheLastRecords(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{})
	a.publish(t, "m.own", "o0", "o1")
	mirrored := func(topic string, n int) {
		t.Helper()
		for i := range n {
			recs := []wal.Record{{OriginRegion: "b", OriginOffset: uint64(i), Payload: []byte("c")}}
			if res := a.log.Append(context.Background(), wal.AppendRequest{Topic: topic, Records: recs}); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
	}
	mirrored("m.own", 3)    // o0 o1 c c c: own head 2
	mirrored("m.copies", 3) // c c c: 0
	a.publish(t, "m.far", "o")
	mirrored("m.far", ownHeadWindow+1) // o, then more copies than the window: unknown, next
	mirrored("m.last", 1)
	a.publish(t, "m.last", "o") // c o: the last record is own, next
	for _, c := range []struct {
		topic string
		want  uint64
	}{{"m.own", 2}, {"m.copies", 0}, {"m.far", ownHeadWindow + 2}, {"m.last", 2}} {
		first, next, _ := a.log.Bounds(c.topic)
		tm, own := a.fedNow().ownHead(c.topic, first, next)
		if own != c.want || tm == 0 {
			t.Errorf("ownHead(%s) = %d (time %d), want %d and the last record's time", c.topic, own, tm, c.want)
		}
	}
}

// A catalog stream's head report asks Config.OwnHeads (gossip's members and their feature
// lists) only when it announces a topic with its head: the moves of topics the peer's
// patterns do not match, and of topics announced already, report no announcement, so they
// ask nothing (they asked at every report, every HeadReportInterval while any topic of the
// origin moved).
func TestHeadReportAsksOwnHeadsOnlyToAnnounce(t *testing.T) {
	m := newFedMesh(t)
	var asked atomic.Int64
	b := m.addNode("b", nodeOpts{mirror: []string{"m.>"}, ownHeads: true, ownAsked: &asked})
	a := m.addNode("a", nodeOpts{mirror: []string{"m.>"}, ownHeads: true})
	b.publish(t, "m.t", "r0")
	testlog.WaitFor(t, 30*time.Second, "m.t mirrored into a", func() bool { return a.cursor(t, "b", "m.t") == 0 })
	before := asked.Load()
	for i := range 5 {
		// Moves of a topic a does not mirror, each in a report of its own (20 ms apart), then
		// a move of the announced one: reports without an announcement.
		b.publish(t, "x.t", fmt.Sprint(i))
		testlog.Pause(context.Background(), 30*time.Millisecond)
	}
	b.publish(t, "m.t", "r1")
	testlog.WaitFor(t, 30*time.Second, "m.t's second record mirrored into a", func() bool { return a.cursor(t, "b", "m.t") == 1 })
	if n := asked.Load() - before; n != 0 {
		t.Fatalf("the head reports of moves that announce nothing asked OwnHeads %d times, want 0", n)
	}
}
