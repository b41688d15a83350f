package node

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
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

// joinReplicatedGroup subscribes a member through node via, retrying while the region
// finds the topic's new leader, and starts its reader, which sends what it reads to out
// until the subscription ends.
func joinReplicatedGroup(ctx context.Context, t *testing.T, m *regionMesh, via string, id int, wg *sync.WaitGroup, out chan<- memberRecord) *groupMember {
	t.Helper()
	var last error
	for attempt := 0; ctx.Err() == nil; attempt++ {
		c := m.dial(via)
		sub, err := c.Subscribe(ctx, "work", client.SubscribeOptions{Group: "g", AckWait: time.Minute, MaxDeliver: 10})
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

// groupStates is group g's stored state of "work" on each node.
func groupStates(t *testing.T, nodes []*Node) map[string]*wal.GroupState {
	t.Helper()
	out := map[string]*wal.GroupState{}
	for _, n := range nodes {
		_, states, _, err := n.Log().Group("g")
		if err != nil {
			t.Fatalf("%s: load group: %v", n.Name(), err)
		}
		if st := states["work"]; st != nil {
			c := *st
			c.Updated = time.Time{} // compared apart: each replica keeps the entry's time alike
			out[n.Name()] = &c
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

// waitSameState waits until every node stores want as g's state of "work".
func waitSameState(t *testing.T, nodes []*Node, want func(*wal.GroupState) bool, what string) *wal.GroupState {
	t.Helper()
	var got map[string]*wal.GroupState
	deadline := time.Now().Add(15 * time.Second)
	for {
		got = groupStates(t, nodes)
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
			return first
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, n := range nodes {
				lines = append(lines, n.Name()+": "+showState(got[n.Name()]))
			}
			t.Fatalf("the replicas do not store %s:\n%s", what, strings.Join(lines, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReplicatedGroupLeaderLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		// onHome: the members are connected to the node serving the group (the topic's
		// leader), and resume through the others; else to the two followers, relayed.
		onHome bool
	}{{"members relayed from followers", false}, {"members on the serving node", true}} {
		t.Run(tc.name, func(t *testing.T) { testReplicatedGroupLeaderLoss(t, tc.onHome) })
	}
}

func testReplicatedGroupLeaderLoss(t *testing.T, onHome bool) {
	const before, after = 30, 6
	// A member holds at most 6 records unacknowledged: the first to join cannot take them
	// all (a third stay unacknowledged), so both get some, whatever the timing.
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
		c.Groups.MemberPending = 6
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pc := m.dial("eu-1")
	publishNumbered(ctx, t, pc, "work", 0, before)
	pc.Close()
	all := []string{"eu-1", "eu-2", "eu-3"}
	var lead string
	waitFor(t, 10*time.Second, "a leader of work", func() bool { lead = leaderOf(m.nodes["eu-1"], "work"); return lead != "" })
	var others []string
	for _, name := range all {
		if name != lead {
			others = append(others, name)
		}
	}
	via := others
	if onHome {
		via = []string{lead, lead}
	}
	t.Logf("leader (serving the group) %s; members through %v", lead, via)

	mctx, stop := context.WithCancel(ctx)
	var readers sync.WaitGroup
	recs := make(chan memberRecord, 64)
	members := []*groupMember{
		joinReplicatedGroup(mctx, t, m, via[0], 0, &readers, recs),
		joinReplicatedGroup(mctx, t, m, via[1], 1, &readers, recs),
	}

	// Each record once; a member acknowledges those whose offset is not a multiple of 3, then
	// commits: an ACK is confirmed once its member's Commit returns nil.
	seen := map[uint64]bool{}
	byMember := map[int][]uint64{}
	for len(seen) < before {
		select {
		case mr := <-recs:
			if seen[mr.rec.Offset] {
				t.Fatalf("offset %d delivered twice while no member failed", mr.rec.Offset)
			}
			seen[mr.rec.Offset] = true
			byMember[mr.m.id] = append(byMember[mr.m.id], mr.rec.Offset)
			if mr.rec.Offset%3 != 0 {
				if err := mr.m.sub.Ack(mr.rec); err != nil {
					t.Fatal(err)
				}
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d records delivered before the deadline", len(seen), before)
		}
	}
	confirmed := map[uint64]bool{}
	var unacked []uint64
	for _, gm := range members {
		if err := gm.sub.Commit(ctx); err != nil {
			t.Fatalf("member %d: commit: %v", gm.id, err)
		}
		for _, off := range byMember[gm.id] {
			if off%3 != 0 {
				confirmed[off] = true
			} else {
				unacked = append(unacked, off)
			}
		}
	}
	slices.Sort(unacked)
	t.Logf("member 0 got %v, member 1 got %v; %d confirmed, unacknowledged %v", byMember[0], byMember[1], len(confirmed), unacked)
	if len(byMember[0]) == 0 || len(byMember[1]) == 0 {
		t.Fatal("one member got every record: the group was not shared")
	}

	// The node serving the group (and leading the topic) goes; the members' streams end.
	m.nodes[lead].Close()
	stop()
	for _, gm := range members {
		gm.conn.Close()
	}
	readers.Wait()
	survivors := []*Node{m.nodes[others[0]], m.nodes[others[1]]}
	waitFor(t, 20*time.Second, "a new leader among "+strings.Join(others, ","), func() bool {
		l := leaderOf(survivors[0], "work")
		return l != "" && l != lead
	})
	c := m.dial(others[0])
	publishNumbered(ctx, t, c, "work", before, before+after)
	c.Close()

	// The members resume through the survivors: every unacknowledged record comes again, the
	// new ones once, and no confirmed one.
	mctx, stop = context.WithCancel(ctx)
	defer stop()
	recs = make(chan memberRecord, 64)
	members = []*groupMember{
		joinReplicatedGroup(mctx, t, m, others[0], 0, &readers, recs),
		joinReplicatedGroup(mctx, t, m, others[1], 1, &readers, recs),
	}
	want := map[uint64]bool{}
	for _, off := range unacked {
		want[off] = true
	}
	for off := uint64(before); off < before+after; off++ {
		want[off] = true
	}
	got := map[uint64]memberRecord{}
	var again []uint64
	for len(got) < len(want) {
		select {
		case mr := <-recs:
			off := mr.rec.Offset
			switch {
			case confirmed[off]:
				again = append(again, off)
			case !want[off]:
				t.Fatalf("offset %d delivered after the failover: it is neither unacknowledged nor new", off)
			case got[off].m != nil:
				t.Fatalf("offset %d delivered twice after the failover while no member failed", off)
			default:
				got[off] = mr
				if off >= before { // the new ones at once: the old ones fill the members' room
					if err := mr.m.sub.Ack(mr.rec); err != nil {
						t.Fatal(err)
					}
				}
			}
		case <-ctx.Done():
			t.Fatalf("after the failover %d of %d records delivered (%v); confirmed ones delivered again: %v", len(got), len(want), got, again)
		}
	}
	if len(again) > 0 {
		t.Fatalf("records whose ACK was confirmed before the failover were delivered again: %v", again)
	}
	// The new ones acknowledged, the replicas store the old ones outstanding, each delivered
	// twice now (once before, once after: the count carried over).
	for _, gm := range members {
		if err := gm.sub.Commit(ctx); err != nil {
			t.Fatalf("member %d: commit after the failover: %v", gm.id, err)
		}
	}
	waitSameState(t, survivors, func(st *wal.GroupState) bool {
		if st.Next != before+after || len(st.Entries) != len(unacked) {
			return false
		}
		for i, e := range st.Entries {
			if e.Offset != unacked[i] || e.Deliveries != 2 {
				return false
			}
		}
		return true
	}, fmt.Sprintf("next %d, outstanding %v each delivered twice", before+after, unacked))

	// All acknowledged: nothing left to deliver, on every replica, the restarted one too.
	for _, off := range unacked {
		if err := got[off].m.sub.Ack(got[off].rec); err != nil {
			t.Fatal(err)
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
	waitSameState(t, survivors, done, "every record done")
	stop()
	for _, gm := range members {
		gm.conn.Close()
	}
	readers.Wait()
	cfg := m.cfgs[lead]
	cfg.Join = []string{survivors[0].Gossip().LANAddr()}
	m.cfgs[lead] = cfg
	m.restart(lead)
	waitSameState(t, []*Node{m.nodes["eu-1"], m.nodes["eu-2"], m.nodes["eu-3"]}, done, "every record done (the restarted replica too)")
}
