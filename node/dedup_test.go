package node

import (
	"context"
	"testing"

	"github.com/quicmq/quicmq/client"
)

// TestDedupThroughRelay: the topic's owner decides about a publish with a producer and a
// sequence, whichever node of the region the client is connected to: a retry relayed by the
// other node, or sent to the owner directly, is answered as a duplicate with the original
// offset, and the relaying node passes the flag on.
func TestDedupThroughRelay(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	const topic = "dedup.relay"
	owner := m.owner("eu", topic)
	relay := other("eu", owner)
	ctx := context.Background()
	viaRelay, direct := m.dial(relay), m.dial(owner)
	msg := func(seq uint64) client.Message {
		return client.Message{Topic: topic, ProducerID: "p", Sequence: seq, Payload: []byte("x")}
	}
	first, err := viaRelay.Publish(ctx, msg(1))
	if err != nil || first.Duplicate {
		t.Fatalf("first publish through %s: %+v %v", relay, first, err)
	}
	for _, c := range []struct {
		name string
		conn *client.Conn
	}{{"the owner " + owner, direct}, {"the relay " + relay, viaRelay}} {
		again, err := c.conn.Publish(ctx, msg(1))
		if err != nil || !again.Duplicate || again.Offset != first.Offset || !again.Time.Equal(first.Time) {
			t.Fatalf("retry through %s: %+v %v, want a duplicate of %+v", c.name, again, err, first)
		}
	}
	next, err := viaRelay.Publish(ctx, msg(2))
	if err != nil || next.Duplicate || next.Offset != first.Offset+1 {
		t.Fatalf("next sequence through the relay: %+v %v", next, err)
	}
	if d := m.nodes[owner].Log().Stats().Duplicates; d != 2 {
		t.Fatalf("the owner answered %d duplicates, want 2", d)
	}
}
