package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

// TestRelayedBatchAnsweredWithRuns: a PUBLISH_BATCH sent to a follower of the topic's
// group is relayed to the leader as PUBLISH_BATCH frames (relay.go) and, stored there as
// one run, answered to the client with PUBLISH_ACKS at the leader's dense offsets, as a
// batch the node appended itself would be; the log is the same on every replica.
func TestRelayedBatchAnsweredWithRuns(t *testing.T) {
	const topic, count = "relayed", 40
	m, _ := newSeededRegion(t, topic, 1, 60*time.Second)
	var lead string
	testlog.WaitFor(t, 15*time.Second, "a leader of the topic's group", func() bool {
		lead = leaderOf(m.nodes["eu-1"], topic)
		return lead != ""
	})
	follower := "eu-1"
	if lead == follower {
		follower = "eu-2"
	}
	b := &wire.PublishBatch{Seq: 1, Topic: topic}
	for i := range count {
		b.Publishes = append(b.Publishes, wire.Publish{Seq: uint64(1 + i), Topic: topic, Payload: fmt.Appendf(nil, "r%d", i)})
	}
	s := mustDial(t, m.nodes[follower]).open(b)
	s.str.Close()
	next := uint64(1)
	for next <= count {
		switch f := s.next().(type) {
		case *wire.PublishAcks:
			if f.Seq != next || f.Offset != f.Seq {
				t.Fatalf("PUBLISH_ACKS %+v: want seq %d at offset %d (one record stored before)", f, next, next)
			}
			next += f.Count
		default:
			t.Fatalf("publish %d relayed by follower %s (leader %s): answered with %#v, want PUBLISH_ACKS", next, follower, lead, f)
		}
	}
	checkIdentical(t, m.all(), topic, 1+count)
}
