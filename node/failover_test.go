package node

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/testlog"
)

// newFailoverMesh starts regions eu, us and ap, one node each, mirroring "events" from every
// region, each node keeping its client port across a restart (so that a client's address
// list stays right), and returns a publisher's connection to each.
func newFailoverMesh(t *testing.T) (*regionMesh, map[string]*client.Conn) {
	t.Helper()
	m := newTestMeshWith(t, func(r string, c *Config) { c.Mirror = []string{"events"} }, "eu", "us", "ap")
	pub := map[string]*client.Conn{}
	for r, n := range m.nodes {
		c := m.cfgs[r]
		c.Listen = n.Addr().String()
		m.cfgs[r] = c
		pub[r] = m.dial(r)
	}
	return m, pub
}

// originCheck checks that records arrive exactly once per origin region, in origin order, with
// the payloads "<region>-<i>" for i = 0, 1, 2, ... of publishSeq.
type originCheck struct {
	t    *testing.T
	next map[string]int
	last map[string]uint64
}

func newOriginCheck(t *testing.T) *originCheck {
	return &originCheck{t: t, next: map[string]int{}, last: map[string]uint64{}}
}

// take checks rec; it reports false for a duplicate (an origin's earlier record again),
// which the caller counts or refuses. Anything else out of place fails the test.
func (oc *originCheck) take(rec client.Record) bool {
	oc.t.Helper()
	o := rec.OriginRegion
	var i int
	if _, err := fmt.Sscanf(strings.TrimPrefix(string(rec.Payload), o+"-"), "%d", &i); err != nil {
		oc.t.Fatalf("record %s@%d from %s: payload %q", rec.Topic, rec.Offset, o, rec.Payload)
	}
	if i < oc.next[o] {
		return false
	}
	if i > oc.next[o] {
		oc.t.Fatalf("record %s@%d: %q after %s-%d: records of %s skipped", rec.Topic, rec.Offset, rec.Payload, o, oc.next[o]-1, o)
	}
	if oc.next[o] > 0 && rec.OriginOffset <= oc.last[o] {
		oc.t.Fatalf("origin offsets of %s not increasing: %d after %d", o, rec.OriginOffset, oc.last[o])
	}
	oc.last[o] = rec.OriginOffset
	oc.next[o]++
	return true
}

// readUntil reads sub, acking every record, until every region of want has delivered that many
// records; it returns the duplicates seen (each failing the test when dupsOK is false).
func (oc *originCheck) readUntil(ctx context.Context, sub *client.Subscription, want map[string]int, dupsOK bool) int {
	oc.t.Helper()
	dups := 0
	for !oc.has(want) {
		rec, err := sub.Next(ctx)
		if err != nil {
			oc.t.Fatalf("after %v of %v: %v", oc.next, want, err)
		}
		if !oc.take(rec) {
			if !dupsOK {
				oc.t.Fatalf("record %s@%d %q from %s delivered twice", rec.Topic, rec.Offset, rec.Payload, rec.OriginRegion)
			}
			dups++
		}
		if err := sub.Ack(rec); err != nil {
			oc.t.Fatal(err)
		}
	}
	return dups
}

