package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/wal"
)

// A group of one member reading a topic published in three regions, at home in eu: eu is
// stopped while records are on their way to the member and some of eu's acknowledged records
// are not mirrored yet; the member moves to us, where the group resumes from its state
// mirrored from eu; us and ap publish more; eu returns and its mirror catches up. The member
// gets every acknowledged record of every region exactly once, each origin in order: what the
// group redelivers in us that the member acknowledged in eu (within the mirroring lag) is
// dropped by the SDK and counted. Exactly once holds for records the member acknowledges
// within the group's ack-wait (docs/protocol.md): one it does not is delivered again, to it
// too, on the same stream. So the group's ack-wait here is longer than the test may run: the
// member reads nothing until publishConcurrently returns, while the node hands it up to 256
// records (MemberPending), and the ack-wait runs from that hand-out; at load 15-25 with -race
// publishing took over the default 30 s, and eu-0 came again before any failover.
// failoverAckWait is the ack-wait of the failover tests' groups: longer than a test may run,
// since their members read nothing while the test publishes, and a record held past the
// ack-wait is delivered again on the same stream (docs/protocol.md), which these tests would
// count as a duplicate of the failover.
const failoverAckWait = 5 * time.Minute

func TestGroupFailoverExactlyOnceAcrossRegions(t *testing.T) {
	m, pub := newFailoverMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	eu, us := m.nodes["eu"], m.nodes["us"]
	c, err := client.Dial(ctx, client.Options{CAFile: eu.CAFile(), Reconnect: true, Name: "member",
		Failover: []string{us.Addr().String(), m.nodes["ap"].Addr().String()}}, eu.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "events", client.SubscribeOptions{Group: "workers", AckWait: failoverAckWait})
	if err != nil {
		t.Fatal(err)
	}
	oc := newOriginCheck(t)
	began := time.Now()
	publishConcurrently(t, pub, 0, 300)
	t.Logf("published 300 records in each region in %v, the member reading none meanwhile", time.Since(began))
	oc.readUntil(ctx, sub, map[string]int{"eu": 200, "us": 100, "ap": 100}, false)
	testlog.WaitFor(t, 20*time.Second, "us to hold workers' state mirrored from eu", func() bool {
		return mirroredGroupState(t, us.Log(), "eu", "workers") != nil
	})
	publishSeq(t, pub["eu"], "events", "eu", 300, 200)
	_, euNext, _ := eu.Log().Bounds("events")
	usHasEU, _, _ := us.Log().Position(mirrorCursorPrefix+"eu", "events")
	m.stop("eu")
	t.Logf("eu stopped with its last record at offset %d, us had mirrored eu's up to %d; member at %v", euNext-1, usHasEU, oc.next)

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
	pub["eu"] = m.dial("eu")
	for _, r := range m.region {
		publishSeq(t, pub[r], "events", r, oc.next[r], 1)
	}
	oc.readUntil(ctx, sub, map[string]int{"eu": 501, "us": 601, "ap": 601}, false)
	t.Logf("received %v exactly once; the SDK dropped %d redeliveries of records acknowledged in eu", oc.next, sub.Redelivered())
}

