package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/groups"
)

// publishAsync publishes count records to topic (payload "i") with up to the client's
// window of publishes in flight, and waits for every acknowledgement.
func publishAsync(t *testing.T, c *client.Conn, topic string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fs := make([]*client.Future, 0, count)
	for i := range count {
		f, err := c.PublishAsync(ctx, client.Message{Topic: topic, Payload: []byte(strconv.Itoa(i))})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		fs = append(fs, f)
	}
	for i, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// liveGroup returns the node's live group shown as name, or nil.
func liveGroup(n *Node, name string) *groups.Group {
	n.cons.mu.Lock()
	defer n.cons.mu.Unlock()
	for _, g := range n.cons.mu.groups {
		if g.Shown() == name {
			return g
		}
	}
	return nil
}

// waitGroupState waits until cond holds of a snapshot of the live group name and fails
// after timeout, describing the group.
func waitGroupState(t *testing.T, n *Node, name string, timeout time.Duration, what string, cond func(st groups.Stats) bool) {
	t.Helper()
	testlog.WaitForErr(t, timeout, what, func() error {
		g := liveGroup(n, name)
		if g == nil {
			return fmt.Errorf("no live group %q", name)
		}
		if st := g.Stats(); !cond(st) {
			return errors.New(st.String())
		}
		return nil
	})
}

// startMembers starts count members of the group of opts on pattern, reading until ctx
// ends: each record goes to each (under no lock), then is acknowledged; done (when not nil)
// runs with the member's subscription before it is closed. wg counts the members.
func startMembers(ctx context.Context, t *testing.T, n *Node, pattern string, opts client.SubscribeOptions, count int, wg *sync.WaitGroup,
	each func(member int, r client.Record), done func(member int, sub *client.Subscription)) {
	for i := range count {
		sub := joinGroup(t, dialNode(t, n, client.Options{}), pattern, opts)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := sub.Next(ctx)
				if err != nil {
					break
				}
				each(i, r)
				if err := sub.Ack(r); err != nil {
					break
				}
			}
			if done != nil {
				done(i, sub)
			}
			sub.Close()
		}()
	}
}

// awaitClosed waits until reached is closed, else fails when ctx ends with what describes.
func awaitClosed(ctx context.Context, t *testing.T, reached <-chan struct{}, what string, describe func() string) {
	t.Helper()
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatalf("%s: %s", what, describe())
	}
}

// TestGroupStoppedMemberDoesNotStall: a member that takes its MemberPending records, reads
// one and stops (never acks, its stream open, ack-wait 1 h) holds the group's floor, yet
// the four other members get every other record of 10,000 long before its ack-wait could
// pass, while the group never holds more than its window; once it closes its stream its
// records go to the others. With restart, the node is restarted mid-way (the stopped member
// then ends with it and a new one stops after the restart): nothing acknowledged before the
// restart is delivered again, and everything else is delivered.
func TestGroupStoppedMemberDoesNotStall(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) { testStoppedMember(t, restart) })
	}
}

func testStoppedMember(t *testing.T, restart bool) {
	const total, fast, window, memberPending = 10_000, 4, 1024, 256
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "n1", Region: "test", Logger: testLogger(t),
		Groups: groups.Config{Window: window, MemberPending: memberPending}}
	n, stop := startStoppable(t, cfg)
	publishAsync(t, dialNode(t, n, client.Options{}), "work", total)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // ack-wait is 1 h: no redelivery by it
	defer cancel()
	opts := client.SubscribeOptions{Group: "g", AckWait: time.Hour}

	// stopMember joins, reads one record and stops reading, holding memberPending records;
	// it returns the member's subscription and the offsets it holds.
	stopMember := func(n *Node) (*client.Subscription, map[uint64]bool) {
		sub := joinGroup(t, dialNode(t, n, client.Options{}), "work", opts)
		if _, err := sub.Next(ctx); err != nil {
			t.Fatal(err)
		}
		var offs map[uint64]bool
		waitGroupState(t, n, "g", 20*time.Second, "the stopped member holds MemberPending records", func(st groups.Stats) bool {
			for _, m := range st.Members {
				if m.Pending == memberPending {
					offs = m.Held["work"]
					return len(offs) == memberPending
				}
			}
			return false
		})
		return sub, offs
	}

	var mu sync.Mutex
	acked := map[uint64]bool{} // acknowledged (and, before a restart, committed)
	before := map[uint64]bool{}
	var want int
	reached := make(chan struct{})
	var wg sync.WaitGroup
	// drain runs the fast members until ctx ends; they ack every record they get, and
	// reached is closed once want records are acked.
	drain := func(ctx context.Context, n *Node) {
		startMembers(ctx, t, n, "work", opts, fast, &wg, func(i int, r client.Record) {
			mu.Lock()
			defer mu.Unlock()
			if before[r.Offset] {
				t.Errorf("member %d: offset %d, acknowledged before the restart, delivered again", i, r.Offset)
			}
			first := !acked[r.Offset]
			acked[r.Offset] = true
			if first && len(acked) == want {
				close(reached)
			}
		}, func(i int, sub *client.Subscription) {
			cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer ccancel()
			if err := sub.Commit(cctx); err != nil && restart {
				t.Errorf("member %d: commit: %v", i, err)
			}
		})
	}
	await := func(what string) {
		t.Helper()
		awaitClosed(ctx, t, reached, what, func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("%d of %d records acknowledged; %s", len(acked), want, dumpGroups(n))
		})
	}

	slow, slowOffs := stopMember(n)
	if restart {
		// Mid-way: the fast members ack half, commit and end; the node restarts.
		want = total / 2
		dctx, dcancel := context.WithCancel(ctx)
		drain(dctx, n)
		await("before the restart")
		dcancel()
		wg.Wait()
		waitGroupState(t, n, "g", 20*time.Second, "the floor held far below the next offset", func(st groups.Stats) bool {
			tp := st.Topics["work"]
			return tp.Next-tp.Floor > window && st.Outstanding <= window
		})
		slow.Close()
		stop()
		mu.Lock()
		for off := range acked {
			before[off] = true
		}
		mu.Unlock()
		n, _ = startStoppable(t, cfg)
		slow, slowOffs = stopMember(n)
	}
	for off := range slowOffs {
		if before[off] {
			t.Fatalf("offset %d, acknowledged before the restart, delivered again to the stopped member", off)
		}
	}
	mu.Lock()
	want = total - memberPending
	reached = make(chan struct{})
	if len(acked) == want {
		close(reached)
	}
	mu.Unlock()
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	drain(dctx, n)
	await("with the stopped member")
	mu.Lock()
	for off := range slowOffs {
		if acked[off] {
			t.Errorf("offset %d held by the stopped member went to another member", off)
		}
	}
	mu.Unlock()
	waitGroupState(t, n, "g", 20*time.Second, "the window bounds what the group holds", func(st groups.Stats) bool {
		tp := st.Topics["work"]
		return st.Outstanding == memberPending && tp.Out == memberPending && tp.Next == total
	})

	// The stopped member closes its stream: its records go to the others.
	mu.Lock()
	want = total
	reached = make(chan struct{})
	mu.Unlock()
	slow.Close()
	await("after the stopped member closed its stream")
	waitGroupState(t, n, "g", 20*time.Second, "every record done", func(st groups.Stats) bool {
		tp := st.Topics["work"]
		return st.Outstanding == 0 && tp.Floor == total
	})
	dcancel()
	wg.Wait()
	t.Logf("%d records acknowledged, %d of them before the restart; the stopped member held %d", len(acked), len(before), len(slowOffs))
}

