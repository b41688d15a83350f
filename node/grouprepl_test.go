package node

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// A consumer group on a replicated topic across the loss of the node serving it (its
// topic's leader). The checker: no record whose ACK was confirmed (Commit returned nil) is
// delivered again; every record not acknowledged is; the stored delivery counts carry over;
// every replica stores the same state at the end. It fails on the build that stores group
// state on the serving node only:
//
//	go test -tags quicmq_broken_group -run TestReplicatedGroupLeaderLoss ./node

// groupMember is one member subscription feeding a shared channel.
type groupMember struct {
	id   int
	conn *client.Conn
	sub  *client.Subscription
}

type memberRecord struct {
	m   *groupMember
	rec client.Record
}

func recKey(r client.Record) string { return fmt.Sprintf("%s@%d", r.Topic, r.Offset) }

// joinReplicatedGroup subscribes a member of group g on pattern through node via, retrying
// while the region finds the topic's new leader, and starts its reader, which sends what it
// reads to out until the subscription ends.
func joinReplicatedGroup(ctx context.Context, t *testing.T, m *regionMesh, via, pattern string, id int, wg *sync.WaitGroup, out chan<- memberRecord) *groupMember {
	t.Helper()
	var last error
	for attempt := 0; ctx.Err() == nil; attempt++ {
		c := m.dial(via)
		sub, err := c.Subscribe(ctx, pattern, client.SubscribeOptions{Group: "g", AckWait: time.Minute, MaxDeliver: 10})
		if err == nil {
			gm := &groupMember{id: id, conn: c, sub: sub}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					rec, err := sub.Next(ctx)
					if err != nil {
						return
					}
					select {
					case out <- memberRecord{gm, rec}:
					case <-ctx.Done():
						return
					}
				}
			}()
			return gm
		}
		c.Close()
		last = err
		t.Logf("member %d via %s, attempt %d: %v", id, via, attempt, err)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	t.Fatalf("member %d could not join through %s: %v", id, via, last)
	return nil
}

// groupStates is group g's stored state of topic on each node.
func groupStates(t *testing.T, nodes []*Node, topic string) map[string]*wal.GroupState {
	t.Helper()
	out := map[string]*wal.GroupState{}
	for _, n := range nodes {
		_, states, _, err := n.Log().Group("g")
		if err != nil {
			t.Fatalf("%s: load group: %v", n.Name(), err)
		}
		if st := states[topic]; st != nil {
			out[n.Name()] = st
		}
	}
	return out
}

func showState(st *wal.GroupState) string {
	if st == nil {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "floor %d next %d outstanding", st.Floor, st.Next)
	for _, e := range st.Entries {
		fmt.Fprintf(&b, " %d(x%d)", e.Offset, e.Deliveries)
	}
	return b.String()
}

// waitSameState waits until every node stores the same state of topic for group g (its
// time too: each replica stores the entry's), and want holds for it.
func waitSameState(t *testing.T, nodes []*Node, topic string, want func(*wal.GroupState) bool, what string) {
	t.Helper()
	testlog.WaitForErr(t, 15*time.Second, fmt.Sprintf("the replicas to store %s of %s", what, topic), func() error {
		got := groupStates(t, nodes, topic)
		var first *wal.GroupState
		same := len(got) == len(nodes)
		for _, n := range nodes {
			st := got[n.Name()]
			if first == nil {
				first = st
			}
			same = same && st != nil && reflect.DeepEqual(st, first) && want(st)
		}
		if same {
			return nil
		}
		var lines []string
		for _, n := range nodes {
			lines = append(lines, n.Name()+": "+showState(got[n.Name()]))
		}
		return errors.New(strings.Join(lines, "\n"))
	})
}

func TestReplicatedGroupLeaderLoss(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pattern string
		topics  []string
		// onHome: the members are connected to the node serving the group, and resume
		// through the others; else to the two other nodes, relayed.
		onHome bool
	}{
		// A group of one topic lives on the topic's leader.
		{"one topic, members relayed", "work", []string{"work"}, false},
		{"one topic, members on the serving node", "work", []string{"work"}, true},
		// A wildcard group lives on the rendezvous winner of its name; each topic's state is
		// proposed by the topic's leader.
		{"wildcard, members relayed", "jobs.*", []string{"jobs.a", "jobs.b", "jobs.c"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { testReplicatedGroupLeaderLoss(t, tc.pattern, tc.topics, tc.onHome) })
	}
}

