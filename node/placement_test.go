package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/routing"
)

// owner is topic's owner in region as the region's first node sees it.
func (m *regionMesh) owner(region, topic string) string {
	m.t.Helper()
	o, ready, _ := m.nodes[region+"-1"].place.OwnerNow(topic)
	if !ready {
		m.t.Fatalf("placement of %q in %s not ready", topic, region)
	}
	return o
}

// waitPosition waits until durable consumer name's stored position on topic at node is want:
// positions are stored asynchronously after the ACK frames arrive.
func (m *regionMesh) waitPosition(node, name, topic string, want uint64) {
	m.t.Helper()
	testlog.WaitForErr(m.t, 15*time.Second, fmt.Sprintf("position of %s on %s at %s to be %d", name, topic, node, want), func() error {
		pos, ok, err := m.nodes[node].Log().Position(name, topic)
		if err != nil {
			m.t.Fatal(err)
		}
		if ok && pos == want {
			return nil
		}
		return fmt.Errorf("%d %v", pos, ok)
	})
}

// other is the node of region that is not name (two nodes per region).
func other(region, name string) string {
	if name == region+"-1" {
		return region + "-2"
	}
	return region + "-1"
}

type delivered struct {
	topic, origin string
	offset        uint64
	payload       string
}

// readAll reads count records from sub, failing after timeout.
func readAll(t *testing.T, sub *client.Subscription, count int, timeout time.Duration) []delivered {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []delivered
	for len(out) < count {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records: %v", len(out), count, err)
		}
		out = append(out, delivered{rec.Topic, rec.OriginRegion, rec.Offset, string(rec.Payload)})
	}
	return out
}

