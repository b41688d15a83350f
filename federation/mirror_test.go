package federation

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// Interest in a pattern mirrors exactly the matching topics of the other region, existing
// and new ones, each record once with its origin region and offset, and follows the log.
func TestInterestMirrorsMatchingTopics(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{})
	b := m.addNode("b", nodeOpts{})
	b.publishSeq(t, "orders.eu", 0, 100) // exists before the interest
	b.publishSeq(t, "other.eu", 0, 100)  // never wanted
	testlog.WaitFor(t, 10*time.Second, "link a->b", func() bool { li, ok := a.link("b"); return ok && li.Connected })

	a.fedNow().AddInterest("orders.*")
	b.publishSeq(t, "orders.us", 0, 50) // created after the interest: announced as it appears
	testlog.WaitFor(t, 10*time.Second, "orders.* mirrored", func() bool {
		return a.next("orders.eu") == 100 && a.next("orders.us") == 50
	})
	b.publishSeq(t, "orders.eu", 100, 150) // the mirror follows the origin's log
	testlog.WaitFor(t, 10*time.Second, "live tail", func() bool { return a.next("orders.eu") == 150 })

	if n := checkMirrored(t, a, b, "orders.eu"); n != 150 {
		t.Fatalf("orders.eu: %d records mirrored, want 150", n)
	}
	if n := checkMirrored(t, a, b, "orders.us"); n != 50 {
		t.Fatalf("orders.us: %d records mirrored, want 50", n)
	}
	// other.eu came before orders.us in b's catalog, which a reads in order: a has seen it.
	if _, _, ok := a.log.Bounds("other.eu"); ok {
		t.Fatal("other.eu was mirrored without any interest in it")
	}
	li, _ := a.link("b")
	if !slices.Equal(li.Mirrors, []string{"orders.eu", "orders.us"}) {
		t.Fatalf("link mirrors %v, want [orders.eu orders.us]", li.Mirrors)
	}
	if got := metricValue(t, a.registry(), "quicmq_mirror_appended_records_total", nil); got != 200 {
		t.Fatalf("quicmq_mirror_appended_records_total %v, want 200", got)
	}
	if got := metricValue(t, a.registry(), "quicmq_mirror_records_total", map[string]string{"topic": "orders.eu", "origin_region": "b"}); got != 150 {
		t.Fatalf("quicmq_mirror_records_total{orders.eu} %v, want 150", got)
	}
	// Nothing flows the other way: b has no interest in a's records.
	if _, _, ok := b.log.Bounds("orders.eu"); ok && b.next("orders.eu") != 150 {
		t.Fatalf("b's own log of orders.eu grew to %d", b.next("orders.eu"))
	}
}

// Three regions mirror one topic from each other while each publishes to it: every log ends
// with every region's records exactly once, in each origin's order. A record a node mirrored
// is never served on (each region serves only its own records), so nothing loops.
func TestTriangleMirrorsWithoutLoops(t *testing.T) {
	m := newFedMesh(t)
	regions := []string{"a", "b", "c"}
	nodes := map[string]*fedNode{}
	for _, r := range regions {
		nodes[r] = m.addNode(r, nodeOpts{mirror: []string{"tri.>"}})
	}
	for _, n := range nodes {
		testlog.WaitFor(t, 10*time.Second, n.region+" linked to both others", func() bool {
			up := 0
			for _, li := range n.fedNow().Links() {
				if li.Connected {
					up++
				}
			}
			return up == 2
		})
	}
	const per, rounds = 300, 30
	done := make(chan struct{})
	for _, n := range nodes {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < rounds; i++ { // interleaved with the mirrored appends
				n.publishSeq(t, "tri.x", i*per/rounds, (i+1)*per/rounds)
				testlog.Pause(context.Background(), 2*time.Millisecond) // the publishing rate
			}
		}()
	}
	for range nodes {
		<-done
	}
	for _, n := range nodes {
		testlog.WaitFor(t, 20*time.Second, n.region+" holds every region's records", func() bool { return n.next("tri.x") >= 3*per })
	}
	// A loop would keep appending, and no event marks that it does not: a window for it.
	time.Sleep(300 * time.Millisecond)
	for _, dst := range nodes {
		if got := dst.next("tri.x"); got != 3*per {
			t.Fatalf("%s's log of tri.x has %d records, want %d (records served back: a loop)", dst.region, got, 3*per)
		}
		for _, origin := range nodes {
			if origin == dst {
				continue
			}
			if n := checkMirrored(t, dst, origin, "tri.x"); n != per {
				t.Fatalf("%s holds %d records of %s, want %d", dst.region, n, origin.region, per)
			}
		}
		if got := metricValue(t, dst.registry(), "quicmq_mirror_appended_records_total", nil); got != 2*per {
			t.Fatalf("%s appended %v mirrored records, want %d", dst.region, got, 2*per)
		}
	}
}

