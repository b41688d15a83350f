package node

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// checkIdenticalFrom waits until every node's log of topic is [first, next), then checks
// that the logs are dense and identical on every node.
func checkIdenticalFrom(t *testing.T, nodes []*Node, topic string, first, next uint64) []wal.Record {
	t.Helper()
	for _, n := range nodes {
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("log [%d, %d) of %q on %s", first, next, topic, n.Name()), func() bool {
			f, nx, ok := n.Log().Bounds(topic)
			return ok && f == first && nx == next
		})
	}
	read := func(n *Node) []wal.Record {
		recs, err := n.Log().Read(topic, first, int(next-first)+1, 1<<30)
		if err != nil {
			t.Fatalf("%s: read %q from %d: %v", n.Name(), topic, first, err)
		}
		return recs
	}
	base := read(nodes[0])
	for i, r := range base {
		if r.Offset != first+uint64(i) {
			t.Fatalf("%s: record %d has offset %d: not dense from %d", nodes[0].Name(), i, r.Offset, first)
		}
	}
	if uint64(len(base)) != next-first {
		t.Fatalf("%s: %d records in [%d, %d)", nodes[0].Name(), len(base), first, next)
	}
	for _, n := range nodes[1:] {
		if got := read(n); !reflect.DeepEqual(got, base) {
			t.Fatalf("log of %q differs between %s and %s:\n%v\n%v", topic, nodes[0].Name(), n.Name(), base, got)
		}
	}
	return base
}

func (m *regionMesh) all() []*Node {
	var out []*Node
	for _, name := range m.names {
		out = append(out, m.nodes[name])
	}
	return out
}

// followerOf is a node of the region that does not lead topic's group.
func (m *regionMesh) followerOf(t *testing.T, topic string) (lead, follower string) {
	t.Helper()
	testlog.WaitFor(t, 10*time.Second, "a leader of "+topic, func() bool { lead = leaderOf(m.nodes["eu-1"], topic); return lead != "" })
	for _, name := range m.names {
		if name != lead {
			return lead, name
		}
	}
	t.Fatal("no follower")
	return "", ""
}