// TestGroupStoppedMemberOrderByTopic: ordered by topic, a member that stops reading holds
// only its own topics: the others get every record of the other topics (ack-wait 1 h, so not
// by redelivery), none of its topics' records go to them while its stream is open, and the
// group holds nothing for it beyond what it took. Once it closes its stream, its topics go
// to the others, each in offset order.
func TestGroupStoppedMemberOrderByTopic(t *testing.T) {
	const topics, perTopic, fast, memberPending = 8, 1000, 3, 128
	n := newTestNode(t, func(c *Config) { c.Groups.MemberPending = memberPending })
	pc := dialNode(t, n, client.Options{})
	for i := range topics {
		publishAsync(t, pc, "work.t"+strconv.Itoa(i), perTopic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := client.SubscribeOptions{Group: "g", AckWait: time.Hour, OrderBy: client.OrderByTopic}
	slow := joinGroup(t, dialNode(t, n, client.Options{}), "work.>", opts)
	if _, err := slow.Next(ctx); err != nil {
		t.Fatal(err)
	}
	heldTopics := map[string]bool{}
	waitGroupState(t, n, "g", 20*time.Second, "the stopped member holds MemberPending records", func(st groups.Stats) bool {
		for _, m := range st.Members {
			if m.Pending == memberPending {
				for name := range m.Held {
					heldTopics[name] = true
				}
				return true
			}
		}
		return false
	})
	if len(heldTopics) == topics {
		t.Fatalf("the stopped member holds all %d topics: nothing is left to show", topics)
	}

	var mu sync.Mutex
	got := map[string]map[uint64]bool{} // topic -> offsets acknowledged
	last := map[string]uint64{}         // topic -> highest offset first received
	count := 0
	want := (topics - len(heldTopics)) * perTopic
	reached := make(chan struct{})
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	var wg sync.WaitGroup
	startMembers(dctx, t, n, "work.>", opts, fast, &wg, func(i int, r client.Record) {
		mu.Lock()
		defer mu.Unlock()
		if got[r.Topic] == nil {
			got[r.Topic] = map[uint64]bool{}
		}
		if got[r.Topic][r.Offset] {
			return
		}
		if l, ok := last[r.Topic]; ok && r.Offset < l {
			t.Errorf("member %d: %s offset %d first received after %d", i, r.Topic, r.Offset, l)
		}
		last[r.Topic] = max(last[r.Topic], r.Offset)
		got[r.Topic][r.Offset] = true
		if count++; count == want {
			close(reached)
		}
	}, nil)
	await := func(what string) {
		t.Helper()
		awaitClosed(ctx, t, reached, what, func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("%d of %d records received; %s", count, want, dumpGroups(n))
		})
	}
	await("with the stopped member")
	mu.Lock()
	for name := range heldTopics {
		if len(got[name]) > 0 {
			t.Errorf("%d records of %s, held by the stopped member, went to others", len(got[name]), name)
		}
	}
	want = topics * perTopic
	reached = make(chan struct{})
	mu.Unlock()
	waitGroupState(t, n, "g", 20*time.Second, "the group holds only the stopped member's records", func(st groups.Stats) bool {
		return st.Outstanding == memberPending
	})
	slow.Close()
	await("after the stopped member closed its stream")
	dcancel()
	wg.Wait()
}