// The same mesh, with the member process restarted in us without any state of its own: the
// group resumes there from its state as eu stored it and mirrored it to us. The records the
// member received in eu that state does not count as done come again, and nothing else: their
// number is counted, reported, and equals exactly the records the mirrored state did not
// cover. Nothing is skipped, each origin stays in order, and once eu returns its records not
// mirrored before the stop arrive too.
func TestGroupFailoverRestartedMemberResumesFromMirroredState(t *testing.T) {
	m, pub := newFailoverMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	eu, us := m.nodes["eu"], m.nodes["us"]
	c1 := dialNode(t, eu, client.Options{Name: "member-1"})
	sub, err := c1.Subscribe(ctx, "events", client.SubscribeOptions{Group: "workers", AckWait: failoverAckWait})
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
	testlog.WaitFor(t, 20*time.Second, "us to hold workers' state mirrored from eu", func() bool {
		return mirroredGroupState(t, us.Log(), "eu", "workers") != nil
	})
	publishSeq(t, pub["eu"], "events", "eu", 300, 200)
	read(map[string]int{"eu": 250, "us": 150, "ap": 150})
	c1.Close() // the member process ends without a word
	m.stop("eu")
	st := mirroredGroupState(t, us.Log(), "eu", "workers")
	d := groups.StateDone(st)
	expect := 0
	for _, r := range received {
		if !d.Done(wal.OriginRef{Region: r.OriginRegion, Offset: r.OriginOffset}) {
			expect++
		}
	}
	t.Logf("the member received %d records in eu; the state us holds from eu (through %v, %d outstanding) counts all but %d of them done",
		len(received), st.Vector.Through, len(d.Out), expect)

	c2 := dialNode(t, us, client.Options{Name: "member-2"})
	sub, err = c2.Subscribe(ctx, "events", client.SubscribeOptions{Group: "workers", AckWait: failoverAckWait})
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
	t.Logf("restarted in us without state: received %v, %d duplicates (records the mirrored state did not count done)", oc.next, dups)
	if dups != expect {
		t.Fatalf("%d duplicates, want exactly the %d records the mirrored state did not count done", dups, expect)
	}
}

// mirroredGroupState is group's state of "events" mirrored from region into l, nil for none.
func mirroredGroupState(t *testing.T, l *wal.Log, region, group string) *wal.GroupState {
	t.Helper()
	_, states, ok, err := l.Group(federation.MirroredGroupName(region, group))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return nil
	}
	return states["events"]
}

// Two members of one group at home in eu, both with failover to us: eu is stopped while both
// take records; both move to us, where the group resumes from its state mirrored from eu. Every
// record of every region is received at least once; a record received twice (by either member)
// must have been first received within groupLagBound of the stop (the mirroring lag). The
// duplicates are counted and reported.
func TestGroupFailoverTwoMembersAtLeastOnce(t *testing.T) {
	const groupLagBound = 3 * time.Second
	m, pub := newFailoverMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	eu, us := m.nodes["eu"], m.nodes["us"]
	type got struct {
		first time.Time
		n     int
	}
	var mu sync.Mutex
	seen := map[string]*got{}
	dropped := 0
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	var subs []*client.Subscription
	for i := range 2 {
		c, err := client.Dial(ctx, client.Options{CAFile: eu.CAFile(), Reconnect: true, Name: fmt.Sprintf("member-%d", i),
			Failover: []string{us.Addr().String()}}, eu.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sub, err := c.Subscribe(ctx, "events", client.SubscribeOptions{Group: "workers", AckWait: failoverAckWait})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, sub := range subs {
		wg.Go(func() {
			for {
				rec, err := sub.Next(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				g := seen[string(rec.Payload)]
				if g == nil {
					g = &got{first: time.Now()}
					seen[string(rec.Payload)] = g
				}
				g.n++
				mu.Unlock()
				sub.Ack(rec)
			}
		})
	}
	publishConcurrently(t, pub, 0, 300)
	testlog.WaitFor(t, 30*time.Second, "900 records received", func() bool { return count() >= 900 })
	testlog.WaitFor(t, 20*time.Second, "us to hold workers' state mirrored from eu", func() bool {
		return mirroredGroupState(t, us.Log(), "eu", "workers") != nil
	})
	publishSeq(t, pub["eu"], "events", "eu", 300, 200)
	m.stop("eu")
	stopped := time.Now()
	for _, r := range []string{"us", "ap"} {
		publishSeq(t, pub[r], "events", r, 300, 300)
	}
	m.start("eu")
	m.waitLinks()
	testlog.WaitFor(t, 60*time.Second, "every record of every region received", func() bool { return count() >= 500+600+600 })
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for p, g := range seen {
		if g.n == 1 {
			continue
		}
		dups += g.n - 1
		if age := stopped.Sub(g.first); age > groupLagBound {
			t.Errorf("%s received %d times, first %v before eu stopped: more than the mirroring lag allows", p, g.n, age.Round(time.Millisecond))
		}
	}
	for _, sub := range subs {
		dropped += int(sub.Redelivered())
	}
	t.Logf("two members: %d distinct records, %d duplicates (each first received within %v of the stop), %d redeliveries dropped by the members' SDKs",
		len(seen), dups, groupLagBound, dropped)
}
