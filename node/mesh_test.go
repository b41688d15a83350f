package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
)

// testMesh is a mesh of regions with one node each, in this process, sharing one CA.
type testMesh struct {
	t      *testing.T
	caDir  string
	nodes  map[string]*Node
	cfgs   map[string]Config
	stops  map[string]func()
	region []string
}

func newTestMesh(t *testing.T, regions ...string) *testMesh {
	t.Helper()
	return newTestMeshWith(t, nil, regions...)
}

// newTestMeshWith starts the mesh after mod changed each region's configuration.
func newTestMeshWith(t *testing.T, mod func(region string, c *Config), regions ...string) *testMesh {
	t.Helper()
	m := &testMesh{t: t, caDir: t.TempDir(), nodes: map[string]*Node{}, cfgs: map[string]Config{}, stops: map[string]func(){}, region: regions}
	for _, r := range regions {
		m.cfgs[r] = Config{
			DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "node-" + r, Region: r, CADir: m.caDir,
			GossipLAN: "127.0.0.1:0", GossipWAN: "127.0.0.1:0", GossipProfile: gossip.ProfileTest,
			Logger: testLogger(t),
		}
		if mod != nil {
			c := m.cfgs[r]
			mod(r, &c)
			m.cfgs[r] = c
		}
		m.start(r)
	}
	m.waitLinks()
	return m
}

// start (re)starts region r's node, joining the WAN pool through the other running nodes.
func (m *testMesh) start(r string) {
	m.t.Helper()
	cfg := m.cfgs[r]
	cfg.WANJoin = nil
	for other, n := range m.nodes {
		if other != r {
			cfg.WANJoin = append(cfg.WANJoin, n.Gossip().WANAddr())
		}
	}
	n, err := New(cfg)
	// A restart binds the node's old ports again: an ephemeral socket of another test may
	// hold one for a moment (seen once: "bind: address already in use").
	for deadline := time.Now().Add(10 * time.Second); err != nil && strings.Contains(err.Error(), "address already in use") && time.Now().Before(deadline); {
		m.t.Logf("restarting %s: %v; again", r, err)
		testlog.Pause(context.Background(), 100*time.Millisecond) // a retry's back-off
		n, err = New(cfg)
	}
	if err != nil {
		m.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	m.nodes[r] = n
	stopped := false
	m.stops[r] = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			m.t.Errorf("node %s: %v", r, err)
		}
	}
	m.t.Cleanup(m.stops[r])
}

func (m *testMesh) stop(r string) {
	m.stops[r]()
	delete(m.nodes, r)
}

// waitLinks waits until every node has a connected link to every other node.
func (m *testMesh) waitLinks() {
	m.t.Helper()
	waitLinksUp(m.t, m.nodes, 20*time.Second, nil)
}

func (m *testMesh) dial(r string) *client.Conn {
	m.t.Helper()
	return dialNode(m.t, m.nodes[r], client.Options{})
}

// collect reads count records from sub and checks that each origin region's records arrive
// exactly once, in origin order, with the payloads "<region>-<i>" for i = 0, 1, 2, ...
func collect(t *testing.T, sub *client.Subscription, count int, timeout time.Duration) map[string]int {
	t.Helper()
	return collectAfter(t, sub, count, timeout, map[string]int{})
}

// collectAfter is collect on a subscription that has had next[region] records of each
// region already: it updates next and returns it.
func collectAfter(t *testing.T, sub *client.Subscription, count int, timeout time.Duration, next map[string]int) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	lastOrigin := map[string]uint64{}
	for i := 0; i < count; i++ {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records (%v): %v", i, count, next, err)
		}
		want := fmt.Sprintf("%s-%d", rec.OriginRegion, next[rec.OriginRegion])
		if string(rec.Payload) != want {
			t.Fatalf("record %d from %s: payload %q, want %q (a gap, a duplicate or a reorder)", i, rec.OriginRegion, rec.Payload, want)
		}
		if n := next[rec.OriginRegion]; n > 0 && rec.OriginOffset <= lastOrigin[rec.OriginRegion] {
			t.Fatalf("origin offsets of %s not increasing: %d after %d", rec.OriginRegion, rec.OriginOffset, lastOrigin[rec.OriginRegion])
		}
		lastOrigin[rec.OriginRegion] = rec.OriginOffset
		next[rec.OriginRegion]++
		sub.Ack(rec)
	}
	return next
}

