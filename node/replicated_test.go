package node

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// newReplicatedRegion starts three nodes of region eu with Replicas 3 and fast raft timers.
func newReplicatedRegion(t *testing.T) *regionMesh {
	t.Helper()
	return newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
	})
}

// newSeededRegion starts a replicated region and publishes count records of topic through
// eu-1; the context it returns bounds the test (timeout) and ends with it.
func newSeededRegion(t *testing.T, topic string, count int, timeout time.Duration) (*regionMesh, context.Context) {
	t.Helper()
	m := newReplicatedRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	// Idempotent: a new group whose first leader changes under the seeding publishes (a
	// loaded machine, fast test timers) ends the stream with outcomes unknown, which the SDK
	// learns by publishing them again, stored once.
	c := dialNode(t, m.nodes["eu-1"], client.Options{Idempotent: true})
	publishNumbered(ctx, t, c, topic, 0, count)
	c.Close()
	return m, ctx
}

// logOf reads topic's whole log on n.
func logOf(t *testing.T, n *Node, topic string) []wal.Record {
	t.Helper()
	_, next, ok := n.Log().Bounds(topic)
	if !ok {
		return nil
	}
	recs, err := n.Log().Read(topic, 0, int(next), 1<<30)
	if err != nil {
		t.Fatalf("%s: read %q: %v", n.Name(), topic, err)
	}
	return recs
}

// checkIdentical waits until every node's log of topic has want records, then checks they
// are dense from 0 and identical on every node.
func checkIdentical(t *testing.T, nodes []*Node, topic string, want int) []wal.Record {
	t.Helper()
	for _, n := range nodes {
		testlog.WaitFor(t, 15*time.Second, fmt.Sprintf("%d records of %q on %s", want, topic, n.Name()), func() bool {
			_, next, ok := n.Log().Bounds(topic)
			return ok && next == uint64(want)
		})
	}
	first := logOf(t, nodes[0], topic)
	for i, r := range first {
		if r.Offset != uint64(i) {
			t.Fatalf("%s: record %d has offset %d: not dense", nodes[0].Name(), i, r.Offset)
		}
	}
	for _, n := range nodes[1:] {
		if got := logOf(t, n, topic); !reflect.DeepEqual(got, first) {
			t.Fatalf("log of %q differs between %s and %s:\n%v\n%v", topic, nodes[0].Name(), n.Name(), first, got)
		}
	}
	return first
}

// leaderOf is the node leading topic's group as n sees it ("" none yet).
func leaderOf(n *Node, topic string) string {
	t := n.rep.lookup(topic)
	if t == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := n.rep.d.Status(ctx, t.group)
	if err != nil {
		return ""
	}
	return t.nameOf(st.Lead)
}

func TestReplicatedPublishThroughEveryNode(t *testing.T) {
	m := newReplicatedRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := []string{"eu-1", "eu-2", "eu-3"}
	var nodes []*Node
	for _, name := range names {
		nodes = append(nodes, m.nodes[name])
	}
	for round := range 2 {
		for _, name := range names {
			c := m.dial(name)
			publishNumbered(ctx, t, c, "orders", round*30, round*30+10)
			c.Close()
		}
	}
	recs := checkIdentical(t, nodes, "orders", 60)
	for i := 1; i < len(recs); i++ {
		if recs[i].Time < recs[i-1].Time {
			t.Fatalf("time decreases at offset %d", i)
		}
	}

	// Every node lists the topic with its leader and the three replicas.
	for _, name := range names {
		c := m.dial(name)
		list, err := c.Topics(ctx, "orders")
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 {
			t.Fatalf("%s lists %d topics: %+v", name, len(list), list)
		}
		got := slices.Sorted(slices.Values(list[0].Replicas))
		if !slices.Equal(got, names) || !slices.Contains(names, list[0].Leader) {
			t.Fatalf("%s lists %+v: want replicas %v and one of them leading", name, list[0], names)
		}
	}
	if c := m.nodes["eu-1"].Conflicts(); len(c) > 0 {
		t.Fatalf("conflicts reported for replicated topics: %v", c)
	}
}

