package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/manage"
)

// regionMesh is the node package's cluster harness: nodes of one or more regions in this
// process, joined by gossip, sharing one CA, each known to the test by a key (m.nodes[key]).
// newRegionMesh names them REGION-I (I from 1) and keys them by name; newTestMesh starts one
// node per region named node-REGION and keys it by region. Processes are internal/nodeproc's.
type regionMesh struct {
	t      *testing.T
	caDir  string
	nodes  map[string]*Node  // running, by key (stop deletes; a test's own Close does not)
	cfgs   map[string]Config // what each node was started with, for a restart
	names  []string          // keys in start order
	region []string          // the regions, in the order given
	stops  map[string]func()
	admin  map[string]*httptest.Server // the admin API served for a node (adminURL), by key
}

func newMesh(t *testing.T, regions []string) *regionMesh {
	return &regionMesh{t: t, caDir: t.TempDir(), nodes: map[string]*Node{}, cfgs: map[string]Config{},
		stops: map[string]func(){}, region: regions}
}

// config is the settings of a mesh node named name in region r.
func (m *regionMesh) config(name, r string) Config {
	return Config{
		DataDir: m.t.TempDir(), Listen: "127.0.0.1:0", Name: name, Region: r, CADir: m.caDir,
		GossipLAN: "127.0.0.1:0", GossipWAN: "127.0.0.1:0", GossipProfile: gossip.ProfileTest,
		Logger: testLogger(m.t),
	}
}

// newRegionMesh starts perRegion nodes in each region after mod changed their settings and
// waits until the mesh is ready (waitReady).
func newRegionMesh(t *testing.T, regions []string, perRegion int, mod ...func(*Config)) *regionMesh {
	t.Helper()
	m := newMesh(t, regions)
	for _, r := range regions {
		for i := 1; i <= perRegion; i++ {
			name := fmt.Sprintf("%s-%d", r, i)
			cfg := m.config(name, r)
			for _, f := range mod {
				f(&cfg)
			}
			m.add(name, cfg)
		}
	}
	m.waitReady()
	return m
}

func newTestMesh(t *testing.T, regions ...string) *regionMesh {
	t.Helper()
	return newTestMeshWith(t, nil, regions...)
}

// newTestMeshWith starts one node per region, keyed by its region, after mod changed each
// region's settings, and waits until every link is up.
func newTestMeshWith(t *testing.T, mod func(region string, c *Config), regions ...string) *regionMesh {
	t.Helper()
	m := newMesh(t, regions)
	for _, r := range regions {
		cfg := m.config("node-"+r, r)
		if mod != nil {
			mod(r, &cfg)
		}
		m.add(r, cfg)
	}
	m.waitLinks()
	return m
}

// add starts a node keyed key with cfg, which joins the nodes running.
func (m *regionMesh) add(key string, cfg Config) {
	m.t.Helper()
	m.cfgs[key] = cfg
	m.names = append(m.names, key)
	m.start(key)
}

// start (re)starts node key on its data directory, joining its region's running nodes
// (LAN) and every running node (WAN), as a restarted node's gossip ports are new.
func (m *regionMesh) start(key string) {
	m.t.Helper()
	cfg := m.cfgs[key]
	cfg.Join, cfg.WANJoin = nil, nil
	for _, other := range m.names {
		if n := m.nodes[other]; n != nil && other != key && !stopped(n) {
			if m.cfgs[other].Region == cfg.Region {
				cfg.Join = append(cfg.Join, n.Gossip().LANAddr())
			}
			cfg.WANJoin = append(cfg.WANJoin, n.Gossip().WANAddr())
		}
	}
	n, stop, err := startStoppableErr(m.t, cfg)
	// A restart binds the node's old ports again: an ephemeral socket of another test may
	// hold one for a moment (seen once: "bind: address already in use").
	for deadline := time.Now().Add(10 * time.Second); err != nil && strings.Contains(err.Error(), "address already in use") && time.Now().Before(deadline); {
		m.t.Logf("starting %s: %v; again", key, err)
		testlog.Pause(context.Background(), 100*time.Millisecond) // a retry's back-off
		n, stop, err = startStoppableErr(m.t, cfg)
	}
	if err != nil {
		m.t.Fatal(err)
	}
	m.nodes[key], m.stops[key] = n, stop
}

// stopped reports whether n was closed or its Run ended (a test may Close a mesh's node).
func stopped(n *Node) bool {
	select {
	case <-n.stop:
		return true
	default:
		return false
	}
}

// stop stops node key and waits until it has; start brings it back.
func (m *regionMesh) stop(key string) {
	m.stops[key]()
	delete(m.nodes, key)
}

// restart starts node key again on its data directory (after Close), and waits until the
// mesh is whole again.
func (m *regionMesh) restart(key string) {
	m.t.Helper()
	delete(m.nodes, key)
	m.start(key)
	m.waitReady()
}

// waitLinks waits until every running node has a connected link to every other one.
func (m *regionMesh) waitLinks() {
	m.t.Helper()
	waitLinksUp(m.t, m.nodes, 20*time.Second, nil)
}

// waitReady waits until every node has a connected link to every other node and has the
// catalog of every node of its region.
func (m *regionMesh) waitReady() {
	m.t.Helper()
	waitLinksUp(m.t, m.nodes, 30*time.Second, func(n *Node) bool {
		_, ready, _ := n.place.OwnerNow("probe")
		return ready
	})
}

func (m *regionMesh) dial(key string) *client.Conn {
	m.t.Helper()
	return dialNode(m.t, m.nodes[key], client.Options{})
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

// adminURL serves name's admin API (again after a restart) and returns its base URL.
func (m *regionMesh) adminURL(name string) string {
	if s := m.admin[name]; s != nil {
		s.Close()
	}
	s := httptest.NewServer(m.nodes[name].AdminHandler())
	m.t.Cleanup(s.Close)
	if m.admin == nil {
		m.admin = map[string]*httptest.Server{}
	}
	m.admin[name] = s
	return s.URL
}

func (m *regionMesh) post(via, path string) (int, string) {
	m.t.Helper()
	resp, err := http.Post(m.adminURL(via)+path, "", nil)
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (m *regionMesh) nodeInfos(via string) []manage.NodeInfo {
	m.t.Helper()
	resp, err := http.Get(m.adminURL(via) + "/v1/nodes")
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []manage.NodeInfo
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		m.t.Fatal(err)
	}
	return out
}
