package node

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// TestGroupRestartRedeliversNothingAcked: a group's acknowledged records stay acknowledged
// across a node restart (acked out of order, so the stored state has done offsets above its
// floor); what was delivered and not acknowledged comes again.
func TestGroupRestartRedeliversNothingAcked(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", Name: "n1", Region: "test", Logger: testLogger(t)}
	n, stop := startStoppable(t, cfg)
	c := dialNode(t, n, client.Options{})
	groupPublish(t, c, "work", 0, 100, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, "work", client.SubscribeOptions{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]bool{}
	for range 60 {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset%3 != 1 { // leave every third record unacknowledged
			acked[r.Offset] = true
			sub.Ack(r)
		}
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	stop()

	n2, _ := startStoppable(t, cfg)
	c2 := dialNode(t, n2, client.Options{})
	sub2, err := c2.Subscribe(ctx, "work", client.SubscribeOptions{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	got := map[uint64]bool{}
	for len(got)+len(acked) < 100 {
		r, err := sub2.Next(ctx)
		if err != nil {
			t.Fatalf("after %d records: %v", len(got), err)
		}
		if acked[r.Offset] {
			t.Fatalf("offset %d acknowledged before the restart was delivered again", r.Offset)
		}
		if got[r.Offset] {
			t.Fatalf("offset %d delivered twice after the restart", r.Offset)
		}
		got[r.Offset] = true
		sub2.Ack(r)
	}
}

// TestGroupOrderUnderChurn: with OrderByKey (and OrderByTopic), a key's records reach the
// members in offset order and one member at a time, while members join and leave: a key
// goes to another member only when its previous one acknowledged all it had of the key, or
// ended; each key's records are first received in increasing offset order; nothing is lost.
func TestGroupOrderUnderChurn(t *testing.T) {
	for _, order := range []client.Order{client.OrderByKey, client.OrderByTopic} {
		t.Run(strconv.Itoa(int(order)), func(t *testing.T) {
			n := newTestNode(t)
			c := dialNode(t, n, client.Options{})
			pattern := "work"
			const perKey, keys = 60, 8
			if order == client.OrderByTopic {
				pattern = "work.>"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var mu sync.Mutex
			last := map[string]uint64{} // key -> highest offset received
			holder := map[string]int{}  // key -> member that last got it
			unacked := map[string]int{} // key -> records its holder received and did not ack
			ended := map[int]bool{}     // members whose stream ended
			seen := map[string]bool{}   // topic@offset received
			all := make(chan struct{})
			keyOf := func(r client.Record) string {
				if order == client.OrderByKey {
					return string(r.Headers[0].Value)
				}
				return r.Topic
			}
			member := func(id int, count int) {
				mc := dialNode(t, n, client.Options{})
				sub := joinGroup(t, mc, pattern, client.SubscribeOptions{Group: "g", OrderBy: order})
				var held []client.Record
				for i := 0; count < 0 || i < count; i++ {
					r, err := sub.Next(ctx)
					if err != nil {
						break
					}
					key := keyOf(r)
					mu.Lock()
					if h, ok := holder[key]; ok && h != id && !ended[h] && unacked[key] > 0 {
						t.Errorf("key %s went to member %d while member %d had %d of its records unacknowledged", key, id, h, unacked[key])
					}
					holder[key] = id
					k := fmt.Sprintf("%s@%d", r.Topic, r.Offset)
					if !seen[k] {
						if l, ok := last[key]; ok && r.Offset < l {
							t.Errorf("key %s: offset %d first received after %d", key, r.Offset, l)
						}
						seen[k] = true
						last[key] = max(last[key], r.Offset)
						if len(seen) == perKey*keys {
							close(all)
						}
					}
					unacked[key]++
					held = append(held, r)
					if len(held) < 5 { // ack in runs of five, so keys stay held between runs
						mu.Unlock()
						continue
					}
					for _, h := range held {
						unacked[keyOf(h)]-- // before the ACK: the node may move the key once it has it
					}
					mu.Unlock()
					for _, h := range held {
						sub.Ack(h)
					}
					held = held[:0]
				}
				mu.Lock()
				ended[id] = true // before Close: its keys may move from now on
				for _, h := range held {
					unacked[keyOf(h)]--
				}
				mu.Unlock()
				sub.Close()
			}
			var wg sync.WaitGroup
			// Churn: members that take some records and leave, then two that stay.
			for id := range 4 {
				wg.Add(1)
				go func() { defer wg.Done(); member(id, 40) }()
			}
			for i := range perKey {
				for k := range keys {
					m := client.Message{Topic: "work", Payload: []byte(strconv.Itoa(i))}
					if order == client.OrderByKey {
						m.Headers = []client.Header{{Key: client.KeyHeader, Value: []byte("k" + strconv.Itoa(k))}}
					} else {
						m.Topic = "work.t" + strconv.Itoa(k)
					}
					if _, err := c.Publish(ctx, m); err != nil {
						t.Fatal(err)
					}
				}
			}
			wg.Wait()
			wg.Add(2)
			go func() { defer wg.Done(); member(10, -1) }()
			go func() { defer wg.Done(); member(11, -1) }()
			select {
			case <-all:
			case <-ctx.Done():
				mu.Lock()
				t.Errorf("%d of %d records received", len(seen), perKey*keys)
				mu.Unlock()
			}
			cancel()
			wg.Wait()
		})
	}
}

// TestGroupSlowMember: a member that stops reading does not stop the others: they get
// every record, the slow member's included once their ack-wait passes.
func TestGroupSlowMember(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const total = 3000
	groupPublish(t, c, "work", 0, total, nil)
	slow := joinGroup(t, dialNode(t, n, client.Options{}), "work", client.SubscribeOptions{Group: "g", AckWait: 300 * time.Millisecond})
	if _, err := slow.Next(ctx); err != nil { // then it stops reading, holding what it took
		t.Fatal(err)
	}
	fast := joinGroup(t, dialNode(t, n, client.Options{}), "work", client.SubscribeOptions{Group: "g"})
	got := map[uint64]bool{}
	for len(got) < total {
		r, err := fast.Next(ctx)
		if err != nil {
			t.Fatalf("fast member after %d records: %v; group: %s", len(got), err, dumpGroups(n))
		}
		got[r.Offset] = true
		fast.Ack(r)
	}
}

// dumpGroups describes the node's live groups, for a failing test's message.
func dumpGroups(n *Node) string {
	out := ""
	for _, g := range n.liveGroups() {
		out += g.Name() + ": " + g.Stats().String()
	}
	return out
}
