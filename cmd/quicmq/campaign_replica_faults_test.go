package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// The four faults of the replicated-region campaign (docs/reliability.md), each on a region
// of three `quicmq node --replicas 3` processes under load (campaign_replica_test.go). By
// default each runs its short size (a few faults, well under a minute); scripts/campaign.sh
// replica and replica-faults run the full sizes through these variables:
//
//	QUICMQ_REPLICA_KILLS    SIGKILLs of the leader (default 3; full 50)
//	QUICMQ_REPLICA_ISOLATE  seconds the leader is cut off by nftables (default 5; full 30)
//	QUICMQ_REPLICA_PAUSE    seconds the leader is stopped by SIGSTOP (default 3; full 10)
//	QUICMQ_REPLICA_RATE     records/s over all producers (default 600)
//	QUICMQ_REPLICA_TOPICS   topics (default 30), sharing the region's raft groups
//	QUICMQ_REPLICA_GROUPS_PER_NODE  --raft-groups-per-node of every node (default 4: 6 groups
//	                        of 3 replicas, five of the 30 topics on each; campaign_replica_layout_test.go)
//	QUICMQ_REPLICA_BIN      a quicmq binary to run instead of building this package's
//
// "The leader" is the leader of the first topic's group (so of every topic of that group), as
// `quicmq topics --format json` reports it; the other groups' leaders may be elsewhere.
// Failover is the time from the fault to the first publish to that topic acknowledged
// through a node other than the old leader.

// replicaCampaign starts the region on bin ("": QUICMQ_REPLICA_BIN, else this package
// built) and the load, the topics created.
func replicaCampaign(t *testing.T, bin string) (*nodeproc.Region, *replicaLoad) {
	t.Helper()
	if bin == "" {
		bin = os.Getenv("QUICMQ_REPLICA_BIN")
	}
	if bin == "" {
		bin = quicmqBinary(t)
	}
	r := newReplicaRegion(t, bin, 3)
	perNode, flags := groupsFlag(t, bin)
	r.Flags = func(*nodeproc.Node) []string { return flags }
	r.StartAll()
	l := newReplicaLoad(r, envInt("QUICMQ_REPLICA_TOPICS", 30), envInt("QUICMQ_REPLICA_RATE", 600))
	layout := newReplicaLayout(perNode, len(r.Nodes), len(r.Nodes), l.topics)
	t.Logf("%d topics at %d records/s, at least %d on each group: %v", len(l.topics), l.rate, layout.minPerGroup(), layout)
	l.warmUp(t)
	layout.check(t, r, l.topics)
	l.run(2)
	t.Cleanup(l.Stop)
	return r, l
}

// goesOn waits until the load has had d's worth of records acknowledged on every topic, at
// its rate: the fault schedule counts in records, so that a slow machine gets as much load
// between two faults as a fast one.
func (l *replicaLoad) goesOn(t *testing.T, d time.Duration) {
	t.Helper()
	perTopic := max(1, int64(d.Seconds()*float64(l.rate)/float64(len(l.topics))))
	want := l.ackedOffsets()
	for i := range want {
		want[i] += perTopic
	}
	testlog.WaitForErr(t, 10*d+30*time.Second, fmt.Sprintf("%v of load acknowledged", d), func() error {
		for i := range want {
			if l.acked[i].Load() < want[i] {
				return fmt.Errorf("acknowledged up to %v, want %v", l.ackedOffsets(), want)
			}
		}
		return nil
	})
}