func publishSeq(t *testing.T, c *client.Conn, topic, region string, from, count int) {
	t.Helper()
	ctx := context.Background()
	var fs []*client.Future
	for i := from; i < from+count; i++ {
		f, err := c.PublishAsync(ctx, client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%s-%d", region, i)})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A record published in any region reaches subscribers of its topic in every region exactly
// once, in its origin's order; a subscriber also sees its own region's records.
func TestMeshMirrorsEveryRegionExactlyOnce(t *testing.T) {
	m := newTestMesh(t, "eu", "us", "ap")
	subs := map[string]*client.Subscription{}
	for _, r := range m.region {
		sub, err := m.dial(r).Subscribe(context.Background(), "orders", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		subs[r] = sub
	}
	// Whenever the interest reaches the links, each mirror starts at the origin's offset 0, and
	// each subscription reads its own region's log from 0: nothing to wait for.
	const per = 300
	for _, r := range m.region {
		publishSeq(t, m.dial(r), "orders", r, 0, per)
	}
	got := map[string]map[string]int{}
	for _, r := range m.region {
		got[r] = collect(t, subs[r], 3*per, 30*time.Second)
		for _, o := range m.region {
			if got[r][o] != per {
				t.Fatalf("subscriber in %s got %d records from %s, want %d", r, got[r][o], o, per)
			}
		}
	}
	// No duplicate after the fact: one more record from each region (a fence) is what comes
	// next on every subscription. A region's records reach another in their origin's order,
	// so a late duplicate would come before that region's fence, and collectAfter names it.
	for _, r := range m.region {
		publishSeq(t, m.dial(r), "orders", r, per, 1)
	}
	for _, r := range m.region {
		collectAfter(t, subs[r], len(m.region), 30*time.Second, got[r])
	}
	for _, r := range m.region {
		if _, next, _ := m.nodes[r].Log().Bounds("orders"); next != 3*(per+1) {
			t.Fatalf("region %s log of orders has %d records, want %d", r, next, 3*(per+1))
		}
	}
}

// A region's node stops in the middle of a stream of publishes elsewhere and comes back:
// it resumes mirroring from its cursors, with no gap and no duplicate. The topic is on the
// mirror list, so it catches up before any subscriber returns.
func TestMeshResumesAfterOutage(t *testing.T) {
	m := newTestMeshWith(t, func(r string, c *Config) { c.Mirror = []string{"events"} }, "eu", "us")
	sub, err := m.dial("us").Subscribe(context.Background(), "events", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	eu := m.dial("eu")
	publishSeq(t, eu, "events", "eu", 0, 200)
	collect(t, sub, 200, 20*time.Second)
	sub.Close()

	m.stop("us")
	publishSeq(t, eu, "events", "eu", 200, 500) // while us is down
	start := time.Now()
	m.start("us")
	testlog.WaitFor(t, 20*time.Second, "us to catch up", func() bool {
		_, next, _ := m.nodes["us"].Log().Bounds("events")
		return next >= 700
	})
	t.Logf("restart to caught up (500 records behind): %v", time.Since(start).Round(time.Millisecond))

	sub, err = m.dial("us").Subscribe(context.Background(), "events", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 200; i < 700; i++ {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if want := fmt.Sprintf("eu-%d", i); string(rec.Payload) != want {
			t.Fatalf("after the outage: got %q, want %q", rec.Payload, want)
		}
	}
	if _, next, _ := m.nodes["us"].Log().Bounds("events"); next != 700 {
		t.Fatalf("us log has %d records, want 700", next)
	}
}

// The dialing side moves its link to a new UDP socket under traffic: the connection (and so
// every stream) survives, nothing is lost or duplicated, and it is counted as a migration,
// not a reconnect.
func TestMeshLinkMigration(t *testing.T) {
	m := newTestMesh(t, "eu", "us")
	sub, err := m.dial("us").Subscribe(context.Background(), "m.t", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eu := m.dial("eu")
	before := m.nodes["us"].Federation().Links()[0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		publishSeq(t, eu, "m.t", "eu", 0, 2000)
	}()
	testlog.WaitFor(t, 20*time.Second, "mirroring under way", func() bool { // the migration comes under traffic
		_, next, _ := m.nodes["us"].Log().Bounds("m.t")
		return next > 0
	})
	if err := m.nodes["us"].Federation().Migrate(context.Background(), "eu"); err != nil {
		t.Fatal(err)
	}
	<-done
	collect(t, sub, 2000, 30*time.Second)
	after := m.nodes["us"].Federation().Links()[0]
	if after.Migrations != 1 || after.Reconnects != 0 {
		t.Fatalf("migrations %d reconnects %d, want 1 and 0", after.Migrations, after.Reconnects)
	}
	if after.LocalAddr == before.LocalAddr || !after.Since.Equal(before.Since) {
		t.Fatalf("local address %s -> %s, connection since %v -> %v: want a new address on the same connection",
			before.LocalAddr, after.LocalAddr, before.Since, after.Since)
	}
}

// A subscriber replays another region's log directly, passed through the link.
func TestMeshPassThroughReplay(t *testing.T) {
	m := newTestMesh(t, "eu", "us")
	publishSeq(t, m.dial("eu"), "local.only", "eu", 0, 50)
	sub, err := m.dial("us").Subscribe(context.Background(), "local.only", client.SubscribeOptions{From: client.AtOffset(10), Region: "eu"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 10; i < 50; i++ {
		rec, err := sub.Next(ctx)
		if err != nil || rec.Offset != uint64(i) || string(rec.Payload) != fmt.Sprintf("eu-%d", i) {
			t.Fatalf("replay offset %d: %+v %v", i, rec, err)
		}
		sub.Ack(rec)
	}
	if _, _, ok := m.nodes["us"].Log().Bounds("local.only"); ok {
		t.Fatal("a pass-through replay stored the topic locally")
	}
}
