package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// TestCampaignReplicaCatchesBrokenAck runs the kill campaign on the broken build and passes
// only if the checker fails it: the leader, killed right after acknowledging records that
// no follower has yet, takes them with it (lost acknowledgements), and comes back with
// records at offsets the new leader gave to others (replicas diverge).
//
// Before each kill the followers are killed too, and the leader is killed once it has
// acknowledged a publish: a correct leader cannot then (no quorum), the broken one does, with
// the records on its disk alone. The followers restart first and elect one of themselves,
// which lacks those records. (Stopping the followers with SIGSTOP instead did not always
// catch it: the leader's appends reached their sockets' buffers before it was killed, and
// they took them on SIGCONT, so the records it acknowledged alone survived; one run of four
// such campaigns passed the broken build that way.)
func TestCampaignReplicaCatchesBrokenAck(t *testing.T) {
	t.Parallel()
	kills := envInt("QUICMQ_REPLICA_BROKEN_KILLS", 3)
	bin := os.Getenv("QUICMQ_REPLICA_BROKEN_BIN") // a broken build made elsewhere
	if bin == "" {
		bin = quicmqBinaryTags(t, "quicmq_broken_ack") // replica/broken_ack.go: a leader acknowledges once its own log has a publish synced, before a quorum does
	}
	r, l := replicaCampaign(t, bin)
	for k := range kills {
		leader := l.leaderAfter(t, time.Second)
		var followers []int
		for i, n := range r.Nodes {
			if i != leader {
				n.Proc().Kill()
				followers = append(followers, i)
			}
		}
		acked := l.oks.Load()
		wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		testlog.Until(wait, func() bool { return l.oks.Load() != acked }) // an acknowledgement no follower can have made (a correct build makes none)
		cancel()
		alone := l.oks.Load() - acked
		r.Nodes[leader].Proc().Kill()
		for _, i := range followers {
			r.Start(i)
		}
		t.Logf("kill %d: the leader acknowledged %d publishes with its followers down", k, alone)
		if _, _, err := l.failover(t, leader, time.Now()); err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		r.Start(leader)
		r.WaitLinks(r.Nodes[leader], len(r.Nodes)-1)
		t.Logf("kill %d: %s (leader of %s) killed right after an acknowledgement, restarted after its followers", k, r.Nodes[leader].Name, l.topics[0])
	}
	l.goesOn(t, time.Second)
	l.Stop()
	rep := l.judge(t, all(len(r.Nodes)), false)
	t.Logf("load: %s", l.summary())
	t.Logf("checker on the broken build: %v", rep)
	if rep.OK() {
		t.Fatal("the checker passed a build that acknowledges before commit")
	}
}