func testReplicatedGroupLeaderLoss(t *testing.T, pattern string, topics []string, onHome bool) {
	const before, after = 30, 6 // records per topic
	// A member holds at most 6 records per topic unacknowledged: as a third stay
	// unacknowledged, the first to join cannot take them all, so both get some, whatever
	// the timing; the two hold every unacknowledged one.
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
		c.Groups.MemberPending = 6 * len(topics)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pc := m.dial("eu-1")
	for _, topic := range topics {
		publishNumbered(ctx, t, pc, topic, 0, before)
	}
	pc.Close()
	all := []string{"eu-1", "eu-2", "eu-3"}
	var home string
	if len(topics) == 1 {
		testlog.WaitFor(t, 10*time.Second, "a leader of "+topics[0], func() bool { home = leaderOf(m.nodes["eu-1"], topics[0]); return home != "" })
	} else {
		home = m.nodes["eu-1"].consumerHome("g")
	}
	var others []string
	for _, name := range all {
		if name != home {
			others = append(others, name)
		}
	}
	via := others
	if onHome {
		via = []string{home, home}
	}
	var leaders []string
	for _, topic := range topics {
		leaders = append(leaders, topic+": "+leaderOf(m.nodes["eu-1"], topic))
	}
	t.Logf("group %q served by %s; leaders %v; members through %v", pattern, home, leaders, via)

	mctx, stop := context.WithCancel(ctx)
	var readers sync.WaitGroup
	recs := make(chan memberRecord, 64)
	members := []*groupMember{
		joinReplicatedGroup(mctx, t, m, via[0], pattern, 0, &readers, recs),
		joinReplicatedGroup(mctx, t, m, via[1], pattern, 1, &readers, recs),
	}

	// Each record once; a member acknowledges those whose offset is not a multiple of 3, then
	// commits: an ACK is confirmed once its member's Commit returns nil.
	seen := map[string]bool{}
	byMember := map[int][]client.Record{}
	for len(seen) < before*len(topics) {
		select {
		case mr := <-recs:
			k := recKey(mr.rec)
			if seen[k] {
				t.Fatalf("%s delivered twice while no member failed", k)
			}
			seen[k] = true
			byMember[mr.m.id] = append(byMember[mr.m.id], mr.rec)
			if mr.rec.Offset%3 != 0 {
				if err := mr.m.sub.Ack(mr.rec); err != nil {
					t.Fatal(err)
				}
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d records delivered before the deadline", len(seen), before*len(topics))
		}
	}
	confirmed := map[string]bool{}
	unacked := map[string][]uint64{} // by topic, ascending
	for _, gm := range members {
		if err := gm.sub.Commit(ctx); err != nil {
			t.Fatalf("member %d: commit: %v", gm.id, err)
		}
		for _, r := range byMember[gm.id] {
			if r.Offset%3 != 0 {
				confirmed[recKey(r)] = true
			} else {
				unacked[r.Topic] = append(unacked[r.Topic], r.Offset)
			}
		}
	}
	for _, offs := range unacked {
		slices.Sort(offs)
	}
	if len(byMember[0]) == 0 || len(byMember[1]) == 0 {
		t.Fatalf("one member got every record (member 0: %d, member 1: %d): the group was not shared", len(byMember[0]), len(byMember[1]))
	}
	t.Logf("member 0 got %d, member 1 got %d; %d confirmed, unacknowledged %v", len(byMember[0]), len(byMember[1]), len(confirmed), unacked)

	// The node serving the group goes; the members' streams end.
	m.nodes[home].Close()
	stop()
	for _, gm := range members {
		gm.conn.Close()
	}
	readers.Wait()
	survivors := []*Node{m.nodes[others[0]], m.nodes[others[1]]}
	for _, topic := range topics {
		testlog.WaitFor(t, 20*time.Second, "a leader of "+topic+" among "+strings.Join(others, ","), func() bool {
			l := leaderOf(survivors[0], topic)
			return l != "" && l != home
		})
	}
	c := m.dial(others[0])
	for _, topic := range topics {
		publishNumbered(ctx, t, c, topic, before, before+after)
	}
	c.Close()

	// The members resume through the survivors: every unacknowledged record comes again, the
	// new ones once (acknowledged at once), and no confirmed one.
	mctx, stop = context.WithCancel(ctx)
	defer stop()
	recs = make(chan memberRecord, 64)
	members = []*groupMember{
		joinReplicatedGroup(mctx, t, m, others[0], pattern, 0, &readers, recs),
		joinReplicatedGroup(mctx, t, m, others[1], pattern, 1, &readers, recs),
	}
	want := map[string]bool{}
	for topic, offs := range unacked {
		for _, off := range offs {
			want[fmt.Sprintf("%s@%d", topic, off)] = true
		}
	}
	for _, topic := range topics {
		for off := before; off < before+after; off++ {
			want[fmt.Sprintf("%s@%d", topic, off)] = true
		}
	}
	got := map[string]memberRecord{}
	for len(got) < len(want) {
		select {
		case mr := <-recs:
			k := recKey(mr.rec)
			switch {
			case confirmed[k]:
				t.Fatalf("%s, whose ACK was confirmed before the failover, was delivered again (after %d of the %d records expected)", k, len(got), len(want))
			case !want[k]:
				t.Fatalf("%s delivered after the failover: it is neither unacknowledged nor new", k)
			case got[k].m != nil:
				t.Fatalf("%s delivered twice after the failover while no member failed", k)
			default:
				got[k] = mr
				if mr.rec.Offset >= before { // the new ones at once: the old ones fill the members' room
					if err := mr.m.sub.Ack(mr.rec); err != nil {
						t.Fatal(err)
					}
				}
			}
		case <-ctx.Done():
			t.Fatalf("after the failover %d of %d records delivered", len(got), len(want))
		}
	}
	// The new ones acknowledged, the replicas store the old ones outstanding, each delivered
	// twice now (once before, once after: the count carried over).
	for _, gm := range members {
		if err := gm.sub.Commit(ctx); err != nil {
			t.Fatalf("member %d: commit after the failover: %v", gm.id, err)
		}
	}
	for _, topic := range topics {
		offs := unacked[topic]
		waitSameState(t, survivors, topic, func(st *wal.GroupState) bool {
			if st.Next != before+after || len(st.Entries) != len(offs) {
				return false
			}
			for i, e := range st.Entries {
				if e.Offset != offs[i] || e.Deliveries != 2 {
					return false
				}
			}
			return true
		}, fmt.Sprintf("next %d, outstanding %v each delivered twice", before+after, offs))
	}

	// All acknowledged: nothing left to deliver, on every replica, the restarted one too.
	for k, mr := range got {
		if mr.rec.Offset < before {
			if err := mr.m.sub.Ack(mr.rec); err != nil {
				t.Fatalf("ack %s: %v", k, err)
			}
		}
	}
	for _, gm := range members {
		if err := gm.sub.Commit(ctx); err != nil {
			t.Fatalf("member %d: last commit: %v", gm.id, err)
		}
	}
	done := func(st *wal.GroupState) bool {
		return st.Floor == before+after && st.Next == before+after && len(st.Entries) == 0
	}
	for _, topic := range topics {
		waitSameState(t, survivors, topic, done, "every record done")
	}
	stop()
	for _, gm := range members {
		gm.conn.Close()
	}
	readers.Wait()
	m.restart(home)
	for _, topic := range topics {
		waitSameState(t, []*Node{m.nodes["eu-1"], m.nodes["eu-2"], m.nodes["eu-3"]}, topic, done, "every record done (the restarted replica too)")
	}
}

// TestReplicatedGroupManage: a reset and a removal of a group on a replicated topic go
// through the topic's raft group: a replica that was down during the reset catches it up
// from the log, and after the removal no replica keeps the group.
func TestReplicatedGroupManage(t *testing.T) {
	m := newReplicatedRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := m.dial("eu-1")
	publishNumbered(ctx, t, c, "work", 0, 10)
	c.Close()
	var lead string
	testlog.WaitFor(t, 10*time.Second, "a leader of work", func() bool { lead = leaderOf(m.nodes["eu-1"], "work"); return lead != "" })
	var followers []string
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		if name != lead {
			followers = append(followers, name)
		}
	}
	entry, down := followers[0], followers[1]
	t.Logf("leader %s; requests through %s; %s down during the reset", lead, entry, down)

	mc := m.dial(entry)
	sub, err := mc.Subscribe(ctx, "work", client.SubscribeOptions{Group: "g", AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset < 6 {
			if err := sub.Ack(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mc.Close()
	nodes := func() []*Node { return []*Node{m.nodes["eu-1"], m.nodes["eu-2"], m.nodes["eu-3"]} }
	// Its last store (the member's end gives the rest back) is in every replica.
	waitSameState(t, nodes(), "work", func(st *wal.GroupState) bool {
		return st.Floor == 6 && st.Next == 10 && len(st.Entries) == 4
	}, "floor 6, next 10, 4 outstanding")

	m.nodes[down].Close()
	testlog.WaitFor(t, 20*time.Second, down+" failed as "+entry+" sees it", func() bool {
		return m.nodes[entry].place.MemberStatus(down) != gossip.StatusAlive
	})
	ac := m.dial(entry)
	if _, err := ac.ResetConsumer(ctx, "g", client.AtOffset(3), client.ManageOptions{}); err != nil {
		t.Fatalf("reset through %s: %v", entry, err)
	}
	reset := func(st *wal.GroupState) bool { return st.Floor == 3 && st.Next == 3 && len(st.Entries) == 0 }
	waitSameState(t, []*Node{m.nodes[lead], m.nodes[entry]}, "work", reset, "the reset (floor 3, none outstanding)")
	ac.Close()

	m.restart(down)
	waitSameState(t, nodes(), "work", reset, "the reset, the replica that was down too")

	// Resumed after the reset: offsets 3 to 9.
	mc = m.dial(down)
	sub, err = mc.Subscribe(ctx, "work", client.SubscribeOptions{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	for want := uint64(3); want < 10; want++ {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != want {
			t.Fatalf("after the reset got offset %d, want %d", r.Offset, want)
		}
	}
	mc.Close()

	testlog.WaitFor(t, 20*time.Second, "every node alive as "+entry+" sees it", func() bool {
		return m.nodes[entry].place.MemberStatus(down) == gossip.StatusAlive && m.nodes[entry].place.MemberStatus(lead) == gossip.StatusAlive
	})
	ac = m.dial(entry)
	defer ac.Close()
	var removed int
	testlog.WaitFor(t, 10*time.Second, "the removal (the member's end may still hold the group)", func() bool {
		removed, err = ac.DeleteConsumer(ctx, "g", client.ManageOptions{})
		return err == nil
	})
	if removed != 1 {
		t.Errorf("removal reports %d topic states, want 1", removed)
	}
	testlog.WaitFor(t, 15*time.Second, "no replica keeping group g", func() bool {
		for _, n := range nodes() {
			if _, _, ok, err := n.Log().Group("g"); ok || err != nil {
				return false
			}
		}
		return true
	})
}

// TestReplicatedGroupDeadLetterAcrossLeaderLoss: a record delivered once before the loss of
// the node serving its group (max-deliver 2) and once after reaches the dead-letter topic at
// its second NAK: its delivery count carried over, and the dead-letter record is appended
// through the dead-letter topic's raft group, so every replica has it.
func TestReplicatedGroupDeadLetterAcrossLeaderLoss(t *testing.T) {
	m, ctx := newSeededRegion(t, "work", 3, 90*time.Second)
	var lead string
	testlog.WaitFor(t, 10*time.Second, "a leader of work", func() bool { lead = leaderOf(m.nodes["eu-1"], "work"); return lead != "" })
	var others []string
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		if name != lead {
			others = append(others, name)
		}
	}
	opts := client.SubscribeOptions{Group: "g", AckWait: time.Minute, MaxDeliver: 2, DeadLetter: "work.dlq"}
	c := m.dial(others[0])
	// Placed while the region has its three nodes (a new topic needs them all), by a first
	// record.
	publishNumbered(ctx, t, c, "work.dlq", 0, 1)
	sub, err := c.Subscribe(ctx, "work", opts)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != 1 { // offset 1 stays outstanding, delivered once
			if err := sub.Ack(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m.nodes[lead].Close()
	c.Close()
	survivors := []*Node{m.nodes[others[0]], m.nodes[others[1]]}
	testlog.WaitFor(t, 20*time.Second, "a new leader of work", func() bool {
		l := leaderOf(survivors[0], "work")
		return l != "" && l != lead
	})
	var r client.Record
	testlog.WaitFor(t, 20*time.Second, "the member back, with offset 1 again", func() bool {
		c = m.dial(others[1])
		if sub, err = c.Subscribe(ctx, "work", opts); err != nil {
			t.Logf("subscribe through %s: %v", others[1], err)
			c.Close()
			return false
		}
		return true
	})
	defer c.Close()
	if r, err = sub.Next(ctx); err != nil || r.Offset != 1 {
		t.Fatalf("after the failover: %+v, %v; want offset 1 again", r, err)
	}
	if err := sub.Nak(r); err != nil { // its second delivery: max-deliver reached
		t.Fatal(err)
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range survivors {
		testlog.WaitFor(t, 15*time.Second, "the dead-letter record on "+n.Name(), func() bool {
			_, next, ok := n.Log().Bounds("work.dlq")
			return ok && next == 2
		})
		recs := logOf(t, n, "work.dlq")
		hs := map[string]string{}
		for _, h := range recs[1].Headers {
			hs[h.Key] = string(h.Value)
		}
		if hs[client.DeadLetterDeliveriesHeader] != "2" || hs["quicmq-dead-letter-offset"] != "1" || string(recs[1].Payload) != "work-1" {
			t.Fatalf("%s: dead-letter record %q with headers %v, want work-1 from offset 1 after 2 deliveries", n.Name(), recs[1].Payload, hs)
		}
	}
}
