package node

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestReplicatedWipedReplicaCatchesUpThroughSnapshot: with log compaction on (the
// default), a follower whose data directory is lost rejoins under a new raft ID; its
// groups' logs no longer start at index 1, so it is sent a snapshot (metadata only: the
// topic's next offset, de-duplication window, the durable position) and fetches the
// records from its leader's log before installing it. It ends with the same log and the
// same position as the others, and serves them.
func TestReplicatedWipedReplicaCatchesUpThroughSnapshot(t *testing.T) {
	const topic, records = "snap", 300
	m, ctx := newSeededRegion(t, topic, records, 120*time.Second)
	c := m.dial("eu-1")
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{Durable: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	// Open until every replica stored the position: acks are sent in the background.
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		m.waitPosition(name, "worker", topic, 9)
	}
	sub.Close()
	c.Close()
	var lead string
	testlog.WaitFor(t, 10*time.Second, "a leader of "+topic, func() bool { lead = leaderOf(m.nodes["eu-1"], topic); return lead != "" })
	ln := m.nodes[lead]
	g := ln.rep.lookup(topic).group
	testlog.WaitFor(t, 10*time.Second, "the leader to compact its log", func() bool {
		first, _, err := ln.rep.d.LogBounds(ctx, g)
		return err == nil && first > 1
	})

	victim := "eu-1"
	if victim == lead {
		victim = "eu-2"
	}
	var other string
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		if name != lead && name != victim {
			other = name
		}
	}
	m.nodes[victim].Close()
	cfg := m.cfgs[victim]
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.Join = []string{m.nodes[lead].Gossip().LANAddr()}
	m.cfgs[victim] = cfg
	m.restart(victim)

	// Publishing goes on while it catches up.
	pc := m.dial(other)
	publishNumbered(ctx, t, pc, topic, records, records+20)
	pc.Close()
	all := []*Node{m.nodes["eu-1"], m.nodes["eu-2"], m.nodes["eu-3"]}
	checkIdentical(t, all, topic, records+20)
	m.waitPosition(victim, "worker", topic, 9)

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := m.nodes[victim].rep.d.Stats(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapshotsApplied == 0 || st.CatchupsDone == 0 || st.CatchupRecords < records {
		t.Fatalf("%s caught up without a snapshot and a fetch of the %d records: %+v", victim, records, st)
	}
	t.Logf("%s rejoined: %d snapshots installed, %d catch-ups (%d failed), %d records and %d bytes fetched (%d from %s, not the leader)",
		victim, st.SnapshotsApplied, st.CatchupsDone, st.CatchupsFailed, st.CatchupRecords, st.CatchupBytes, st.CatchupOtherBytes, other)
	// The wiped node is a voter again (promoted once caught up) and serves the records.
	testlog.WaitFor(t, 20*time.Second, victim+" a voter of "+topic, func() bool {
		mctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		mb, err := ln.rep.d.Membership(mctx, g)
		return err == nil && mb.IsVoter(m.nodes[victim].rep.id) && len(mb.Voters) == 3
	})
	vc := m.dial(victim)
	defer vc.Close()
	vs, err := vc.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range readAll(t, vs, records+20, 15*time.Second) {
		if d.offset != uint64(i) {
			t.Fatalf("%s served offset %d at %d", victim, d.offset, i)
		}
	}
}