func TestReplicatedLeaderFailover(t *testing.T) {
	m, ctx := newSeededRegion(t, "pay", 5, 90*time.Second)
	var lead string
	testlog.WaitFor(t, 10*time.Second, "a leader of pay", func() bool { lead = leaderOf(m.nodes["eu-1"], "pay"); return lead != "" })

	// An idempotent publish acknowledged before the leader goes: its retry through a survivor
	// after the failover gets the original offset.
	var survivors []string
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		if name != lead {
			survivors = append(survivors, name)
		}
	}
	c := m.dial(survivors[0])
	msg := client.Message{Topic: "pay", Payload: []byte("once"), ProducerID: "p1", Sequence: 1}
	ack, err := c.Publish(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// A subscription on each survivor, open across the leader change.
	var live []*client.Subscription
	for _, name := range survivors {
		sc := m.dial(name)
		defer sc.Close()
		sub, err := sc.Subscribe(ctx, "pay", client.SubscribeOptions{From: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, sub)
	}

	// A publish in flight at the leader as it stops: whatever its answer, its retry after the
	// failover leaves exactly one copy.
	lc := m.dial(lead)
	inFlight := client.Message{Topic: "pay", Payload: []byte("in-flight"), ProducerID: "p1", Sequence: 2}
	if _, err := lc.PublishAsync(ctx, inFlight); err != nil {
		t.Fatal(err)
	}
	m.nodes[lead].Close()
	lc.Close()
	testlog.WaitFor(t, 20*time.Second, "a new leader among "+strings.Join(survivors, ","), func() bool {
		l := leaderOf(m.nodes[survivors[0]], "pay")
		return l != "" && l != lead
	})
	for _, name := range survivors {
		c := m.dial(name)
		publishNumbered(ctx, t, c, "pay", 10, 13)
		again, err := c.Publish(ctx, msg)
		if err != nil {
			t.Fatalf("retry through %s: %v", name, err)
		}
		if !again.Duplicate || again.Offset != ack.Offset {
			t.Fatalf("retry through %s: %+v, want the duplicate of offset %d", name, again, ack.Offset)
		}
		c.Close()
	}
	retried, err := dialNode(t, m.nodes[survivors[1]], client.Options{}).Publish(ctx, inFlight)
	if err != nil {
		t.Fatalf("retry of the in-flight publish: %v", err)
	}
	recs := checkIdentical(t, []*Node{m.nodes[survivors[0]], m.nodes[survivors[1]]}, "pay", 13)
	copies := 0
	for _, r := range recs {
		if string(r.Payload) == "in-flight" {
			copies++
			if r.Offset != retried.Offset {
				t.Fatalf("the retry was answered with offset %d, the record is at %d", retried.Offset, r.Offset)
			}
		}
	}
	if copies != 1 {
		t.Fatalf("%d copies of the in-flight publish after its retry", copies)
	}
	for i, sub := range live {
		for j, d := range readAll(t, sub, 13, 15*time.Second) {
			if d.offset != uint64(j) {
				t.Fatalf("subscription on %s across the leader change: offset %d at %d", survivors[i], d.offset, j)
			}
		}
	}

	// A follower serves a subscription from its own log.
	follower := survivors[0]
	if leaderOf(m.nodes[follower], "pay") == follower {
		follower = survivors[1]
	}
	sc := m.dial(follower)
	sub, err := sc.Subscribe(ctx, "pay", client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, sub, 13, 15*time.Second)
	for i, d := range got {
		if d.offset != uint64(i) {
			t.Fatalf("follower %s served offset %d at %d", follower, d.offset, i)
		}
	}
	sc.Close()

	// The stopped node restarts and catches up (joining through a survivor: it left the
	// pool when it stopped, and the first node was started with nothing to join).
	cfg := m.cfgs[lead]
	cfg.Join = []string{m.nodes[survivors[0]].Gossip().LANAddr()}
	m.cfgs[lead] = cfg
	m.restart(lead)
	all := []*Node{m.nodes["eu-1"], m.nodes["eu-2"], m.nodes["eu-3"]}
	checkIdentical(t, all, "pay", 13)
}

func TestReplicatedNoQuorumRefuses(t *testing.T) {
	m, ctx := newSeededRegion(t, "q", 3, 60*time.Second)
	// A publish is acknowledged once a quorum has it: eu-1 may be the one replica that has not
	// applied the seed yet, and with the others closed it never would.
	testlog.WaitFor(t, 10*time.Second, "eu-1 to apply the 3 seeded records", func() bool {
		_, next, _ := m.nodes["eu-1"].Log().Bounds("q")
		return next == 3
	})
	m.nodes["eu-2"].Close()
	m.nodes["eu-3"].Close()
	c := m.dial("eu-1")
	defer c.Close()
	_, err := c.Publish(ctx, client.Message{Topic: "q", Payload: []byte("x")})
	if codeOf(err) != client.CodeUnavailable {
		t.Fatalf("publish without quorum: %v, want unavailable", err)
	}
	if !containsAll(err.Error(), `"q"`, "eu-2", "eu-3", "quorum") {
		t.Fatalf("the refusal names neither the topic nor the replicas it lacks: %v", err)
	}
	if _, next, _ := m.nodes["eu-1"].Log().Bounds("q"); next != 3 {
		t.Fatalf("log of q has %d records after the refusal, want 3", next)
	}
}

// newMixedMesh starts region eu with three replicated nodes (Replicas 3) and region us with
// one single-copy node, joined over WAN gossip.
func newMixedMesh(t *testing.T) *regionMesh {
	t.Helper()
	m := newMesh(t, []string{"eu", "us"})
	for _, name := range []string{"eu-1", "eu-2", "eu-3", "us-1"} {
		cfg := m.config(name, name[:2])
		if cfg.Region == "eu" {
			cfg.Replicas, cfg.Raft = 3, TestRaftSettings()
		}
		m.add(name, cfg)
	}
	m.waitReady()
	return m
}

// originCounts counts n's records of topic by origin region and origin offset.
func originCounts(t *testing.T, n *Node, topic string) map[string]map[uint64]int {
	out := map[string]map[uint64]int{}
	for _, r := range logOf(t, n, topic) {
		o := r.OriginRegion
		if out[o] == nil {
			out[o] = map[uint64]int{}
		}
		off := r.OriginOffset
		if o == "" {
			off = r.Offset
		}
		out[o][off]++
	}
	return out
}

// TestReplicatedMirrorAcrossLeaderChange mirrors a topic both ways between a replicated
// region (eu) and a single-copy one (us) while eu's leader of the topic is stopped: every
// record arrives exactly once on both sides.
func TestReplicatedMirrorAcrossLeaderChange(t *testing.T) {
	m := newMixedMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const topic = "mx.t"
	// Subscribers in both regions make each mirror the other's records.
	var subs []*client.Subscription
	for _, name := range []string{"eu-1", "us-1"} {
		c := m.dial(name)
		defer c.Close()
		sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	eu, us := m.dial("eu-2"), m.dial("us-1")
	publishNumbered(ctx, t, eu, topic, 0, 20)
	publishNumbered(ctx, t, us, topic, 0, 10)
	eu.Close()
	var lead string
	testlog.WaitFor(t, 15*time.Second, "us records mirrored into eu", func() bool {
		lead = leaderOf(m.nodes["eu-1"], topic)
		return len(originCounts(t, m.nodes["eu-1"], topic)["us"]) == 10 && lead != ""
	})
	m.nodes[lead].Close()
	var survivors []*Node
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		if name != lead {
			survivors = append(survivors, m.nodes[name])
		}
	}
	c := dialNode(t, survivors[0], client.Options{})
	defer c.Close()
	publishNumbered(ctx, t, c, topic, 20, 40)
	publishNumbered(ctx, t, us, topic, 10, 20)
	us.Close()
	check := func(n *Node, region string, want int) bool {
		counts := originCounts(t, n, topic)[region]
		if len(counts) != want {
			return false
		}
		for off, k := range counts {
			if k != 1 {
				t.Fatalf("%s: record of origin %s offset %d stored %d times", n.Name(), region, off, k)
			}
		}
		return true
	}
	testlog.WaitFor(t, 30*time.Second, "eu's 40 records in us, exactly once", func() bool { return check(m.nodes["us-1"], "eu", 40) })
	for _, n := range survivors {
		testlog.WaitFor(t, 30*time.Second, "us's 20 records in "+n.Name()+", exactly once", func() bool { return check(n, "us", 20) })
	}
	checkIdentical(t, survivors, topic, 60)
}

// TestReplicatedDurableConsumer: a durable consumer's ACKs on a replicated topic are
// set-position entries of its group: every replica stores the position, and the consumer
// resumes from it through any node.
func TestReplicatedDurableConsumer(t *testing.T) {
	m, ctx := newSeededRegion(t, "jobs", 10, 60*time.Second)
	consume := func(via string, count int, ack bool) []uint64 {
		c := m.dial(via)
		defer c.Close()
		sub, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{Durable: "worker"})
		if err != nil {
			t.Fatalf("via %s: %v", via, err)
		}
		defer sub.Close()
		var got []uint64
		for range count {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("via %s: %v", via, err)
			}
			got = append(got, rec.Offset)
			if ack && rec.Offset < 5 {
				if err := sub.Ack(rec); err != nil {
					t.Fatal(err)
				}
			}
		}
		return got
	}
	consume("eu-2", 10, true)
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		m.waitPosition(name, "worker", "jobs", 4)
	}
	if got := consume("eu-3", 5, false); !slices.Equal(got, []uint64{5, 6, 7, 8, 9}) {
		t.Fatalf("resumed at %v, want 5-9", got)
	}
}