// TestRegionPlacement3x2 is the first demonstration: 3 regions x 2 nodes in one
// process. Each topic's log lives on one node per region (its owner); records published in
// any region, through either node, reach subscribers of the topic in every region exactly
// once and in their origin's order; a subscriber on the non-owner node gets the same stream
// as one on the owner.
func TestRegionPlacement3x2(t *testing.T) {
	regions := []string{"eu", "us", "ap"}
	m := newRegionMesh(t, regions, 2)
	const perRegion = 50
	topics := []string{"orders.a", "orders.b", "orders.c", "orders.d"}

	// Publish through both nodes of every region: half of each region's records go through
	// the owner, half are relayed by the other node. Acks carry the owner's offsets, dense.
	for _, r := range regions {
		owners := map[string]bool{}
		for _, topic := range topics {
			owners[m.owner(r, topic)] = true
		}
		if len(owners) < 2 {
			t.Fatalf("%s: all of %v placed on one node; the test wants both owners", r, topics)
		}
		for _, topic := range topics {
			owner := m.owner(r, topic)
			var offsets []uint64
			for i, via := range []string{owner, other(r, owner)} {
				c := m.dial(via)
				for j := range perRegion / 2 {
					ack, err := c.Publish(context.Background(), client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%s-%d", r, i*perRegion/2+j)})
					if err != nil {
						t.Fatalf("publish %s via %s: %v", topic, via, err)
					}
					offsets = append(offsets, ack.Offset)
				}
			}
			for i := 1; i < len(offsets); i++ {
				if offsets[i] <= offsets[i-1] {
					t.Fatalf("%s in %s: acked offsets not increasing: %v", topic, r, offsets)
				}
			}
		}
	}

	// Every region ends with 3 x perRegion records per topic, on its owner only.
	for _, r := range regions {
		for _, topic := range topics {
			owner := m.owner(r, topic)
			c := m.dial(owner)
			subOwner, err := c.Subscribe(context.Background(), topic, client.SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, subOwner, 3*perRegion, 30*time.Second)
			subOwner.Close()

			c2 := m.dial(other(r, owner))
			subRelay, err := c2.Subscribe(context.Background(), topic, client.SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			relayed := readAll(t, subRelay, 3*perRegion, 30*time.Second)
			subRelay.Close()
			if !slices.Equal(got, relayed) {
				t.Fatalf("%s in %s: the stream through %s differs from the owner's:\nowner %v\nrelay %v", topic, r, other(r, owner), got, relayed)
			}
			checkExactlyOnce(t, r, topic, got, regions, perRegion)
			if _, _, ok := m.nodes[other(r, owner)].Log().Bounds(topic); ok {
				t.Fatalf("%s in %s: the non-owner %s has a log of it too (I6)", topic, r, other(r, owner))
			}
		}
	}
	// A wildcard subscription on either node of a region spans both owners and gets every
	// topic's records, the same per topic as a literal subscription on the owner.
	for _, r := range regions {
		var streams []map[string][]delivered
		for _, via := range []string{r + "-1", r + "-2"} {
			c := m.dial(via)
			sub, err := c.Subscribe(context.Background(), "orders.>", client.SubscribeOptions{})
			if err != nil {
				t.Fatalf("wildcard via %s: %v", via, err)
			}
			byTopic := map[string][]delivered{}
			for _, d := range readAll(t, sub, len(topics)*3*perRegion, 30*time.Second) {
				byTopic[d.topic] = append(byTopic[d.topic], d)
			}
			sub.Close()
			for _, topic := range topics {
				checkExactlyOnce(t, r, topic, byTopic[topic], regions, perRegion)
			}
			streams = append(streams, byTopic)
		}
		for _, topic := range topics {
			if !slices.Equal(streams[0][topic], streams[1][topic]) {
				t.Fatalf("wildcard in %s: %s differs between the two nodes", r, topic)
			}
		}
	}

	// Listing topics through any node shows the region's topics, wherever they live.
	for _, name := range m.names {
		infos, err := m.dial(name).Topics(context.Background(), "orders.>")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ti := range infos {
			if ti.Next != 3*perRegion {
				t.Errorf("%s lists %s with next offset %d, want %d", name, ti.Name, ti.Next, 3*perRegion)
			}
			got = append(got, ti.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, topics) {
			t.Errorf("%s lists %v, want %v", name, got, topics)
		}
	}

	for name, n := range m.nodes {
		if c := n.Conflicts(); len(c) > 0 {
			t.Errorf("%s reports placement conflicts: %v", name, c)
		}
	}
}

// checkExactlyOnce checks that got holds each origin's records once, in their order, at
// dense offsets.
func checkExactlyOnce(t *testing.T, region, topic string, got []delivered, regions []string, perRegion int) {
	t.Helper()
	next := map[string]int{}
	for i, d := range got {
		if d.offset != uint64(i) {
			t.Fatalf("%s in %s: record %d at offset %d", topic, region, i, d.offset)
		}
		want := fmt.Sprintf("%s-%d", d.origin, next[d.origin])
		if d.payload != want {
			t.Fatalf("%s in %s: offset %d from %s is %q, want %q (duplicate, gap or reorder)", topic, region, d.offset, d.origin, d.payload, want)
		}
		next[d.origin]++
	}
	for _, r := range regions {
		if next[r] != perRegion {
			t.Fatalf("%s in %s: %d records from %s, want %d", topic, region, next[r], r, perRegion)
		}
	}
}

// TestRegionPlacementOwnerGone: a topic whose owner left the region cannot be published to
// or subscribed through the remaining node; the error names the owner.
func TestRegionPlacementOwnerGone(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	topic := ""
	for i := range 100 {
		tp := fmt.Sprintf("t.%d", i)
		if m.owner("eu", tp) == "eu-2" {
			topic = tp
			break
		}
	}
	c := m.dial("eu-1")
	if _, err := c.Publish(context.Background(), client.Message{Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatalf("publish via eu-1 to %s owned by eu-2: %v", topic, err)
	}
	if _, _, ok := m.nodes["eu-2"].Log().Bounds(topic); !ok {
		t.Fatalf("%s was not appended on its owner eu-2", topic)
	}
	if err := m.nodes["eu-2"].Close(); err != nil {
		t.Fatal(err)
	}
	_, err := c.Publish(context.Background(), client.Message{Topic: topic, Payload: []byte("y")})
	var we *client.Error
	if !errors.As(err, &we) || we.Code != client.CodeUnavailable || !containsAll(we.Message, `"eu-2"`, topic) {
		t.Fatalf("publish to %s after its owner left: %v; want unavailable naming eu-2", topic, err)
	}
	_, err = c.Subscribe(context.Background(), topic, client.SubscribeOptions{})
	if !errors.As(err, &we) || we.Code != client.CodeUnavailable || !containsAll(we.Message, `"eu-2"`) {
		t.Fatalf("subscribe to %s after its owner left: %v; want unavailable naming eu-2", topic, err)
	}
	t.Logf("the error: %v", err)
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestRegionPlacementDurableRelay: a durable wildcard consumer connected to one node acks
// records of topics another node owns; its positions are stored on the owners, so it
// resumes after the last ack whichever node it reconnects to.
func TestRegionPlacementDurableRelay(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	topics := []string{"jobs.a", "jobs.b", "jobs.c", "jobs.d", "jobs.e"}
	owners := map[string]bool{}
	pub := m.dial("eu-1")
	for _, topic := range topics {
		owners[m.owner("eu", topic)] = true
		for i := range 10 {
			if _, err := pub.Publish(context.Background(), client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(owners) < 2 {
		t.Fatalf("all of %v placed on one node", topics)
	}
	consume := func(via string, count int, ack bool) map[string][]uint64 {
		c := m.dial(via)
		sub, err := c.Subscribe(context.Background(), "jobs.*", client.SubscribeOptions{Durable: "worker"})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		got := map[string][]uint64{}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for range count {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("via %s: %v", via, err)
			}
			got[rec.Topic] = append(got[rec.Topic], rec.Offset)
			if ack && rec.Offset < 5 {
				if err := sub.Ack(rec); err != nil {
					t.Fatal(err)
				}
			}
		}
		return got
	}
	// Read everything through eu-2, acking offsets 0-4 of every topic.
	consume("eu-2", len(topics)*10, true)
	// Positions are stored asynchronously after the ACK frames arrive: wait for them on the
	// owners.
	for _, topic := range topics {
		m.waitPosition(m.owner("eu", topic), "worker", topic, 4)
	}
	// Resume through eu-1: offsets 5-9 of every topic, nothing before.
	got := consume("eu-1", len(topics)*5, false)
	for _, topic := range topics {
		if want := []uint64{5, 6, 7, 8, 9}; !slices.Equal(got[topic], want) {
			t.Fatalf("%s resumed at %v, want %v", topic, got[topic], want)
		}
	}
}

// TestRegionPlacementConflict: two nodes of one region that did not know each other (a
// partition at start) both create a log of one topic. When they meet, both report the
// conflict (metric and Conflicts), route the topic to the same log, and leave the other
// log as it was: nothing is merged.
func TestRegionPlacementConflict(t *testing.T) {
	caDir := t.TempDir()
	start := func(name string) *Node {
		return startNode(t, Config{
			DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: name, Region: "eu", CADir: caDir,
			GossipLAN: "127.0.0.1:0", GossipProfile: gossip.ProfileTest, Logger: testLogger(t),
		})
	}
	a, b := start("eu-1"), start("eu-2")
	dial := func(n *Node) *client.Conn { return dialNode(t, n, client.Options{}) }
	ca, cb := dial(a), dial(b)
	const topic = "split.brain"
	for i := range 3 {
		if _, err := ca.Publish(context.Background(), client.Message{Topic: topic, Payload: fmt.Appendf(nil, "a%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := cb.Publish(context.Background(), client.Message{Topic: topic, Payload: fmt.Appendf(nil, "b%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Gossip().JoinLAN([]string{a.Gossip().LANAddr()}); err != nil {
		t.Fatal(err)
	}
	testlog.WaitForErr(t, 20*time.Second, "the conflict reported", func() error {
		if len(a.Conflicts()[topic]) == 2 && len(b.Conflicts()[topic]) == 2 {
			return nil
		}
		return fmt.Errorf("eu-1 %v, eu-2 %v", a.Conflicts(), b.Conflicts())
	})
	for _, n := range []*Node{a, b} {
		if v := fedGauge(t, n, "quicmq_placement_conflicts"); v != 1 {
			t.Errorf("%s: quicmq_placement_conflicts = %v, want 1", n.Name(), v)
		}
	}
	// Both nodes send the topic to the same log; the other keeps exactly what it had.
	ackA, err := ca.Publish(context.Background(), client.Message{Topic: topic, Payload: []byte("after-a")})
	if err != nil {
		t.Fatal(err)
	}
	ackB, err := cb.Publish(context.Background(), client.Message{Topic: topic, Payload: []byte("after-b")})
	if err != nil {
		t.Fatal(err)
	}
	if ackB.Offset != ackA.Offset+1 {
		t.Fatalf("after the conflict the nodes append to different logs: offsets %d and %d", ackA.Offset, ackB.Offset)
	}
	_, nextA, _ := a.Log().Bounds(topic)
	_, nextB, _ := b.Log().Bounds(topic)
	if !((nextA == 3 && nextB == 7) || (nextA == 5 && nextB == 5)) {
		t.Fatalf("logs after the conflict: eu-1 next %d, eu-2 next %d; want one untouched and the other +2", nextA, nextB)
	}
	t.Logf("conflict on %q: holders %v; eu-1 log next %d, eu-2 log next %d", topic, a.Conflicts()[topic], nextA, nextB)
}

// TestRegionPlacementTenantRelay: a tenant's names stay its own through relays: a literal
// subscription passed through to the owner, a wildcard spanning both nodes and a listing all
// show the tenant's names, never the namespace.
func TestRegionPlacementTenantRelay(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2, func(c *Config) {
		c.Credentials = []auth.Credential{{Token: acmeToken, Tenant: "acme"}}
	})
	ctx := context.Background()
	dial := func(name string) *client.Conn { return dialNode(t, m.nodes[name], client.Options{Token: acmeToken}) }
	c := dial("eu-1")
	topics := []string{"t.a", "t.b", "t.c", "t.d", "t.e", "t.f"}
	remote := ""
	for _, topic := range topics {
		if m.owner("eu", "acme."+topic) == "eu-2" {
			remote = topic
		}
		if _, err := c.Publish(ctx, client.Message{Topic: topic, Payload: []byte(topic)}); err != nil {
			t.Fatal(err)
		}
	}
	if remote == "" {
		t.Fatal("no topic placed on eu-2")
	}
	sub, err := c.Subscribe(ctx, remote, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, sub, 1, 10*time.Second); got[0].topic != remote {
		t.Fatalf("relayed literal subscription delivered %q, want %q", got[0].topic, remote)
	}
	sub.Close()
	sub, err = c.Subscribe(ctx, "t.*", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range readAll(t, sub, len(topics), 10*time.Second) {
		got = append(got, d.topic)
	}
	sub.Close()
	slices.Sort(got)
	if !slices.Equal(got, topics) {
		t.Fatalf("wildcard across nodes delivered %v, want %v", got, topics)
	}
	infos, err := c.Topics(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, ti := range infos {
		got = append(got, ti.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, topics) {
		t.Fatalf("listing through eu-1 shows %v, want %v", got, topics)
	}
}

// TestRegionPlacementWildcardResume: a durable wildcard consumer connected to eu-1 reads
// topics of both nodes. While eu-2 is down the subscription goes on with eu-1's topics (it
// used to end with an error); when eu-2 is back, its topics resume on the same stream, at the
// same stream indexes, with nothing delivered twice and nothing missed, and the ACKs made
// while eu-2 was down reach it.
func TestRegionPlacementWildcardResume(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	var ta, tb string // owned by eu-1 and eu-2
	for i := 0; ta == "" || tb == ""; i++ {
		tp := fmt.Sprintf("w.%d", i)
		switch m.owner("eu", tp) {
		case "eu-1":
			ta = cmp.Or(ta, tp)
		case "eu-2":
			tb = cmp.Or(tb, tp)
		}
	}
	c := m.dial("eu-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	publish := func(topic string, from, to int) { t.Helper(); publishNumbered(ctx, t, c, topic, from, to) }
	publish(ta, 0, 5)
	publish(tb, 0, 5)
	sub, err := c.Subscribe(ctx, "w.>", client.SubscribeOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]uint64{}
	byOffset := map[string]map[uint64]client.Record{ta: {}, tb: {}}
	read := func(count int) {
		t.Helper()
		for range count {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			if want := fmt.Sprintf("%s-%d", rec.Topic, rec.Offset); string(rec.Payload) != want {
				t.Fatalf("%s at %d: payload %q, want %q", rec.Topic, rec.Offset, rec.Payload, want)
			}
			got[rec.Topic] = append(got[rec.Topic], rec.Offset)
			byOffset[rec.Topic][rec.Offset] = rec
		}
	}
	ack := func(topic string, offsets ...uint64) {
		t.Helper()
		for _, o := range offsets {
			if err := sub.Ack(byOffset[topic][o]); err != nil {
				t.Fatalf("ack %s %d: %v", topic, o, err)
			}
		}
	}
	read(10)
	ack(ta, 0, 1, 2, 3, 4)
	ack(tb, 0, 1, 2)
	m.waitPosition("eu-2", "d", tb, 2)

	if err := m.nodes["eu-2"].Close(); err != nil {
		t.Fatal(err)
	}
	ack(tb, 3, 4) // while eu-2 is down: kept for its return
	publish(ta, 5, 10)
	read(5) // eu-1's topic goes on

	m.restart("eu-2")
	m.waitPosition("eu-2", "d", tb, 4) // the ACKs made while it was down
	publish(tb, 5, 10)
	read(5)
	for topic, offsets := range got {
		if want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(offsets, want) {
			t.Errorf("%s delivered %v, want %v (each once, in order)", topic, offsets, want)
		}
	}
	ack(tb, 5, 6, 7, 8, 9)
	m.waitPosition("eu-2", "d", tb, 9)
	// Nothing more is delivered (no redelivery of what eu-2 had before the restart).
	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	if rec, err := sub.Next(short); err == nil {
		t.Fatalf("an extra record: %s at %d", rec.Topic, rec.Offset)
	}
}

// TestRegionPlacementWildcardResumeLatest: a start=latest wildcard subscription (not durable)
// through eu-1 keeps its place in eu-2's topics across eu-2's restart (nothing again, nothing
// missed), and gets a topic eu-2 creates after it is back from its first record. (Resuming
// start=latest as "stored since the subscription began" matters for records a node stores
// while the upstream to it is down but the node is up, a cut link; this test does not reach
// that window: with the node itself down nothing is stored meanwhile.)
func TestRegionPlacementWildcardResumeLatest(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	var onEU2 []string // topics eu-2 would own
	for i := 0; len(onEU2) < 2; i++ {
		if tp := fmt.Sprintf("v.%d", i); m.owner("eu", tp) == "eu-2" {
			onEU2 = append(onEU2, tp)
		}
	}
	tb, tc := onEU2[0], onEU2[1]
	c := m.dial("eu-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	publish := func(topic string, from, to int) { t.Helper(); publishNumbered(ctx, t, c, topic, from, to) }
	publish(tb, 0, 3) // before the subscription: not delivered
	sub, err := c.Subscribe(ctx, "v.>", client.SubscribeOptions{From: client.Latest})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]uint64{}
	read := func(count int) {
		t.Helper()
		for range count {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			got[rec.Topic] = append(got[rec.Topic], rec.Offset)
		}
	}
	publish(tb, 3, 6)
	read(3)
	if err := m.nodes["eu-2"].Close(); err != nil {
		t.Fatal(err)
	}
	m.restart("eu-2")
	publish(tb, 6, 8)
	publish(tc, 0, 2) // a topic created after the restart
	read(4)
	if want := []uint64{3, 4, 5, 6, 7}; !slices.Equal(got[tb], want) {
		t.Errorf("%s delivered %v, want %v", tb, got[tb], want)
	}
	if want := []uint64{0, 1}; !slices.Equal(got[tc], want) {
		t.Errorf("%s delivered %v, want %v", tc, got[tc], want)
	}
	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	if rec, err := sub.Next(short); err == nil {
		t.Fatalf("an extra record: %s at %d", rec.Topic, rec.Offset)
	}
}

// TestRegionPlacementLiteralResume: subscriptions through eu-1 to one topic that eu-2 owns
// (a durable consumer and a plain one from earliest) survive eu-2's restart: nothing is
// delivered twice or missed, and the ACKs made while eu-2 was down reach it once it is back.
// Before, such a subscription was a pass-through that ended with an ERROR naming eu-2.
func TestRegionPlacementLiteralResume(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	topic := ""
	for i := 0; topic == ""; i++ {
		if tp := fmt.Sprintf("lit.%d", i); m.owner("eu", tp) == "eu-2" {
			topic = tp
		}
	}
	c := m.dial("eu-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	publishNumbered(ctx, t, c, topic, 0, 5)
	durable, err := c.Subscribe(ctx, topic, client.SubscribeOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	subs := map[string]*client.Subscription{"durable": durable, "plain": plain}
	got := map[string][]uint64{}
	kept := map[uint64]client.Record{}
	read := func(count int) {
		t.Helper()
		for name, sub := range subs {
			for range count {
				rec, err := sub.Next(ctx)
				if err != nil {
					t.Fatalf("%s after %v: %v", name, got[name], err)
				}
				if want := fmt.Sprintf("%s-%d", topic, rec.Offset); rec.Topic != topic || string(rec.Payload) != want {
					t.Fatalf("%s: %s at %d = %q, want %s", name, rec.Topic, rec.Offset, rec.Payload, want)
				}
				got[name] = append(got[name], rec.Offset)
				if name == "durable" {
					kept[rec.Offset] = rec
				}
			}
		}
	}
	ack := func(offsets ...uint64) {
		t.Helper()
		for _, o := range offsets {
			if err := durable.Ack(kept[o]); err != nil {
				t.Fatalf("ack %d: %v", o, err)
			}
		}
	}
	read(5)
	ack(0, 1, 2)
	m.waitPosition("eu-2", "d", topic, 2)
	if err := m.nodes["eu-2"].Close(); err != nil {
		t.Fatal(err)
	}
	ack(3, 4) // while eu-2 is down: kept for its return
	m.restart("eu-2")
	m.waitPosition("eu-2", "d", topic, 4)
	publishNumbered(ctx, t, c, topic, 5, 10)
	read(5)
	for name, offsets := range got {
		if want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(offsets, want) {
			t.Errorf("%s delivered %v, want %v (each once, in order)", name, offsets, want)
		}
	}
	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	for name, sub := range subs {
		if rec, err := sub.Next(short); err == nil {
			t.Fatalf("%s: an extra record at %d", name, rec.Offset)
		}
	}
}

// TestRegionPlacementLiteralOwnerMoved: a subscription through eu-1 to a topic with no log
// yet waits on the node placement names, eu-2; when eu-3 rejoins and placement names it
// instead (publishes now create the log there), the subscription ends with unavailable naming
// eu-3 rather than wait on eu-2 forever, and subscribing again gets the records.
func TestRegionPlacementLiteralOwnerMoved(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 3)
	topic := ""
	for i := 0; topic == ""; i++ {
		tp := fmt.Sprintf("mv.%d", i)
		if routing.Owner(tp, []string{"eu-1", "eu-2", "eu-3"}) == "eu-3" && routing.Owner(tp, []string{"eu-1", "eu-2"}) == "eu-2" {
			topic = tp
		}
	}
	if err := m.nodes["eu-3"].Close(); err != nil { // a graceful leave
		t.Fatal(err)
	}
	testlog.WaitFor(t, 15*time.Second, fmt.Sprintf("eu-1 to place %s on eu-2 after eu-3 left", topic), func() bool {
		o, ready, _ := m.nodes["eu-1"].place.OwnerNow(topic)
		return ready && o == "eu-2"
	})
	c := m.dial("eu-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.restart("eu-3")
	short, stop := context.WithTimeout(ctx, 15*time.Second)
	defer stop()
	_, err = sub.Next(short)
	var we *client.Error
	if !errors.As(err, &we) || we.Code != client.CodeUnavailable || !containsAll(we.Message, `"eu-3"`, topic) {
		t.Fatalf("subscription after %s moved to eu-3: %v; want unavailable naming eu-3", topic, err)
	}
	t.Logf("the error: %v", err)
	again, err := c.Subscribe(ctx, topic, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	publishNumbered(ctx, t, c, topic, 0, 3)
	if _, _, ok := m.nodes["eu-3"].Log().Bounds(topic); !ok {
		t.Fatalf("%s was not created on eu-3", topic)
	}
	for i := range 3 {
		rec, err := again.Next(ctx)
		if err != nil || rec.Offset != uint64(i) {
			t.Fatalf("record %d: %+v %v", i, rec, err)
		}
	}
}

// publishNumbered publishes records from..to-1 of topic with the payloads "TOPIC-I".
func publishNumbered(ctx context.Context, t *testing.T, c *client.Conn, topic string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := c.Publish(ctx, client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%s-%d", topic, i)}); err != nil {
			t.Fatalf("publish %s #%d: %v", topic, i, err)
		}
	}
}
