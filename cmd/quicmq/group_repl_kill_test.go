package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// A consumer group on a replicated topic across a SIGKILL of the node serving it (the
// topic's leader), with real node processes (campaign_replica_test.go's region): no record
// whose ACK was confirmed (Commit returned nil) is delivered again, every record not
// acknowledged is, and once all are acknowledged the group has nothing pending on either
// survivor. The same check fails on a build that stores group state on the serving node only
// (TestGroupReplicatedCatchesBrokenBuild).

func TestGroupReplicatedLeaderKill9(t *testing.T) {
	t.Parallel()
	if err := groupLeaderKill(t, quicmqBinary(t)); err != nil {
		t.Fatal(err)
	}
}

func TestGroupReplicatedCatchesBrokenBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second binary")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "quicmq")
	if out, err := exec.Command("go", "build", "-tags", "quicmq_broken_group", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags quicmq_broken_group: %v\n%s", err, out)
	}
	err := groupLeaderKill(t, bin)
	if err == nil {
		t.Fatal("the checker passed a build that keeps group state on the serving node only")
	}
	t.Logf("the checker fails the broken build, as it must: %v", err)
}

type groupRec struct {
	member int
	sub    *client.Subscription
	rec    client.Record
}

// groupLeaderKill runs the scenario on bin; an error is the checker's verdict.
func groupLeaderKill(t *testing.T, bin string) error {
	const count = 30
	r := startReplicaRegion(t, bin, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pc, err := dialNode(ctx, r, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.Publish(ctx, client.Message{Topic: "work", Payload: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	lead, err := r.Leader(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	var others []int
	for i := range r.Nodes {
		if i != lead {
			others = append(others, i)
		}
	}
	t.Logf("work led by %s; members through %s and %s", r.Nodes[lead].Name, r.Nodes[others[0]].Name, r.Nodes[others[1]].Name)

	var readers sync.WaitGroup
	join := func(mctx context.Context, member, node int, out chan<- groupRec) *client.Conn {
		for attempt := 0; ; attempt++ {
			c, err := dialNode(mctx, r, node)
			if err == nil {
				var sub *client.Subscription
				sub, err = c.Subscribe(mctx, "work", client.SubscribeOptions{Group: "g", AckWait: time.Minute, MaxDeliver: 10})
				if err == nil {
					readers.Add(1)
					go func() {
						defer readers.Done()
						for {
							rec, err := sub.Next(mctx)
							if err != nil {
								return
							}
							select {
							case out <- groupRec{member, sub, rec}:
							case <-mctx.Done():
								return
							}
						}
					}()
					return c
				}
				c.Close()
			}
			if attempt > 200 || !testlog.Pause(mctx, 100*time.Millisecond) { // a retry's back-off
				t.Fatalf("member %d through %s: %v", member, r.Nodes[node].Name, err)
			}
		}
	}

	// Two members; records 0..count-1; those at a multiple of 3 stay unacknowledged, the
	// others are acknowledged and committed.
	mctx, stop := context.WithCancel(ctx)
	recs := make(chan groupRec, 64)
	conns := []*client.Conn{join(mctx, 0, others[0], recs), join(mctx, 1, others[1], recs)}
	for i := 1; i < count; i++ {
		if _, err := pc.Publish(ctx, client.Message{Topic: "work", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint64]groupRec{}
	for len(seen) < count {
		select {
		case g := <-recs:
			if _, dup := seen[g.rec.Offset]; dup {
				return fmt.Errorf("offset %d delivered twice while no node failed", g.rec.Offset)
			}
			seen[g.rec.Offset] = g
			if g.rec.Offset%3 != 0 {
				if err := g.sub.Ack(g.rec); err != nil {
					t.Fatal(err)
				}
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d records delivered", len(seen), count)
		}
	}
	per := map[int]int{}
	subs := map[int]*client.Subscription{}
	for _, g := range seen {
		per[g.member]++
		subs[g.member] = g.sub
	}
	for m, sub := range subs {
		if err := sub.Commit(ctx); err != nil {
			t.Fatalf("member %d: commit: %v", m, err)
		}
	}
	var unacked []uint64
	for off := range seen {
		if off%3 == 0 {
			unacked = append(unacked, off)
		}
	}
	slices.Sort(unacked)
	t.Logf("records per member %v; unacknowledged %v", per, unacked)

	r.Nodes[lead].Proc().Kill()
	stop()
	for _, c := range conns {
		c.Close()
	}
	readers.Wait()
	if _, err := r.Leader(ctx, "work", lead); err != nil {
		t.Fatal(err)
	}

	mctx, stop = context.WithCancel(ctx)
	defer func() { stop(); readers.Wait() }()
	recs = make(chan groupRec, 64)
	conns = []*client.Conn{join(mctx, 0, others[0], recs), join(mctx, 1, others[1], recs)}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	again := map[uint64]groupRec{}
	for len(again) < len(unacked) {
		select {
		case g := <-recs:
			off := g.rec.Offset
			if off%3 != 0 {
				return fmt.Errorf("offset %d, whose ACK was confirmed before %s was killed, was delivered again", off, r.Nodes[lead].Name)
			}
			if _, dup := again[off]; dup {
				return fmt.Errorf("offset %d delivered twice after the kill while no other node failed", off)
			}
			again[off] = g
		case <-ctx.Done():
			return fmt.Errorf("after the kill %d of the %d unacknowledged records were delivered again", len(again), len(unacked))
		}
	}
	subs = map[int]*client.Subscription{}
	for _, g := range again {
		if err := g.sub.Ack(g.rec); err != nil {
			t.Fatal(err)
		}
		subs[g.member] = g.sub
	}
	for m, sub := range subs {
		if err := sub.Commit(ctx); err != nil {
			t.Fatalf("member %d: commit after the kill: %v", m, err)
		}
	}
	// Nothing left: on each survivor the group has no pending record.
	for _, i := range others {
		c, err := dialNode(ctx, r, i)
		if err != nil {
			t.Fatal(err)
		}
		var info client.ConsumerInfo
		for attempt := 0; ; attempt++ { // until gossip reports the killed node failed
			if info, err = c.ConsumerInfo(ctx, "g"); err == nil || attempt == 150 || !testlog.Pause(ctx, 100*time.Millisecond) {
				break
			}
		}
		c.Close()
		if err != nil {
			t.Fatalf("%s: consumer info: %v", r.Nodes[i].Name, err)
		}
		if info.Pending != 0 {
			return fmt.Errorf("%s: group g has %d records pending after every record was acknowledged", r.Nodes[i].Name, info.Pending)
		}
	}
	return nil
}