// A mirror stops when interest goes away, and its cursor stays, durably: returning interest,
// also after the mirroring node restarted, resumes from it with no gap and no duplicate.
func TestCursorOutlivesInterest(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{})
	b := m.addNode("b", nodeOpts{})
	b.publishSeq(t, "c.t", 0, 100)
	a.fedNow().AddInterest("c.>")
	a.fedNow().AddInterest("c.t") // two references
	testlog.WaitFor(t, 10*time.Second, "first 100 mirrored", func() bool { return a.next("c.t") == 100 })

	a.fedNow().RemoveInterest("c.t")
	a.fedNow().RemoveInterest("c.>")
	testlog.WaitFor(t, 10*time.Second, "mirror stopped", func() bool { li, _ := a.link("b"); return len(li.Mirrors) == 0 })
	b.publishSeq(t, "c.t", 100, 200)
	// No mirror is left to append, and no event marks that none does: a window for it.
	time.Sleep(200 * time.Millisecond)
	if got := a.next("c.t"); got != 100 {
		t.Fatalf("a's log grew to %d without interest", got)
	}
	if pos, ok, err := a.log.Position(cursorName("b"), "c.t"); err != nil || !ok || pos != 99 {
		t.Fatalf("cursor (c.t, b) = %d %v %v, want 99", pos, ok, err)
	}

	a.fedNow().AddInterest("c.t")
	testlog.WaitFor(t, 10*time.Second, "catch-up from the cursor", func() bool { return a.next("c.t") == 200 })
	checkMirrored(t, a, b, "c.t")

	// The cursor survives a restart of the mirroring node.
	a.fedNow().RemoveInterest("c.t")
	testlog.WaitFor(t, 10*time.Second, "mirror stopped", func() bool { li, _ := a.link("b"); return len(li.Mirrors) == 0 })
	a.stop()
	b.publishSeq(t, "c.t", 200, 300)
	a.restart()
	if pos, ok, err := a.log.Position(cursorName("b"), "c.t"); err != nil || !ok || pos != 199 {
		t.Fatalf("cursor after restart = %d %v %v, want 199", pos, ok, err)
	}
	a.fedNow().AddInterest("c.t")
	testlog.WaitFor(t, 10*time.Second, "catch-up after restart", func() bool { return a.next("c.t") == 300 })
	fence(t, a, b, "c.t")
	if n := checkMirrored(t, a, b, "c.t"); n != 301 {
		t.Fatalf("%d records mirrored, want 300 and the fence", n)
	}
}

// A topic on the Mirror list is mirrored with nobody subscribed to it.
func TestMirrorListWithoutInterest(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"mir.>"}})
	b := m.addNode("b", nodeOpts{})
	b.publishSeq(t, "mir.a.b", 0, 64)
	b.publishSeq(t, "nomir.a", 0, 10)
	testlog.WaitFor(t, 10*time.Second, "mir.a.b mirrored", func() bool { return a.next("mir.a.b") == 64 })
	b.publishSeq(t, "mir.c", 0, 10)
	testlog.WaitFor(t, 10*time.Second, "mir.c mirrored", func() bool { return a.next("mir.c") == 10 })
	checkMirrored(t, a, b, "mir.a.b")
	checkMirrored(t, a, b, "mir.c")
	if _, _, ok := a.log.Bounds("nomir.a"); ok {
		t.Fatal("nomir.a mirrored: not on the list")
	}
	// Removing interest that was never added does not stop a listed mirror.
	a.fedNow().AddInterest("mir.c")
	a.fedNow().RemoveInterest("mir.c")
	b.publishSeq(t, "mir.c", 10, 20)
	testlog.WaitFor(t, 10*time.Second, "mir.c still mirrored", func() bool { return a.next("mir.c") == 20 })
}