// TestReplicatedPurgeThroughFollower: a purge asked of a follower is relayed to the leader,
// refused while a durable consumer depends on the topic unless forced, and then cuts the
// same offsets on every replica; offsets go on after it. A delete through the follower
// removes the records and positions on every replica and ends a subscription with
// CodeTopicDeleted; the topic (still placed) goes on at its next offset.
func TestReplicatedPurgeThroughFollower(t *testing.T) {
	const topic = "purged"
	m, ctx := newSeededRegion(t, topic, 40, 90*time.Second)
	checkIdentical(t, m.all(), topic, 40)
	lead, follower := m.followerOf(t, topic)
	t.Logf("leader %s, purging through %s", lead, follower)

	c := m.dial("eu-1")
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{Durable: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Ack(rec); err != nil {
		t.Fatal(err)
	}
	for _, name := range m.names {
		m.waitPosition(name, "worker", topic, 0)
	}
	sub.Close()
	c.Close()

	fc := m.dial(follower)
	defer fc.Close()
	if _, err := fc.PurgeTopic(ctx, topic, client.ManageOptions{}); codeOf(err) != client.CodeInUse {
		t.Fatalf("purge with a durable consumer on it, not forced: %v, want CodeInUse", err)
	}
	n, err := fc.PurgeTopic(ctx, topic, client.ManageOptions{Force: true})
	if err != nil || n != 40 {
		t.Fatalf("forced purge through %s: %d records, %v; want 40", follower, n, err)
	}
	checkIdenticalFrom(t, m.all(), topic, 40, 40)
	// Purging an empty log deletes nothing.
	if n, err := fc.PurgeTopic(ctx, topic, client.ManageOptions{Force: true}); err != nil || n != 0 {
		t.Fatalf("second purge: %d, %v", n, err)
	}
	publishNumbered(ctx, t, fc, topic, 40, 55)
	recs := checkIdenticalFrom(t, m.all(), topic, 40, 55)
	if string(recs[0].Payload) != topic+"-40" {
		t.Fatalf("first record after the purge: %q", recs[0].Payload)
	}

	// Delete: records, positions and config go on every replica, a subscription open on a
	// replica is told CodeTopicDeleted, and the topic's offsets go on.
	sc := m.dial(follower)
	defer sc.Close()
	live, err := sc.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	for range 15 {
		if _, err := live.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fc.DeleteTopic(ctx, topic, client.ManageOptions{}); codeOf(err) != client.CodeInUse {
		t.Fatalf("delete with a durable consumer on it, not forced: %v, want CodeInUse", err)
	}
	if n, err := fc.DeleteTopic(ctx, topic, client.ManageOptions{Force: true}); err != nil || n != 15 {
		t.Fatalf("forced delete through %s: %d records, %v; want 15", follower, n, err)
	}
	checkIdenticalFrom(t, m.all(), topic, 55, 55)
	for _, n := range m.all() {
		testlog.WaitFor(t, 10*time.Second, "the position gone on "+n.Name(), func() bool {
			_, ok, err := n.Log().Position("worker", topic)
			return err == nil && !ok
		})
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if _, err := live.Next(dctx); codeOf(err) != client.CodeTopicDeleted {
		t.Fatalf("a subscription of the deleted topic on %s: %v, want CodeTopicDeleted", follower, err)
	}
	publishNumbered(ctx, t, fc, topic, 55, 58)
	checkIdenticalFrom(t, m.all(), topic, 55, 58)
}

// offsetClock is the wall clock moved forward by an offset the test sets.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// TestReplicatedRetentionCutsSameOffsets: a replicated topic's own retention, set through
// a follower, is stored on every replica; the leader's retention cuts by age and by bytes
// land at the same offsets on every replica; after the leader is stopped, the new leader
// enforces the same retention.
func TestReplicatedRetentionCutsSameOffsets(t *testing.T) {
	clock := &offsetClock{}
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
		c.Now = clock.now
		c.RetentionInterval = 50 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const aged, sized = "ret.age", "ret.bytes"
	c := m.dial("eu-2")
	defer c.Close()
	if _, err := c.CreateTopic(ctx, aged, client.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	_, follower := m.followerOf(t, aged)
	fc := m.dial(follower)
	defer fc.Close()
	ti, err := fc.CreateTopic(ctx, aged, client.TopicOptions{Retention: &client.TopicRetention{MaxAge: time.Hour}})
	if err == nil {
		t.Fatalf("create with another retention without --update: %+v", ti)
	}
	ti, err = fc.CreateTopic(ctx, aged, client.TopicOptions{Retention: &client.TopicRetention{MaxAge: time.Hour}, Update: true})
	if err != nil || ti.Retention == nil || ti.Retention.MaxAge != time.Hour {
		t.Fatalf("update retention through %s: %+v, %v", follower, ti, err)
	}
	for _, n := range m.all() {
		testlog.WaitFor(t, 10*time.Second, "the retention stored on "+n.Name(), func() bool {
			cfg, ok := n.Log().TopicConfig(aged)
			return ok && cfg.RetentionSet && cfg.Retention.MaxAge == time.Hour
		})
	}
	if _, err := c.CreateTopic(ctx, sized, client.TopicOptions{Retention: &client.TopicRetention{MaxBytes: 2000}}); err != nil {
		t.Fatal(err)
	}

	publishNumbered(ctx, t, c, aged, 0, 20)
	checkIdenticalFrom(t, m.all(), aged, 0, 20)
	clock.advance(2 * time.Hour)
	publishNumbered(ctx, t, c, aged, 20, 30)
	checkIdenticalFrom(t, m.all(), aged, 20, 30)

	publishNumbered(ctx, t, c, sized, 0, 100)
	var first uint64
	lead := leaderOf(m.nodes["eu-1"], sized)
	// A pass may run while the records arrive: the topic exceeds its bytes by what comes
	// in one retention interval, until the next pass.
	testlog.WaitFor(t, 20*time.Second, "a cut by bytes to at most 2000 bytes", func() bool {
		for _, ti := range m.nodes[lead].Log().Topics() {
			if ti.Name == sized {
				first = ti.First
				return ti.Next == 100 && ti.First > 0 && ti.Bytes <= 2000
			}
		}
		return false
	})
	recs := checkIdenticalFrom(t, m.all(), sized, first, 100)
	t.Logf("by bytes: first offset %d, %d records kept", first, len(recs))

	// A new leader enforces the same retention.
	oldLead := leaderOf(m.nodes["eu-1"], aged)
	m.nodes[oldLead].Close()
	var rest []*Node
	for _, name := range m.names {
		if name != oldLead {
			rest = append(rest, m.nodes[name])
		}
	}
	testlog.WaitFor(t, 20*time.Second, "a new leader of "+aged, func() bool {
		l := leaderOf(rest[0], aged)
		return l != "" && l != oldLead
	})
	clock.advance(2 * time.Hour)
	pc := dialNode(t, rest[0], client.Options{})
	defer pc.Close()
	publishRetrying(ctx, t, pc, aged, 30, 35)
	checkIdenticalFrom(t, rest, aged, 30, 35)
}

// TestReplicatedRejoinAfterCuts: a replica whose data directory is lost after its topic
// was cut (a purge, then retention) rejoins through a snapshot whose log start is past 0:
// it fetches only the records at or above it and ends with the same bounds and records as
// the others. The broken build (-tags quicmq_broken_retain), whose snapshot installation
// ignores the log start, fails here.
func TestReplicatedRejoinAfterCuts(t *testing.T) {
	const topic = "cutrejoin"
	m, ctx := newSeededRegion(t, topic, 100, 120*time.Second)
	checkIdentical(t, m.all(), topic, 100)
	c := m.dial("eu-1")
	if n, err := c.PurgeTopic(ctx, topic, client.ManageOptions{}); err != nil || n != 100 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	publishNumbered(ctx, t, c, topic, 100, 250)
	c.Close()
	checkIdenticalFrom(t, m.all(), topic, 100, 250)

	lead, victim := m.followerOf(t, topic)
	ln := m.nodes[lead]
	g := ln.rep.lookup(topic).group
	testlog.WaitFor(t, 10*time.Second, "the leader to compact its raft log", func() bool {
		first, _, err := ln.rep.d.LogBounds(ctx, g)
		return err == nil && first > 1
	})
	m.nodes[victim].Close()
	cfg := m.cfgs[victim]
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.Join = []string{ln.Gossip().LANAddr()}
	m.cfgs[victim] = cfg
	m.restart(victim)

	pc := m.dial(lead)
	publishNumbered(ctx, t, pc, topic, 250, 260)
	pc.Close()
	checkIdenticalFrom(t, m.all(), topic, 100, 260)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := m.nodes[victim].rep.d.Stats(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapshotsApplied == 0 || st.CatchupRecords >= 250 {
		t.Fatalf("%s rejoined without a snapshot, or fetched records below the log start: %+v", victim, st)
	}
	t.Logf("%s rejoined: %d snapshots, %d catch-ups (%d failed), %d records fetched",
		victim, st.SnapshotsApplied, st.CatchupsDone, st.CatchupsFailed, st.CatchupRecords)
}
