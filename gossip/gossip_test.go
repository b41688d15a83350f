package gossip

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// startMesh starts regions x perRegion nodes (all in the WAN pool), joins each region's LAN
// pool at its first node and the WAN pool at the very first node.
func startMesh(t *testing.T, key []byte, regions, perRegion int) []*testNode {
	t.Helper()
	var nodes []*testNode
	for r := range regions {
		for i := range perRegion {
			region := fmt.Sprintf("r%d", r+1)
			nodes = append(nodes, startTestNode(t, testNodeConfig(t, fmt.Sprintf("%s-n%d", region, i+1), region, key, true)))
		}
	}
	t.Cleanup(func() { stopAll(t, nodes...) }) // runs before each node's own cleanup
	for i, n := range nodes {
		if i%perRegion != 0 {
			if _, err := n.JoinLAN([]string{nodes[i-i%perRegion].LANAddr()}); err != nil {
				t.Fatalf("JoinLAN: %v", err)
			}
		}
		if i != 0 {
			if _, err := n.JoinWAN([]string{nodes[0].WANAddr()}); err != nil {
				t.Fatalf("JoinWAN: %v", err)
			}
		}
	}
	return nodes
}

// converged says what n's table still lacks (nil once nothing): every node of nodes alive,
// with its region, tags, and the pools it should be known in.
func converged(n *testNode, nodes []*testNode) error {
	ms := n.Members()
	if len(ms) != len(nodes) {
		return fmt.Errorf("%s knows %d members, want %d: %s", n.cfg.Name, len(ms), len(nodes), describe(ms))
	}
	for _, want := range nodes {
		var m Member
		for _, x := range ms {
			if x.Name == want.cfg.Name {
				m = x
			}
		}
		pools := PoolWAN
		if want.cfg.Region == n.cfg.Region {
			pools |= PoolLAN
		}
		switch {
		case m.Name == "":
			return fmt.Errorf("%s does not know %s", n.cfg.Name, want.cfg.Name)
		case m.Status != StatusAlive || m.Region != want.cfg.Region || m.Pools != pools:
			return fmt.Errorf("%s sees %s as %s/%s/%s, want alive/%s/%s", n.cfg.Name, m.Name, m.Status, m.Region, m.Pools, want.cfg.Region, pools)
		case m.Tags["quic"] != want.cfg.Tags["quic"] || m.Tags[TagRole] != RoleNode || m.Tags[TagRegion] != want.cfg.Region:
			return fmt.Errorf("%s sees tags of %s as %v", n.cfg.Name, m.Name, m.Tags)
		}
	}
	return nil
}

