package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/routing"
)

// TestGroupAcrossRegionNodes: in a region of two nodes, members of one group connected to
// both nodes (the topic is owned by eu-2) split its records: each record is delivered to
// exactly one member, and the members on both nodes get some. The group lives on eu-2 only.
func TestGroupAcrossRegionNodes(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	topic := ""
	for i := 0; topic == ""; i++ {
		if c := fmt.Sprintf("jobs.%d", i); routing.Owner(c, []string{"eu-1", "eu-2"}) == "eu-2" {
			topic = c
		}
	}
	pub := m.dial("eu-1")
	const total = 400
	groupPublish(t, pub, topic, 0, 1, nil) // the topic exists; the rest comes once every member is in
	d := newDeliveries(total)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	members := 0
	var subs []*client.Subscription
	for _, node := range []string{"eu-1", "eu-1", "eu-2", "eu-2"} {
		sub := joinGroup(t, m.dial(node), topic, client.SubscribeOptions{Group: "g", AckWait: time.Minute})
		subs = append(subs, sub)
		members++
		go func(i int) {
			defer func() { done <- struct{}{} }()
			consume(ctx, t, sub, i, d)
		}(members)
	}
	groupPublish(t, pub, topic, 1, total-1, nil)
	waitAll(t, d, 30*time.Second)
	cancel()
	for range members {
		<-done
	}
	d.mu.Lock()
	if len(d.dup) > 0 {
		t.Fatalf("records delivered to two members: %v", d.dup)
	}
	if d.count[1]+d.count[2] == 0 || d.count[3]+d.count[4] == 0 {
		t.Fatalf("records per member %v: the members on eu-1 (1, 2) and eu-2 (3, 4) should all share", d.count)
	}
	d.mu.Unlock()
	if g := m.nodes["eu-1"].liveGroup("g"); g != nil {
		t.Fatal("eu-1 runs the group too: it should relay its members to eu-2")
	}

	// Managed through eu-1: one row with the four members; a forced reset ends every member,
	// the relayed ones too, with ERROR 21.
	mctx := context.Background()
	list, err := pub.Consumers(mctx)
	if err != nil || len(list) != 1 || list[0].Kind != client.KindGroup || list[0].Members != 4 || list[0].Name != "g" ||
		list[0].Group == nil || list[0].Group.AckWait != time.Minute || list[0].Group.Outstanding > list[0].Pending {
		t.Fatalf("consumers through eu-1: %+v %v; want group g with 4 members and its settings", list, err)
	}
	if _, err := pub.ResetConsumer(mctx, "g", client.Earliest, client.ManageOptions{}); codeOf(err) != client.CodeInUse {
		t.Fatalf("reset through eu-1 with members: %v; want in use", err)
	}
	info, err := pub.ResetConsumer(mctx, "g", client.Earliest, client.ManageOptions{Force: true})
	if err != nil || info.Members != 0 || info.Pending != total {
		t.Fatalf("forced reset through eu-1: %+v %v; want no members, %d pending", info, err, total)
	}
	ectx, ecancel := context.WithTimeout(mctx, 10*time.Second)
	defer ecancel()
	for i, sub := range subs {
		for {
			_, err := sub.Next(ectx) // records read ahead come first
			if err == nil {
				continue
			}
			if codeOf(err) != client.CodeInUse {
				t.Fatalf("member %d after the forced reset: %v; want in use", i+1, err)
			}
			break
		}
	}
	// A relayed member's COMMIT is answered once the home stored its ACKs.
	again := joinGroup(t, pub, topic, client.SubscribeOptions{Group: "g"})
	for range 2 { // a member holds at most 256 unacknowledged records
		readAckGroup(t, again, total/2, total/2)
	}
	if _, states, _, err := m.nodes["eu-2"].Log().Group("g"); err != nil || states[topic] == nil || states[topic].Floor != total {
		t.Fatalf("the home's state after a relayed member's COMMIT: %+v %v; want floor %d", states[topic], err, total)
	}
}