// TestReplicatedMetrics: the per-group raft series exist, one leader among the nodes.
func TestReplicatedMetrics(t *testing.T) {
	m, _ := newSeededRegion(t, "met", 3, 30*time.Second)
	// The series are per group: the label of the group holding met.
	var label string
	testlog.WaitFor(t, 10*time.Second, "met placed on eu-1", func() bool {
		rt := m.nodes["eu-1"].rep.lookup("met")
		if rt != nil {
			label = m.nodes["eu-1"].rep.groupLabel(rt.group)
		}
		return rt != nil
	})
	testlog.WaitFor(t, 10*time.Second, "one leader of met's group in the metrics", func() bool {
		leaders := 0
		for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
			fams, err := m.nodes[name].Gatherer().Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fams {
				if f.GetName() != "quicmq_raft_group_leader" {
					continue
				}
				for _, s := range f.GetMetric() {
					if s.GetLabel()[0].GetValue() == label && s.GetGauge().GetValue() == 1 {
						leaders++
					}
				}
			}
		}
		return leaders == 1
	})
	// eu-1's series come from its own observation of the groups, every ObserveInterval: the
	// leader's may be in the metrics above before eu-1 first observed met's group.
	testlog.WaitForErr(t, 10*time.Second, "eu-1's per-group raft series", func() error {
		fams, err := m.nodes["eu-1"].Gatherer().Gather()
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, f := range fams {
			seen[f.GetName()] = true
		}
		for _, want := range []string{"quicmq_raft_group_term", "quicmq_raft_group_commit_index", "quicmq_raft_group_applied_index", "quicmq_raft_groups_below_quorum",
			"quicmq_raft_rounds_total", "quicmq_raft_syncs_total", "quicmq_raft_sync_wait_seconds_total"} {
			if !seen[want] {
				return fmt.Errorf("no %s series", want)
			}
		}
		return nil
	})
}