// Records the origin's retention deleted before they were mirrored are a gap: counted in
// quicmq_mirror_gap_records_total, logged, and the cursor moves past them; the records after
// the gap are mirrored exactly once. Nothing is invented or hidden.
func TestRetentionGapIsReported(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{})
	b := m.addNode("b", nodeOpts{})
	const payload = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

	publish := func(topic string, from, to int) {
		for i := from; i < to; i++ {
			b.publish(t, topic, fmt.Sprintf("b-%d-%s", i, payload))
		}
	}
	// keep deletes the oldest records of topic until at most keep remain, returning the new
	// first offset.
	keep := func(topic string, keep int) uint64 {
		for _, ti := range b.log.Topics() {
			if ti.Name == topic {
				per := int64(ti.Bytes / ti.Records)
				if err := b.log.SetRetention(t.Context(), topic, wal.Retention{MaxBytes: per*int64(keep) + per/2}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := b.log.EnforceRetention(); err != nil {
			t.Fatal(err)
		}
		first, _, _ := b.log.Bounds(topic)
		return first
	}

	// 1. A cursor that has fallen behind: 20 mirrored, then no interest while the origin
	// deletes past it.
	publish("g.t", 0, 20)
	a.fedNow().AddInterest("g.t")
	testlog.WaitFor(t, 10*time.Second, "first 20", func() bool { return a.next("g.t") == 20 })
	a.fedNow().RemoveInterest("g.t")
	testlog.WaitFor(t, 10*time.Second, "mirror stopped", func() bool { li, _ := a.link("b"); return len(li.Mirrors) == 0 })
	publish("g.t", 20, 100)
	first := keep("g.t", 30)
	if first <= 20 {
		t.Fatalf("retention kept from %d: no gap to test", first)
	}
	a.fedNow().AddInterest("g.t")
	wantHeld := 20 + (100 - int(first))
	testlog.WaitFor(t, 10*time.Second, "records after the gap", func() bool { return a.next("g.t") == uint64(wantHeld) })

	// 2. A topic whose start was deleted before it was ever mirrored.
	publish("g.new", 0, 50)
	first2 := keep("g.new", 10)
	a.fedNow().AddInterest("g.new")
	testlog.WaitFor(t, 10*time.Second, "g.new after its gap", func() bool { return a.next("g.new") == 50-first2 })

	wantGap := float64(first-20) + float64(first2)
	if got := metricValue(t, a.registry(), "quicmq_mirror_gap_records_total", nil); got != wantGap {
		t.Fatalf("quicmq_mirror_gap_records_total %v, want %v (%d + %d)", got, wantGap, first-20, first2)
	}
	cursors := a.fedNow().mirrorCursors("b")
	for topic, last := range map[string]uint64{"g.t": 99, "g.new": 49} {
		if pos, ok, err := a.log.Position(cursorName("b"), topic); err != nil || !ok || pos != last {
			t.Fatalf("cursor (%s, b) = %d %v %v, want %d: past the gap", topic, pos, ok, err, last)
		}
		if c := cursors[topic]; c != int64(last) {
			t.Fatalf("running mirror of %s at cursor %d, want %d", topic, c, last)
		}
	}
	// The held records are exactly origin offsets 0..19 and first..99, once each, in order.
	recs := readAll(t, a.log, "g.t")
	var offs []uint64
	for _, r := range recs {
		if want := fmt.Sprintf("b-%d-%s", r.OriginOffset, payload); r.OriginRegion != "b" || string(r.Payload) != want {
			t.Fatalf("local offset %d: origin %s@%d payload %q", r.Offset, r.OriginRegion, r.OriginOffset, r.Payload)
		}
		offs = append(offs, r.OriginOffset)
	}
	var want []uint64
	for i := uint64(0); i < 100; i++ {
		if i < 20 || i >= first {
			want = append(want, i)
		}
	}
	if !slices.Equal(offs, want) {
		t.Fatalf("origin offsets held %v, want %v", offs, want)
	}
	t.Logf("gaps reported: g.t [20,%d) after a stale cursor, g.new [0,%d) before any mirroring; %v records counted", first, first2, wantGap)
}

// A local subscriber that unsubscribes and subscribes again (interest removed and re-added a
// few milliseconds later), over and over, while the origin publishes steadily: every stop
// and restart of the mirror resumes from its cursor, so the log holds each record once.
// The replacement mirror must not read the cursor before the stopped one's last batch is
// durable or abandoned. The mirroring node's disk takes 30 ms per fsync (a busy disk), so a
// stopped mirror often has a batch waiting for its fsync.
func TestInterestFlapMirrorsExactlyOnce(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{walFS: slowSyncFS(30 * time.Millisecond)})
	b := m.addNode("b", nodeOpts{})
	const topic = "flap.t"
	pub := startPublisher(t, b, topic, 20, 2*time.Millisecond)
	a.fedNow().AddInterest(topic)
	testlog.WaitFor(t, 10*time.Second, "mirror up", func() bool { return a.next(topic) > 0 })
	rng := testlog.Rand(t, "the times between flaps")
	const flaps = 40
	for i := 0; i < flaps; i++ {
		a.fedNow().RemoveInterest(topic)
		testlog.Pause(context.Background(), 2*time.Millisecond) // the seeded flap schedule
		a.fedNow().AddInterest(topic)
		testlog.Pause(context.Background(), time.Duration(20+rng.IntN(40))*time.Millisecond)
	}
	pub.halt()
	fence(t, a, b, topic)
	n := checkMirrored(t, a, b, topic)
	if got, want := a.next(topic), b.next(topic); got != want {
		t.Fatalf("a holds %d records, the origin %d", got, want)
	}
	t.Logf("%d interest flaps under steady publishing: %d records mirrored exactly once", flaps, n)
}