// TestExclusiveAcrossRegionNodes: in a region of two nodes, an exclusive durable held by a
// client of one node refuses a second subscriber on the other node, naming the holder's
// node; a standby on the other node waits and takes over when the holder ends, after its
// last ACK. The durable's lock lives on its home (eu-1 here) whichever node the clients use.
func TestExclusiveAcrossRegionNodes(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	name := ""
	for i := 0; name == ""; i++ {
		if c := fmt.Sprintf("worker%d", i); routing.Owner(homeKey(c), []string{"eu-1", "eu-2"}) == "eu-1" {
			name = c
		}
	}
	pub := m.dial("eu-1")
	groupPublish(t, pub, "orders", 0, 20, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := m.dial("eu-2").Subscribe(ctx, "orders", client.SubscribeOptions{Durable: name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.dial("eu-1").Subscribe(ctx, "orders", client.SubscribeOptions{Durable: name})
	if codeOf(err) != client.CodeConflict || !strings.Contains(err.Error(), "node eu-2") {
		t.Fatalf("a second subscriber on eu-1: %v; want a conflict naming the holder's node eu-2", err)
	}
	_, err = m.dial("eu-2").Subscribe(ctx, "orders", client.SubscribeOptions{Durable: name})
	if codeOf(err) != client.CodeConflict {
		t.Fatalf("a second subscriber on eu-2: %v; want a conflict", err)
	}
	standbyTakesOver(ctx, t, first, func() (*client.Subscription, error) {
		return m.dial("eu-1").Subscribe(ctx, "orders", client.SubscribeOptions{Durable: name, Standby: true})
	})
}

// standbyTakesOver runs subscribe (a standby of the durable that first holds) meanwhile
// first reads and acknowledges 10 records, checks that the standby is not set up while first
// is active, then closes first: the standby must take over at offset 10, after its last ACK.
func standbyTakesOver(ctx context.Context, t *testing.T, first *client.Subscription, subscribe func() (*client.Subscription, error)) {
	t.Helper()
	type result struct {
		sub *client.Subscription
		err error
	}
	standby := make(chan result, 1)
	go func() {
		sub, err := subscribe()
		standby <- result{sub, err}
	}()
	for range 10 {
		r, err := first.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first.Ack(r)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-standby:
		t.Fatalf("the standby was set up while the first subscriber was active: %v", r.err)
	default:
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-standby
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.sub.Close()
	rec, err := r.sub.Next(ctx)
	if err != nil || rec.Offset != 10 {
		t.Fatalf("the standby's first record: offset %d, %v; want 10 (after the last ACK)", rec.Offset, err)
	}
}

// TestGroupRelayTenantNames: a tenant's member relayed to the group's home sees its own
// names (topics without the tenant's prefix), and the group is managed in the tenant's view.
func TestGroupRelayTenantNames(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2, func(c *Config) {
		c.Credentials = []auth.Credential{{Token: acmeToken, Tenant: "acme"}}
	})
	topic := ""
	for i := 0; topic == ""; i++ {
		if c := fmt.Sprintf("orders.%d", i); routing.Owner("acme."+c, []string{"eu-1", "eu-2"}) == "eu-2" {
			topic = c
		}
	}
	c := mustDialAs(t, m.nodes["eu-1"], acmeToken)
	managePublish(t, c, topic, 3)
	sub := joinGroup(t, c, topic, client.SubscribeOptions{Group: "workers"})
	for _, r := range readAckGroup(t, sub, 3, 3) {
		if r.Topic != topic {
			t.Fatalf("a relayed tenant member got topic %q, want %q", r.Topic, topic)
		}
	}
	info, err := c.ConsumerInfo(context.Background(), "workers")
	if err != nil || info.Kind != client.KindGroup || info.Pattern != topic || info.Members != 1 || len(info.Topics) != 1 || info.Topics[0].Topic != topic || info.Topics[0].Resume != 3 {
		t.Fatalf("info through eu-1: %+v %v", info, err)
	}
	if m.nodes["eu-2"].liveGroup("tenant/acme/workers") == nil {
		t.Fatal("the group does not run on its home eu-2")
	}
}

// TestExclusiveLockLost: when the durable's home goes away, a subscription holding the
// durable through it on another node ends with ERROR 9, saying the lock was lost, rather
// than going on without its lock.
func TestExclusiveLockLost(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	name, topic := "", ""
	for i := 0; name == "" || topic == ""; i++ {
		if c := fmt.Sprintf("worker%d", i); name == "" && routing.Owner(homeKey(c), []string{"eu-1", "eu-2"}) == "eu-1" {
			name = c
		}
		if c := fmt.Sprintf("orders.%d", i); topic == "" && routing.Owner(c, []string{"eu-1", "eu-2"}) == "eu-2" {
			topic = c
		}
	}
	c := m.dial("eu-2")
	groupPublish(t, c, topic, 0, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{Durable: name})
	if err != nil {
		t.Fatal(err)
	}
	manageRead(t, sub, 3)
	if err := m.nodes["eu-1"].Close(); err != nil {
		t.Fatal(err)
	}
	_, err = sub.Next(ctx)
	if codeOf(err) != client.CodeUnavailable || !strings.Contains(err.Error(), "lock") {
		t.Fatalf("the holder after its durable's home went away: %v; want unavailable, naming the lost lock", err)
	}
}