// leaderAfter lets the load run for d (in records), then returns the leader of the first
// topic.
func (l *replicaLoad) leaderAfter(t *testing.T, d time.Duration) int {
	t.Helper()
	l.goesOn(t, d)
	leader, err := l.r.Leader(context.Background(), l.topics[0])
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

// failover waits for the first publish to the first topic acknowledged through a node
// other than leader, since the fault at from; it returns how long after and through which
// node, and logs it.
func (l *replicaLoad) failover(t *testing.T, leader int, from time.Time) (time.Duration, string, error) {
	t.Helper()
	at, via, err := l.firstAck(context.Background(), 0, leader)
	if err != nil {
		return 0, "", fmt.Errorf("%s down: %w", l.r.Nodes[leader].Name, err)
	}
	return at.Sub(from), via, nil
}

// readEveryNode reads topic from offset 0 at every node but skip, as operations of the
// history (the checker compares each with the final agreed log).
func (l *replicaLoad) readEveryNode(t *testing.T, topic int, skip ...int) int {
	t.Helper()
	ok := 0
	for i := range l.r.Nodes {
		if !slices.Contains(skip, i) && l.readOnce(context.Background(), i, topic, 0) {
			ok++
		}
	}
	return ok
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestCampaignReplicaKillLeader: the current leader SIGKILLed again and again under pipelined
// idempotent publishing, restarted at once on its data directory.
func TestCampaignReplicaKillLeader(t *testing.T) {
	t.Parallel()
	kills := envInt("QUICMQ_REPLICA_KILLS", 3)
	r, l := replicaCampaign(t, "")
	rng := testlog.Rand(t, "the kill times")
	var failovers []time.Duration
	for k := range kills {
		leader := l.leaderAfter(t, 500*time.Millisecond+time.Duration(rng.IntN(1000))*time.Millisecond)
		r.Nodes[leader].Proc().Kill()
		took, via, err := l.failover(t, leader, time.Now())
		if err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		failovers = append(failovers, took)
		r.Start(leader)
		r.WaitLinks(r.Nodes[leader], len(r.Nodes)-1)
		read := l.readEveryNode(t, k%len(l.topics))
		t.Logf("kill %d: %s (leader of %s) killed; first ack through %s %v later; restarted; %d of 3 nodes read back",
			k, r.Nodes[leader].Name, l.topics[0], via, failovers[k].Round(time.Millisecond), read)
	}
	l.goesOn(t, time.Second)
	l.Stop()
	logFailovers(t, failovers)
	checkReplicaCampaign(t, l, all(len(r.Nodes)))
}

func logFailovers(t *testing.T, d []time.Duration) {
	t.Helper()
	if len(d) == 0 {
		return
	}
	s := slices.Clone(d)
	slices.Sort(s)
	pct := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))].Round(time.Millisecond) }
	t.Logf("failover (fault of the leader -> first publish acknowledged through another node) over %d faults: p50 %v, p99 %v, max %v; goal p99 < 1.5 s",
		len(s), pct(0.5), pct(0.99), s[len(s)-1].Round(time.Millisecond))
}

// TestCampaignReplicaIsolateLeader: the leader cut off from the other nodes and from the
// clients by nftables, both ways, then healed.
func TestCampaignReplicaIsolateLeader(t *testing.T) {
	t.Parallel()
	hold := time.Duration(envInt("QUICMQ_REPLICA_ISOLATE", 5)) * time.Second
	if os.Geteuid() != 0 {
		t.Skip("isolating a node needs root (nftables rules on lo)")
	}
	r, l := replicaCampaign(t, "")
	leader := l.leaderAfter(t, time.Second)
	iso := r.Isolate(leader)
	cut := time.Now()
	took, via, err := l.failover(t, leader, cut)
	if err != nil {
		t.Fatal(err)
	}
	logFailovers(t, []time.Duration{took})
	others := l.readEveryNode(t, 0, leader)
	testlog.Pause(l.ctx, time.Until(cut.Add(hold))) // the cut's length
	dropped := iso.Dropped()
	iso.Heal()
	t.Logf("%s (leader of %s) cut off for %v (%d packets dropped); first ack through %s %v after the cut; %d of 2 others read back",
		r.Nodes[leader].Name, l.topics[0], hold, dropped, via, took.Round(time.Millisecond), others)
	if dropped <= 0 {
		t.Fatalf("the isolation dropped %d packets: it cut nothing off", dropped)
	}
	l.goesOn(t, 3*time.Second) // the load goes on with the old leader back
	l.Stop()
	checkReplicaCampaign(t, l, all(len(r.Nodes)))
}