// publishConcurrently publishes records from..from+count-1 of publishSeq in every region of
// pub at once, one at a time per region, so that each region's log interleaves the origins
// its own way.
func publishConcurrently(t *testing.T, pub map[string]*client.Conn, from, count int) {
	t.Helper()
	errs := make(chan error, len(pub))
	for r, c := range pub {
		go func() {
			for i := from; i < from+count; i++ {
				if _, err := c.Publish(context.Background(), client.Message{Topic: "events", Payload: fmt.Appendf(nil, "%s-%d", r, i)}); err != nil {
					errs <- fmt.Errorf("publish %s-%d: %w", r, i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range pub {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func (oc *originCheck) has(want map[string]int) bool {
	for r, n := range want {
		if oc.next[r] < n {
			return false
		}
	}
	return true
}

// A durable consumer of a topic published in three regions, at home in eu: eu is stopped
// while records are on their way to it (and while some of eu's acknowledged records are not
// mirrored yet); the subscription moves to us with its vector and goes on; us and ap publish
// more; eu returns and its mirror catches up. The consumer gets every acknowledged record of
// every region exactly once, each origin in order, without a word from the application.
func TestFailoverExactlyOnceAcrossRegions(t *testing.T) {
	m, pub := newFailoverMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	eu := m.nodes["eu"]
	c, err := client.Dial(ctx, client.Options{CAFile: eu.CAFile(), Reconnect: true, Name: "consumer",
		Failover: []string{m.nodes["us"].Addr().String(), m.nodes["ap"].Addr().String()}}, eu.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "events", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	oc := newOriginCheck(t)
	publishConcurrently(t, pub, 0, 300)
	oc.readUntil(ctx, sub, map[string]int{"eu": 200, "us": 100, "ap": 100}, false)
	// eu's last records: acknowledged by eu, and eu stopped right after, before its mirrors
	// could have carried all of them.
	publishSeq(t, pub["eu"], "events", "eu", 300, 200)
	_, euNext, _ := eu.Log().Bounds("events")
	usHasEU, _, _ := m.nodes["us"].Log().Position(mirrorCursorPrefix+"eu", "events")
	m.stop("eu")
	t.Logf("eu stopped with its last record at offset %d, us had mirrored eu's up to %d; consumer at %v, position %v", euNext-1, usHasEU, oc.next, sub.Position())

	for _, r := range []string{"us", "ap"} {
		publishSeq(t, pub[r], "events", r, 300, 300)
	}
	oc.readUntil(ctx, sub, map[string]int{"us": 600, "ap": 600}, false)
	if st := c.Stats(); st.Region != "us" || st.Failovers != 1 {
		t.Fatalf("after eu stopped: connected in %s with %d failovers, want us and 1", st.Region, st.Failovers)
	}

	m.start("eu")
	m.waitLinks()
	oc.readUntil(ctx, sub, map[string]int{"eu": 500, "us": 600, "ap": 600}, false)
	// One more record of each region after everything: any duplicate of an earlier record
	// would come before it and fail the check.
	pub["eu"] = m.dial("eu")
	for _, r := range m.region {
		publishSeq(t, pub[r], "events", r, oc.next[r], 1)
	}
	oc.readUntil(ctx, sub, map[string]int{"eu": 501, "us": 601, "ap": 601}, false)
	t.Logf("received %v exactly once; position %v", oc.next, sub.Position())
}

// The same mesh, with the consumer process restarted in us without any state of its own
// (no Position): it resumes from its position as eu stored it and mirrored it to us (every
// PositionInterval). The records it had received in eu past that mirrored position come again,
// and nothing else: their number is counted and reported, and equals exactly the records the
// mirrored position did not cover. Nothing is skipped, each origin stays in order, and once eu
// returns its records not mirrored before the stop arrive too.
func TestFailoverRestartedConsumerResumesFromMirroredPosition(t *testing.T) {
	m, pub := newFailoverMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	eu, us := m.nodes["eu"], m.nodes["us"]
	c1 := dialNode(t, eu, client.Options{Name: "consumer-1"})
	sub, err := c1.Subscribe(ctx, "events", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	var received []client.Record
	oc := newOriginCheck(t)
	read := func(want map[string]int) {
		t.Helper()
		for !oc.has(want) {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !oc.take(rec) {
				t.Fatalf("%q delivered twice in eu", rec.Payload)
			}
			received = append(received, rec)
			if err := sub.Ack(rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	publishConcurrently(t, pub, 0, 300)
	read(map[string]int{"eu": 150, "us": 100, "ap": 100})
	mirrored := federation.MirroredPositionName("eu", "audit")
	testlog.WaitFor(t, 20*time.Second, "us to hold audit's position mirrored from eu", func() bool {
		_, vec, ok, _ := us.Log().PositionVector(mirrored, "events")
		return ok && vec != nil
	})
	publishSeq(t, pub["eu"], "events", "eu", 300, 200)
	read(map[string]int{"eu": 250, "us": 150, "ap": 150})
	c1.Close() // the consumer process ends without a word
	m.stop("eu")
	_, v, _, err := us.Log().PositionVector(mirrored, "events")
	if err != nil {
		t.Fatal(err)
	}
	expect := 0
	for _, r := range received {
		if last, ok := v[r.OriginRegion]; !ok || r.OriginOffset > last {
			expect++
		}
	}
	t.Logf("the consumer received %d records in eu; the position us holds from eu, %v, covers all but %d of them", len(received), v, expect)

	c2 := dialNode(t, us, client.Options{Name: "consumer-2"})
	sub, err = c2.Subscribe(ctx, "events", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"us", "ap"} {
		publishSeq(t, pub[r], "events", r, 300, 300)
	}
	dups := oc.readUntil(ctx, sub, map[string]int{"us": 600, "ap": 600}, true)
	m.start("eu")
	m.waitLinks()
	dups += oc.readUntil(ctx, sub, map[string]int{"eu": 500, "us": 600, "ap": 600}, true)
	pub["eu"] = m.dial("eu")
	for _, r := range m.region {
		publishSeq(t, pub[r], "events", r, oc.next[r], 1)
	}
	dups += oc.readUntil(ctx, sub, map[string]int{"eu": 501, "us": 601, "ap": 601}, true)
	t.Logf("restarted in us without state: received %v, %d duplicates (records past the mirrored position)", oc.next, dups)
	if dups != expect {
		t.Fatalf("%d duplicates, want exactly the %d records the mirrored position did not cover", dups, expect)
	}
}

// A durable that resumed at home from its stored position knows, in the client, only what it
// delivered since; when it then moves, the node of the new region raises that vector with the
// durable's position mirrored there, so what it acknowledged before is not delivered again.
func TestFailoverAfterResumeRepeatsNothing(t *testing.T) {
	m, pub := newFailoverMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	eu, us := m.nodes["eu"], m.nodes["us"]
	oc := newOriginCheck(t)
	first := dialNode(t, eu, client.Options{Name: "consumer-1"})
	sub, err := first.Subscribe(ctx, "events", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	publishConcurrently(t, pub, 0, 100)
	oc.readUntil(ctx, sub, map[string]int{"eu": 100, "us": 100, "ap": 100}, false)
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sub.Close()
	first.Close()
	mirrored := federation.MirroredPositionName("eu", "audit")
	testlog.WaitFor(t, 20*time.Second, "us to hold audit's whole position mirrored from eu", func() bool {
		_, vec, _, _ := us.Log().PositionVector(mirrored, "events")
		_, own, _, _ := eu.Log().PositionVector("audit", "events")
		return vec != nil && maps.Equal(vec, own)
	})

	c, err := client.Dial(ctx, client.Options{CAFile: eu.CAFile(), Reconnect: true, Name: "consumer-2",
		Failover: []string{us.Addr().String()}}, eu.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err = c.Subscribe(ctx, "events", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	publishSeq(t, pub["eu"], "events", "eu", 100, 50)
	oc.readUntil(ctx, sub, map[string]int{"eu": 150}, false)
	t.Logf("resumed at home; the client's position %v", sub.Position())
	m.stop("eu")
	for _, r := range []string{"us", "ap"} {
		publishSeq(t, pub[r], "events", r, 100, 50)
	}
	oc.readUntil(ctx, sub, map[string]int{"us": 150, "ap": 150}, false)
	if st := c.Stats(); st.Region != "us" {
		t.Fatalf("connected in %s, want us", st.Region)
	}
	for _, r := range []string{"us", "ap"} {
		publishSeq(t, pub[r], "events", r, 150, 1)
	}
	oc.readUntil(ctx, sub, map[string]int{"us": 151, "ap": 151}, false)
	t.Logf("received %v exactly once", oc.next)
}