func TestMeshConvergesAndTagsPropagate(t *testing.T) {
	nodes := startMesh(t, newKey(t), 3, 2)
	took := testlog.WaitForErr(t, 15*time.Second, "mesh converges", func() error {
		for _, n := range nodes {
			if err := converged(n, nodes); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("3 regions x 2 nodes converged in %v", took)

	a := nodes[0]
	ms := a.Members()
	for i := 1; i < len(ms); i++ {
		if ms[i-1].Region > ms[i].Region || (ms[i-1].Region == ms[i].Region && ms[i-1].Name >= ms[i].Name) {
			t.Fatalf("Members not sorted by region, name: %s", describe(ms))
		}
	}
	for _, r := range []string{"r1", "r2", "r3"} {
		rm := a.RegionMembers(r)
		if len(rm) != 2 || rm[0].Name != r+"-n1" || rm[1].Name != r+"-n2" {
			t.Fatalf("RegionMembers(%s) = %s", r, describe(rm))
		}
	}
	if l := a.Local(); l.Name != "r1-n1" || l.Status != StatusAlive || l.Addr != a.LANAddr() || l.Pools != PoolLAN|PoolWAN {
		t.Fatalf("Local() = %+v (LANAddr %s)", l, a.LANAddr())
	}
	if m := a.member("r2-n1"); m.Addr != nodes[2].WANAddr() {
		t.Fatalf("a other region's member has Addr %s, want its WAN address %s", m.Addr, nodes[2].WANAddr())
	}
	// The metrics say the same as the table (a's own view: 2 in its LAN pool, 6 in the WAN).
	testlog.WaitForErr(t, 5*time.Second, "member gauges", func() error {
		lan := a.metric("quicmq_gossip_members", map[string]string{"pool": "lan", "status": "alive"})
		wan := a.metric("quicmq_gossip_members", map[string]string{"pool": "wan", "status": "alive"})
		if lan != 2 || wan != 6 {
			return fmt.Errorf("gauges lan=%v wan=%v", lan, wan)
		}
		return nil
	})
	if v := a.metric("quicmq_gossip_events_total", map[string]string{"pool": "wan", "kind": "join"}); v < 6 {
		t.Fatalf("wan join events = %v, want >= 6", v)
	}

	// SetTags on r2-n2 reaches its region peer through the LAN pool and the others through
	// the WAN pool.
	src := nodes[3]
	newTags := map[string]string{"quic": "10.0.0.9:4433", "peer": "10.0.0.9:4434"}
	start := time.Now()
	if err := src.SetTags(newTags); err != nil {
		t.Fatalf("SetTags: %v", err)
	}
	if l := src.Local(); l.Tags["peer"] != "10.0.0.9:4434" || l.Region != "r2" {
		t.Fatalf("Local after SetTags = %+v", l)
	}
	for _, n := range nodes {
		testlog.WaitForErr(t, 5*time.Second, "tags propagate", func() error {
			m := n.member(src.cfg.Name)
			if m.Tags["quic"] != "10.0.0.9:4433" || m.Tags["peer"] != "10.0.0.9:4434" || m.Tags[TagRegion] != "r2" {
				return fmt.Errorf("%s sees %v", n.cfg.Name, m.Tags)
			}
			return nil
		})
	}
	t.Logf("tag update seen by all 6 nodes after %v", time.Since(start))
	ev, _ := nodes[0].waitEvent(0, 2*time.Second, EventUpdate, PoolWAN, src.cfg.Name)
	if ev.Member.Tags["peer"] != "10.0.0.9:4434" {
		t.Fatalf("update event tags %v", ev.Member.Tags)
	}
	nodes[2].waitEvent(0, 2*time.Second, EventUpdate, PoolLAN, src.cfg.Name)

	if err := src.SetTags(map[string]string{TagRegion: "r1"}); !errors.Is(err, ErrReservedTag) {
		t.Fatalf("SetTags(region) = %v, want ErrReservedTag", err)
	}
	big := map[string]string{"x": string(make([]byte, MaxTagsSize))}
	if err := src.SetTags(big); !errors.Is(err, ErrTagsTooLarge) {
		t.Fatalf("SetTags(big) = %v, want ErrTagsTooLarge", err)
	}
}

func TestWrongKeyCannotJoin(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	a := startTestNode(t, testNodeConfig(t, "a", "r1", k1, true))
	b := startTestNode(t, testNodeConfig(t, "b", "r1", k2, true))
	plain := startTestNode(t, testNodeConfig(t, "plain", "r1", nil, false))
	good := startTestNode(t, testNodeConfig(t, "good", "r1", k1, false))
	defer stopAll(t, a, b, plain, good)

	n, err := b.JoinLAN([]string{a.LANAddr()})
	if !errors.Is(err, ErrJoinFailed) || n != 0 {
		t.Fatalf("JoinLAN with another key = %d, %v; want ErrJoinFailed", n, err)
	}
	wantKeyError := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrJoinFailed) || !strings.Contains(err.Error(), "gossip keys differ") {
			t.Fatalf("%s: %v; want ErrJoinFailed naming the key", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	wantKeyError("LAN join with another key", err)
	_, err = b.JoinWAN([]string{a.WANAddr()})
	wantKeyError("WAN join with another key", err)
	_, err = plain.JoinLAN([]string{a.LANAddr()})
	wantKeyError("join without a key into an encrypted pool", err)
	_, err = a.JoinLAN([]string{plain.LANAddr()})
	wantKeyError("join with a key into an unencrypted pool", err)

	// Control: the right key joins, and only it shows up.
	if _, err := good.JoinLAN([]string{a.LANAddr()}); err != nil {
		t.Fatalf("JoinLAN with the right key: %v", err)
	}
	testlog.WaitForErr(t, 5*time.Second, "good joins a", func() error {
		if m := a.member("good"); m.Status != StatusAlive {
			return errors.New("a does not see good alive: " + describe(a.Members()))
		}
		return nil
	})
	for _, n := range []*testNode{a, good} {
		if m := n.member("b"); m.Name != "" {
			t.Fatalf("%s knows b (wrong key): %+v", n.cfg.Name, m)
		}
		if m := n.member("plain"); m.Name != "" {
			t.Fatalf("%s knows plain (no key): %+v", n.cfg.Name, m)
		}
	}
	if ms := b.Members(); len(ms) != 1 {
		t.Fatalf("b knows %s", describe(ms))
	}
}

func TestLabelsIsolatePools(t *testing.T) {
	key := newKey(t)
	a := startTestNode(t, testNodeConfig(t, "a", "r1", key, true))
	a2 := startTestNode(t, testNodeConfig(t, "a2", "r1", key, true))
	b := startTestNode(t, testNodeConfig(t, "b", "r2", key, true))
	defer stopAll(t, a, a2, b)

	wantLabelError := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrJoinFailed) || !strings.Contains(err.Error(), "different pool label") {
			t.Fatalf("%s: %v; want ErrJoinFailed naming the label", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	_, err := b.JoinLAN([]string{a.LANAddr()})
	wantLabelError("region r2 joining r1's LAN pool", err)
	_, err = a2.JoinLAN([]string{a.WANAddr()})
	wantLabelError("LAN join at a WAN port", err)
	_, err = a2.JoinWAN([]string{a.LANAddr()})
	wantLabelError("WAN join at a LAN port", err)
	if ms := a.Members(); len(ms) != 1 {
		t.Fatalf("a's table after refused joins: %s", describe(ms))
	}

	// Controls: the same key and addresses work through the right pools.
	if _, err := b.JoinWAN([]string{a.WANAddr()}); err != nil {
		t.Fatalf("JoinWAN: %v", err)
	}
	if _, err := a2.JoinLAN([]string{a.LANAddr()}); err != nil {
		t.Fatalf("JoinLAN same region: %v", err)
	}
	testlog.WaitForErr(t, 5*time.Second, "b in WAN, a2 in LAN", func() error {
		if m := a.member("b"); m.Status != StatusAlive || m.Pools != PoolWAN {
			return fmt.Errorf("a sees b as %+v", m)
		}
		if m := a.member("a2"); m.Status != StatusAlive || m.Pools&PoolLAN == 0 {
			return fmt.Errorf("a sees a2 as %+v", m)
		}
		// b learns of a through its own event loop, which may lag a's view of b.
		if rm := b.RegionMembers("r1"); len(rm) != 1 || rm[0].Name != "a" || rm[0].Pools != PoolWAN {
			return fmt.Errorf("b's view of r1: %s", describe(rm))
		}
		return nil
	})
	// a2 is not in the WAN pool (it never joined it): b knows only a of r1, and goes on so.
	// A later WAN join through a is the barrier: by the time b hears of c from a, anything
	// a's WAN pool would have said of a2 has had its chance to reach b too.
	c := startTestNode(t, testNodeConfig(t, "c", "r3", key, true))
	defer stopAll(t, c)
	if _, err := c.JoinWAN([]string{a.WANAddr()}); err != nil {
		t.Fatalf("JoinWAN: %v", err)
	}
	testlog.WaitForErr(t, 5*time.Second, "b to hear of c through the WAN pool", func() error {
		if rm := b.RegionMembers("r3"); len(rm) != 1 || rm[0].Status != StatusAlive {
			return fmt.Errorf("b's view of r3: %s", describe(rm))
		}
		return nil
	})
	if rm := b.RegionMembers("r1"); len(rm) != 1 || rm[0].Name != "a" {
		t.Fatalf("b's view of r1: %s", describe(rm))
	}
}

// failWindow bounds failure detection with ProfileTest: probes go round-robin every
// 400 ms (up to n intervals to reach a given node among n), a probe fails after 400 ms plus
// indirect and TCP fallbacks within the interval, and a suspect is declared dead 1.2-2.4 s
// later (SuspicionMult 3 x ProbeInterval, up to SuspicionMaxTimeoutMult 2 times that without
// confirmations); Lifeguard may stretch the interval on a loaded host. About 3-4 s nominal;
// 6 s leaves room for a loaded host.
const failWindow = 6 * time.Second

func TestLeaveFailRestartReap(t *testing.T) {
	key := newKey(t)
	a := startTestNode(t, testNodeConfig(t, "a", "r1", key, true))
	b := startTestNode(t, testNodeConfig(t, "b", "r1", key, true))
	c := startTestNode(t, testNodeConfig(t, "c", "r1", key, true))
	d := startTestNode(t, testNodeConfig(t, "d", "r2", key, true))
	all := []*testNode{a, b, c, d}
	defer func() { stopAll(t, all...) }()
	for _, n := range []*testNode{b, c} {
		if _, err := n.JoinLAN([]string{a.LANAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*testNode{b, c, d} {
		if _, err := n.JoinWAN([]string{a.WANAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	testlog.WaitForErr(t, 10*time.Second, "converge", func() error {
		for _, n := range all {
			if err := converged(n, all); err != nil {
				return err
			}
		}
		return nil
	})

	// Graceful: c closes -> a sees Leave in the LAN pool and StatusLeft, d in the WAN pool.
	start := time.Now()
	c.stop(t)
	closeTook := time.Since(start)
	t.Logf("graceful Close took %v (bound %v)", closeTook, c.cfg.leaveBound())
	if closeTook > c.cfg.leaveBound()+time.Second {
		t.Errorf("Close took %v, more than the leave bound %v + 1 s", closeTook, c.cfg.leaveBound())
	}
	leftAt := time.Now()
	a.waitEvent(0, 3*time.Second, EventLeave, PoolLAN, "c")
	d.waitEvent(0, 3*time.Second, EventLeave, PoolWAN, "c")
	if m := a.member("c"); m.Status != StatusLeft {
		t.Fatalf("a sees c as %s after its graceful leave, want left", m.Status)
	}
	if m := d.member("c"); m.Status != StatusLeft {
		t.Fatalf("d sees c as %s after its graceful leave, want left", m.Status)
	}
	if s := a.Stats(); s.LANEvents[EventFail] != 0 {
		t.Fatalf("a counted %d failures for a graceful leave", s.LANEvents[EventFail])
	}

	// Hard stop: b's serf shuts down without leaving -> a and d see a failure.
	start = time.Now()
	if err := b.CloseAbruptly(); err != nil {
		t.Fatalf("CloseAbruptly: %v", err)
	}
	b.stop(t) // collects Run's result
	_, atA := a.waitEvent(0, failWindow+2*time.Second, EventFail, PoolLAN, "b")
	_, atD := d.waitEvent(0, failWindow+2*time.Second, EventFail, PoolWAN, "b")
	t.Logf("hard stop detected: LAN (a) after %v, WAN (d) after %v; window %v",
		atA.Sub(start), atD.Sub(start), failWindow)
	if w := max(atA.Sub(start), atD.Sub(start)); w > failWindow {
		t.Errorf("failure noticed after %v, window %v", w, failWindow)
	}
	if m := a.member("b"); m.Status != StatusFailed {
		t.Fatalf("a sees b as %s, want failed", m.Status)
	}
	if rm := a.RegionMembers("r1"); len(rm) != 3 {
		t.Fatalf("a's r1 keeps failed and left members until reaped: %s", describe(rm))
	}

	// Restart b under the same name (new ports): it is alive again everywhere.
	start = time.Now()
	markA := a.mark()
	b2 := startTestNode(t, testNodeConfig(t, "b", "r1", key, true))
	all = append(all, b2)
	if _, err := b2.JoinLAN([]string{a.LANAddr()}); err != nil {
		t.Fatalf("restarted JoinLAN: %v", err)
	}
	if _, err := b2.JoinWAN([]string{a.WANAddr()}); err != nil {
		t.Fatalf("restarted JoinWAN: %v", err)
	}
	for _, n := range []*testNode{a, d} {
		testlog.WaitForErr(t, 10*time.Second, "restarted b alive", func() error {
			m := n.member("b")
			if m.Status != StatusAlive {
				return fmt.Errorf("%s sees b as %s at %s", n.cfg.Name, m.Status, m.Addr)
			}
			want := b2.WANAddr()
			if n == a {
				want = b2.LANAddr()
			}
			if m.Addr != want {
				return fmt.Errorf("%s sees b at %s, want %s", n.cfg.Name, m.Addr, want)
			}
			return nil
		})
	}
	if ev, _ := a.waitEvent(markA, time.Second, EventJoin, PoolLAN, "b"); ev.Member.Addr != b2.LANAddr() {
		t.Fatalf("join event of the restarted b: %+v", ev.Member)
	}
	t.Logf("restarted b alive again at a and d after %v", time.Since(start))

	// c's tombstone is reaped (TombstoneTimeout 6 s with ProfileTest).
	_, reapedAt := a.waitEvent(0, 6*time.Second+failWindow-time.Since(leftAt), EventReap, PoolLAN, "c")
	testlog.WaitForErr(t, 3*time.Second, "c reaped from both pools", func() error {
		if m := a.member("c"); m.Name != "" {
			return fmt.Errorf("a still has c: %+v", m)
		}
		return nil
	})
	t.Logf("c reaped %v after its leave", reapedAt.Sub(leftAt))
}

func TestCloseBoundedAndNoGoroutinesLeft(t *testing.T) {
	key := newKey(t)
	a := startTestNode(t, testNodeConfig(t, "a", "r1", key, true))
	b := startTestNode(t, testNodeConfig(t, "b", "r1", key, true))
	if _, err := b.JoinLAN([]string{a.LANAddr()}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JoinWAN([]string{a.WANAddr()}); err != nil {
		t.Fatal(err)
	}
	testlog.WaitForErr(t, 5*time.Second, "converge", func() error { return converged(a, []*testNode{a, b}) })

	start := time.Now()
	stopAll(t, a, b)
	took := time.Since(start)
	t.Logf("closing two nodes (both pools, graceful) took %v, bound %v", took, a.cfg.leaveBound())
	if took > a.cfg.leaveBound()+time.Second {
		t.Fatalf("Close took %v", took)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if gs := goroutines("quicmq/gossip.(*Gossip)"); len(gs) != 0 {
		t.Fatalf("goroutines of ours after Close:\n%s", gs[0])
	}
	// serf's and memberlist's own goroutines stop with Shutdown, except connection handlers
	// that finish within the TCP timeout (1 s with ProfileTest).
	lingered := testlog.WaitForErr(t, 5*time.Second, "serf and memberlist goroutines exit", func() error {
		if gs := goroutines("github.com/hashicorp/"); len(gs) != 0 {
			return fmt.Errorf("%d left, first:\n%s", len(gs), gs[0])
		}
		return nil
	})
	t.Logf("last serf/memberlist goroutine gone %v after Close returned", lingered)
}

func TestLifecycleErrors(t *testing.T) {
	cfg := testNodeConfig(t, "a", "r1", newKey(t), false)
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if g.LANAddr() == "" || g.LANAddr() == "127.0.0.1:0" || g.WANAddr() != "" {
		t.Fatalf("addresses right after New: lan %q wan %q", g.LANAddr(), g.WANAddr())
	}
	if _, err := g.JoinWAN([]string{"127.0.0.1:1"}); !errors.Is(err, ErrNoWAN) {
		t.Fatalf("JoinWAN without WAN: %v", err)
	}
	if n, err := g.JoinLAN(nil); n != 0 || err != nil {
		t.Fatalf("JoinLAN(nil) = %d, %v", n, err)
	}
	// Close without Run: Close drains and leaves by itself.
	start := time.Now()
	if err := g.Close(); err != nil {
		t.Fatalf("Close without Run: %v", err)
	}
	t.Logf("Close of a lone node without Run: %v", time.Since(start))
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := g.Run(t.Context()); !errors.Is(err, ErrRunning) {
		t.Fatalf("Run after Close: %v", err)
	}
	if _, err := g.JoinLAN([]string{"127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("JoinLAN after Close: %v", err)
	}
	if err := g.SetTags(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetTags after Close: %v", err)
	}
	if l := g.Local(); l.Status != StatusLeft {
		t.Fatalf("Local after Close: %s, want left", l.Status)
	}

	// Two concurrent Runs: one is refused, the other ends with its context.
	g2, err := New(testNodeConfig(t, "b", "r1", nil, false))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	runs := make(chan error, 2)
	for range 2 {
		go func() { runs <- g2.Run(ctx) }()
	}
	select {
	case err := <-runs:
		if !errors.Is(err, ErrRunning) {
			t.Fatalf("one of two Runs returned %v, want ErrRunning", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("neither of two Runs returned")
	}
	cancel()
	select {
	case err := <-runs:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := g2.JoinLAN([]string{"127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("JoinLAN after Run returned: %v", err)
	}
	if err := g2.Close(); err != nil {
		t.Fatalf("Close after Run returned: %v", err)
	}
}

func TestSubscribeDropsWhenFullAndCancel(t *testing.T) {
	key := newKey(t)
	a := startTestNode(t, testNodeConfig(t, "a", "r1", key, false))
	full := make(chan Event) // nobody reads: every send would block
	cancelFull := a.Subscribe(full)
	got := make(chan Event, 64)
	cancelGot := a.Subscribe(got)
	cancelGot()
	b := startTestNode(t, testNodeConfig(t, "b", "r1", key, false))
	defer stopAll(t, a, b)
	if _, err := b.JoinLAN([]string{a.LANAddr()}); err != nil {
		t.Fatal(err)
	}
	a.waitEvent(0, 5*time.Second, EventJoin, PoolLAN, "b") // the test subscription still works
	testlog.WaitForErr(t, 2*time.Second, "drop counted", func() error {
		if s := a.Stats(); s.Dropped == 0 {
			return errors.New("no drop counted")
		}
		if v := a.metric("quicmq_gossip_subscriber_drops_total", nil); v < 1 {
			return fmt.Errorf("drops metric %v", v)
		}
		return nil
	})
	cancelFull()
	if m := a.member("b"); m.Status != StatusAlive {
		t.Fatalf("table must stay right when a subscriber is full: %+v", m)
	}
	// got was live between Subscribe and cancelGot, when Run may have delivered a's own join;
	// nothing after the cancel, b's join included, may reach it.
	for len(got) > 0 {
		if e := <-got; e.Member.Name != "a" {
			t.Fatalf("cancelled subscription got %v of %s", e.Kind, e.Member.Name)
		}
	}
	// Members returns copies: changing one does not change the table.
	maps.DeleteFunc(a.member("b").Tags, func(string, string) bool { return true })
	if m := a.member("b"); m.Tags[TagRegion] != "r1" {
		t.Fatalf("table changed through a returned Member's Tags: %+v", m)
	}
}