// TestCampaignReplicaPauseLeader: the leader stopped with SIGSTOP, then resumed: it comes
// back believing it leads, with clients' publishes in its sockets.
func TestCampaignReplicaPauseLeader(t *testing.T) {
	t.Parallel()
	hold := time.Duration(envInt("QUICMQ_REPLICA_PAUSE", 3)) * time.Second
	r, l := replicaCampaign(t, "")
	leader := l.leaderAfter(t, time.Second)
	r.Pause(leader)
	stopped := time.Now()
	took, via, err := l.failover(t, leader, stopped)
	if err != nil {
		r.Resume(leader)
		t.Fatal(err)
	}
	logFailovers(t, []time.Duration{took})
	testlog.Pause(l.ctx, time.Until(stopped.Add(hold))) // the pause's length
	r.Resume(leader)
	t.Logf("%s (leader of %s) stopped for %v; first ack through %s %v after SIGSTOP", r.Nodes[leader].Name, l.topics[0], hold, via, took.Round(time.Millisecond))
	l.goesOn(t, 3*time.Second)
	read := l.readEveryNode(t, 0)
	t.Logf("after SIGCONT: %d of 3 nodes read back", read)
	l.Stop()
	checkReplicaCampaign(t, l, all(len(r.Nodes)))
}

// TestCampaignReplicaWipeReplica: a follower killed, its data directory wiped, and restarted
// empty under the same name and gossip address. It must catch up (as a learner, I8) and end
// with the same logs as the others. If it does not within QUICMQ_REPLICA_CATCHUP seconds (15), what it answers is logged,
// the two intact replicas are judged as strictly as ever (and everything the wiped node
// served is checked too), and the test fails.
func TestCampaignReplicaWipeReplica(t *testing.T) {
	t.Parallel()
	r, l := replicaCampaign(t, "")
	ctx := context.Background()
	leader := l.leaderAfter(t, time.Second)
	victim := (leader + 1) % len(r.Nodes)
	n := r.Nodes[victim]
	r.Kill(victim)
	r.Wipe(victim)
	r.Start(victim)
	r.WaitLinks(r.Nodes[victim], len(r.Nodes)-1)
	wiped := time.Now()
	t.Logf("%s (a follower of %s) killed, its data directory wiped, restarted empty", n.Name, l.topics[0])
	var last string
	catchUp := time.Duration(envInt("QUICMQ_REPLICA_CATCHUP", 15)) * time.Second
	wait, cancel := context.WithDeadline(ctx, wiped.Add(catchUp))
	defer cancel()
	caught := testlog.Until(wait, func() bool {
		rows, err := r.Topics(ctx, victim, "rc.>")
		last = fmt.Sprintf("%+v %v", rows, err)
		next := map[string]uint64{}
		for _, row := range rows {
			next[row.Topic] = row.Next
		}
		caught := err == nil
		for ti, tp := range l.topics {
			caught = caught && int64(next[tp]) > l.acked[ti].Load()
		}
		return caught
	}) == nil
	read := l.readEveryNode(t, 0)
	t.Logf("after the wipe: %d of 3 nodes read back; %s caught up: %v after %v, through %d snapshots (metadata only, records fetched); its quicmq topics: %s",
		read, n.Name, caught, time.Since(wiped).Round(time.Millisecond), n.Proc().Snapshots(), last)
	if caught {
		l.Stop()
		checkReplicaCampaign(t, l, all(len(r.Nodes)))
		return
	}
	conn, err := dialNode(ctx, r, victim)
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		sub, err := conn.Subscribe(sctx, l.topics[0], client.SubscribeOptions{From: client.Earliest})
		if err == nil {
			_, err = sub.Next(sctx)
			sub.Close()
		}
		cancel()
		conn.Close()
		t.Logf("%s, subscribed to %s from offset 0: %v", n.Name, l.topics[0], err)
	}
	l.Stop()
	var intact []int
	for i := range r.Nodes {
		if i != victim {
			intact = append(intact, i)
		}
	}
	checkReplicaCampaign(t, l, intact)
	t.Fatalf("%s, restarted empty, did not catch up within %v (the two intact replicas passed the checker): it must rejoin as a learner under its new raft ID", n.Name, catchUp)
}