// publishRetrying publishes records from..to-1 of topic as publishNumbered does, each with
// a producer ID and sequence, again while it is refused as unavailable (a new topic's first
// election, a leader change): a retry is stored once.
func publishRetrying(ctx context.Context, t *testing.T, c *client.Conn, topic string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		for {
			_, err := c.Publish(ctx, client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%s-%d", topic, i),
				ProducerID: "retrying-" + topic, Sequence: uint64(i)})
			var ce *client.Error
			if err == nil {
				break
			}
			if !errors.As(err, &ce) || ce.Code != client.CodeUnavailable || ctx.Err() != nil {
				t.Fatalf("publish %s #%d: %v", topic, i, err)
			}
			t.Logf("publish %s #%d, again: %v", topic, i, err)
		}
	}
}

// TestReplicatedRegionLargerThanReplicas: in a region of four nodes with Replicas 3, the
// fourth joins the metadata group as a learner and topics are placed on it too; before it has
// caught up it relays to a voter, which passes publishes on to the leader; every node serves
// every topic, each held by three of the four.
func TestReplicatedRegionLargerThanReplicas(t *testing.T) {
	m := newWideRegion(t) // widegroup_test.go
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := m.dial("eu-4")
	defer c.Close()
	sub, err := c.Subscribe(ctx, "out.t", client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	publishRetrying(ctx, t, c, "out.t", 0, 10)
	for i, d := range readAll(t, sub, 10, 15*time.Second) {
		if d.offset != uint64(i) || d.payload != fmt.Sprintf("out.t-%d", i) {
			t.Fatalf("through eu-4: %+v at %d", d, i)
		}
	}
	r4 := m.nodes["eu-4"].rep
	testlog.WaitFor(t, 30*time.Second, "eu-4 to become a learner of the metadata group that has read its placements", func() bool {
		r4.mu.Lock()
		defer r4.mu.Unlock()
		return r4.mu.formed && r4.mu.outside == nil && slices.Contains(r4.mu.learners, r4.id)
	})
	topics := make([]string, 12)
	for i := range topics {
		topics[i] = fmt.Sprintf("wide.t%d", i)
	}
	for i, topic := range topics {
		pc := m.dial(fmt.Sprintf("eu-%d", i%4+1))
		publishRetrying(ctx, t, pc, topic, 0, 3)
		pc.Close()
	}
	holds := map[string]int{}
	for _, topic := range topics {
		list, err := c.Topics(ctx, topic)
		if err != nil || len(list) != 1 || len(list[0].Replicas) != 3 {
			t.Fatalf("%s listed through eu-4: %+v, %v", topic, list, err)
		}
		var nodes []*Node
		for _, name := range list[0].Replicas {
			holds[name]++
			nodes = append(nodes, m.nodes[name])
		}
		checkIdentical(t, nodes, topic, 3)
	}
	if holds["eu-4"] == 0 {
		t.Fatalf("eu-4 holds none of %d topics (replicas per node: %v)", len(topics), holds)
	}
	t.Logf("replicas per node over %d topics: %v", len(topics), holds)

	// A wildcard subscription through any node gets every topic's records once, each topic
	// in order: the node's own replicas from its log, the others from an upstream.
	for i := 1; i <= 4; i++ {
		via := fmt.Sprintf("eu-%d", i)
		wc := m.dial(via)
		sub, err := wc.Subscribe(ctx, "wide.>", client.SubscribeOptions{From: client.Earliest})
		if err != nil {
			t.Fatalf("wide.> via %s: %v", via, err)
		}
		seen := map[string][]uint64{}
		for _, d := range readAll(t, sub, 3*len(topics), 20*time.Second) {
			seen[d.topic] = append(seen[d.topic], d.offset)
		}
		for _, topic := range topics {
			if !slices.Equal(seen[topic], []uint64{0, 1, 2}) {
				t.Fatalf("wide.> via %s: %s delivered at %v, want 0 1 2 (all: %v)", via, topic, seen[topic], seen)
			}
		}
		sub.Close()
		wc.Close()
	}

	// A durable consumer through a node that holds no replica of its topic is served by the
	// topic's leader, which that node learns from a replica; it resumes where it acked.
	var topic, via string
	for _, tp := range topics {
		list, err := c.Topics(ctx, tp)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 4 && via == ""; i++ {
			if name := fmt.Sprintf("eu-%d", i); !slices.Contains(list[0].Replicas, name) {
				topic, via = tp, name
			}
		}
		if via != "" {
			break
		}
	}
	consume := func(count int, ack bool) []uint64 {
		dc := m.dial(via)
		defer dc.Close()
		sub, err := dc.Subscribe(ctx, topic, client.SubscribeOptions{Durable: "wide-worker"})
		if err != nil {
			t.Fatalf("durable on %s via %s: %v", topic, via, err)
		}
		defer sub.Close()
		var got []uint64
		for range count {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("durable on %s via %s: %v", topic, via, err)
			}
			got = append(got, rec.Offset)
			if ack && rec.Offset < 2 {
				if err := sub.Ack(rec); err != nil {
					t.Fatal(err)
				}
			}
		}
		return got
	}
	consume(3, true)
	held, err := c.Topics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range held[0].Replicas {
		m.waitPosition(name, "wide-worker", topic, 1)
	}
	if got := consume(1, false); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("durable on %s via %s resumed at %v, want 2", topic, via, got)
	}
	list, err := c.Topics(ctx, "out.t")
	if err != nil || len(list) != 1 || len(list[0].Replicas) != 3 {
		t.Fatalf("listing through eu-4: %+v, %v", list, err)
	}
}

