package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/relocate"
)

// TestMovedReplicaLeadsBeforeTheMetadataSaysSo: raft promotes a moved replica before the
// metadata leader records the move done, and a node applies that record only later (a
// learner of the metadata group last), while the leader balancer may already hand the new
// replica its group's leadership. Publishes then reach a leader that no node's placement
// names yet: the nodes that hold the group relay to it by the name its raft ID has in the
// region (not only in the placement), and it appends them as raft's leader rather than
// refusing them as "not one of its replicas". Before, a node that had not applied the
// record waited QuorumTimeout for a leader it could name, holding every publish on the
// client's stream behind it, and the new leader refused what reached it (the grow
// campaign's "this node is not one of its replicas"). The metadata leader's recording of
// the move's end is held (mover.holdEnds) for as long as the test needs.
func TestMovedReplicaLeadsBeforeTheMetadataSaysSo(t *testing.T) {
	m := newMoveMesh(t, 4, func(c *Config) {
		c.Raft.DisableReplicaBalance = true
		c.Raft.BalanceInterval = -1 // the leadership goes where the test hands it
	})
	for _, name := range m.names {
		m.nodes[name].rep.reloc.HoldMoveEnds(true)
	}
	lead := m.metaLeader()
	dest, g := m.moveDestination(lead)
	from := g.replicas[0]
	destID := m.nodes[dest].rep.id
	topic := ""
	for i := range 40 { // newMoveMesh published d.0 .. d.39
		if tp := m.nodes[lead].rep.lookup(fmt.Sprintf("d.%d", i)); tp != nil && tp.group == g.id {
			topic = tp.name
			break
		}
	}
	if topic == "" {
		t.Skipf("no topic of group %s among d.0-d.39", g.label)
	}
	t.Logf("moving group %s (topic %s) from %s to %s (raft ID %d); placement %v", g.label, topic, from.name, dest, destID, g.names())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if !m.nodes[lead].rep.reloc.StartMove(ctx, relocate.Move{Group: g.id, From: from.name, FromID: from.id, To: dest, ToID: destID}) {
		t.Fatal("the start record was not committed")
	}
	// Raft promotes dest and removes from; then dest is handed the leadership.
	var asked time.Time
	testlog.WaitForErr(t, 60*time.Second, dest+" voting in "+g.label+" and leading it", func() error {
		if ro, ok := m.nodes[dest].rep.d.Role(g.id); ok && ro.Leader {
			return nil
		}
		for _, name := range m.names {
			rr := m.nodes[name].rep
			if ro, ok := rr.d.Role(g.id); !ok || !ro.Leader {
				continue
			}
			mem, err := rr.d.Membership(ctx, g.id)
			if err != nil {
				return err
			}
			if mem.Joint() || !mem.IsVoter(destID) || mem.IsVoter(from.id) || mem.IsLearner(from.id) {
				return fmt.Errorf("%s leads with voters %v, learners %v, joint %v", name, mem.Voters, mem.Learners, mem.Joint())
			}
			if time.Since(asked) > time.Second {
				asked = time.Now()
				if err := rr.d.TransferLeadership(ctx, g.id, destID); err != nil {
					return err
				}
			}
			return fmt.Errorf("%s leads; its leadership asked to move to %s", name, dest)
		}
		// A quiet group's voters do not notice that their leader stepped down when the
		// change removed it (from led): wake them to elect one.
		for _, name := range m.names {
			_ = m.nodes[name].rep.d.Wake(ctx, g.id)
		}
		return errors.New("no leader")
	})
	// No node has applied the move's end: every placement still names from, not dest.
	for _, name := range m.names {
		if tp := m.nodes[name].rep.lookup(topic); tp == nil || slices.Contains(tp.names(), dest) || !slices.Contains(tp.names(), from.name) {
			t.Fatalf("%s places %s on %v, want the placement before the move (%v)", name, topic, tp.names(), g.names())
		}
	}
	// Through every node: the stayers relay to dest by its region name, dest passes a
	// client's publish to a stayer (its placement names no replica here), which relays it
	// back to dest, the leader.
	for i, name := range m.names {
		if name == from.name {
			continue // removed from the group's raft: it finds no leader until it applies the end
		}
		c := dialNode(t, m.nodes[name], client.Options{})
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second) // within QuorumTimeout (5 s)
		start := time.Now()
		ack, err := c.Publish(pctx, client.Message{Topic: topic, Payload: []byte("lead"), ProducerID: "movelead", Sequence: uint64(i + 1)})
		pcancel()
		c.Close()
		if err != nil {
			t.Fatalf("publish to %s through %s, its group led by %s which no placement names yet: %v", topic, name, dest, err)
		}
		t.Logf("publish through %s acknowledged at offset %d in %v", name, ack.Offset, time.Since(start).Round(time.Millisecond))
	}
	m.releaseMoveEnds() // move_test.go
	m.checkFullyReplicated(m.names)
}