// TestReplicatedDurableFollowsLeaderWithReconnect: a durable consumer connected to a follower
// is served by the topic's leader; when the leader is lost the node ends the subscription as
// unavailable ("subscribe again"), and a Conn with Reconnect makes it again at once, through
// the same node, to the new leader: it resumes after its last acknowledged record.
func TestReplicatedDurableFollowsLeaderWithReconnect(t *testing.T) {
	m, ctx := newSeededRegion(t, "moves", 20, 90*time.Second)
	var lead string
	testlog.WaitFor(t, 10*time.Second, "a leader of moves", func() bool { lead = leaderOf(m.nodes["eu-1"], "moves"); return lead != "" })
	var via string
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		if name != lead && via == "" {
			via = name
		}
	}
	c := dialNode(t, m.nodes[via], client.Options{Reconnect: true})
	defer c.Close()
	sub, err := c.Subscribe(ctx, "moves", client.SubscribeOptions{Durable: "mover"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 10 {
		rec, err := sub.Next(ctx)
		if err != nil || rec.Offset != uint64(i) {
			t.Fatalf("record %d: %+v, %v", i, rec, err)
		}
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		if name != lead {
			m.waitPosition(name, "mover", "moves", 9)
		}
	}
	m.nodes[lead].Close()
	for i := 10; i < 20; i++ {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after the leader %s was lost, record %d: %v", lead, i, err)
		}
		if rec.Offset != uint64(i) {
			t.Fatalf("after the leader %s was lost: offset %d, want %d (resumed after the last ack)", lead, rec.Offset, i)
		}
	}
}

// TestReplicatedCreateTopicThroughEveryNode: `quicmq topics create` answers with the topic's
// replicas through any node of a replicated region (a follower's answer was buffered and
// never sent).
func TestReplicatedCreateTopicThroughEveryNode(t *testing.T) {
	m := newReplicatedRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		c := m.dial(name)
		topic := "made." + strings.ReplaceAll(name, "-", "")
		ti, err := c.CreateTopic(ctx, topic, client.TopicOptions{})
		c.Close()
		if err != nil || len(ti.Replicas) != 3 {
			t.Fatalf("create %s through %s: %+v, %v", topic, name, ti, err)
		}
	}
}
