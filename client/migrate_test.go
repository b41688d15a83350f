package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node"
)

// fastPaths makes the node look at its clients' addresses every 10 ms.
func fastPaths(c *node.Config) { c.ClientPathInterval = 10 * time.Millisecond }

// TestMigrateMidStream: a Conn with 100 subscriptions (one topic each) and a pipelined
// publisher moves to a new UDP socket mid-stream. The same connection carries on (the node
// accepted one connection and saw it move; the Conn made one handshake), every subscription
// gets exactly its records in order, and the delivery gap around the switch is reported.
func TestMigrateMidStream(t *testing.T) {
	n := newTestNode(t, fastPaths)
	c := dial(t, n, func(o *client.Options) { o.MigrateCheck = -1 })
	before := c.Stats()
	var t0, t1 time.Time
	res := runStream(t, c, "mig", 100, func() {
		t0 = time.Now()
		if err := c.Migrate(testCtx(t)); err != nil {
			t.Errorf("Migrate: %v", err)
		}
		t1 = time.Now()
	})
	after := c.Stats()
	if after.Handshakes != 1 || after.Migrations != 1 || after.FailedMigrations != 0 || after.Fallbacks != 0 {
		t.Errorf("Stats after the migration = %+v, want 1 handshake and 1 migration", after)
	}
	if after.LocalAddr == before.LocalAddr {
		t.Errorf("local address still %s after the migration", after.LocalAddr)
	}
	waitCounter(t, n, "quicmq_client_migrations_total", 1)
	if got := counter(t, n, "quicmq_client_connections_total"); got != 1 {
		t.Errorf("node accepted %v connections, want 1 (a migration makes no handshake)", got)
	}
	gap := res.longestGap(t0, t1.Add(100*time.Millisecond))
	base := res.longestGap(t0.Add(-500*time.Millisecond), t0)
	t.Logf("migration of a Conn with 100 subscriptions took %v; longest delivery gap around the switch %v "+
		"(in the 500 ms before it: %v); %d records over %d topics, none lost or duplicated",
		t1.Sub(t0).Round(10*time.Microsecond), gap.Round(10*time.Microsecond), base.Round(10*time.Microsecond), res.records, 100)
	if gap > 2*time.Second {
		t.Errorf("deliveries stopped for %v around the switch (goal: under 50 ms on loopback)", gap)
	}

	// The first socket stays open while the connection lives (quic-go ends the connection
	// with it), and Close frees both.
	if s, err := net.ListenUDP("udp", udpAddr(t, before.LocalAddr)); err == nil {
		s.Close()
		t.Errorf("the connection's first socket %s was closed after the migration", before.LocalAddr)
	}
	c.Close()
	for _, a := range []string{before.LocalAddr, after.LocalAddr} {
		s, err := net.ListenUDP("udp", udpAddr(t, a))
		if err != nil {
			t.Errorf("socket %s still open after Close: %v", a, err)
			continue
		}
		s.Close()
	}
}

// TestNATRebinding: a NAT-like relay gives the flow of a client with 100 subscriptions and
// a pipelined publisher a new source port mid-stream, without the client's knowledge. The
// node follows the connection to its new address and counts it; the connection carries on
// with no new handshake and no record lost or duplicated.
func TestNATRebinding(t *testing.T) {
	n := newTestNode(t, fastPaths)
	relay := newNATRelay(t, n.Addr().String())
	c := dialAddr(t, n, relay.Addr(), func(o *client.Options) { o.MigrateCheck = -1 })
	var at time.Time
	res := runStream(t, c, "nat", 100, func() {
		at = time.Now()
		relay.Rebind()
	})
	waitCounter(t, n, "quicmq_client_migrations_total", 1)
	if got := counter(t, n, "quicmq_client_connections_total"); got != 1 {
		t.Errorf("node accepted %v connections, want 1", got)
	}
	if st := c.Stats(); st.Handshakes != 1 || st.Migrations != 0 {
		t.Errorf("client Stats = %+v, want 1 handshake and no migration of its own", st)
	}
	t.Logf("NAT rebinding under 100 subscriptions: longest delivery gap after it %v (in the 500 ms before it: %v); "+
		"%d records, none lost or duplicated", res.longestGap(at, at.Add(200*time.Millisecond)).Round(10*time.Microsecond),
		res.longestGap(at.Add(-500*time.Millisecond), at).Round(10*time.Microsecond), res.records)
}

// TestMigrateFallback: the relay drops the new path's probe (it admits a new flow only with
// a handshake). With Reconnect and Idempotent the Conn reconnects instead, subscriptions
// resume and in-flight publishes are resent: nothing lost, nothing stored twice. Without
// Reconnect, Migrate fails and the connection goes on as it was.
func TestMigrateFallback(t *testing.T) {
	n := newTestNode(t, fastPaths)
	relay := newNATRelay(t, n.Addr().String())
	relay.refuseNew.Store(true)
	c := dialAddr(t, n, relay.Addr(), func(o *client.Options) {
		o.Reconnect, o.Idempotent, o.MigrateCheck, o.MigrateTimeout = true, true, -1, 300*time.Millisecond
	})
	res := runStream(t, c, "fb", 10, func() {
		if err := c.Migrate(testCtx(t)); err != nil {
			t.Errorf("Migrate with Reconnect: %v", err)
		}
	})
	if st := c.Stats(); st.Handshakes != 2 || st.FailedMigrations != 1 || st.Fallbacks != 1 || st.Migrations != 0 {
		t.Errorf("Stats = %+v, want 2 handshakes, 1 failed migration, 1 fallback", st)
	}
	if relay.refused.Load() == 0 {
		t.Error("the relay refused no datagram: the probe was not refused")
	}
	// The node counts a connection when its side of the handshake completes: a reconnect
	// attempt the client gave up on meanwhile (a loaded machine) counts there too, so the
	// client's two handshakes above are the exact figure and this one is a floor.
	got := counter(t, n, "quicmq_client_connections_total")
	if got < 2 {
		t.Errorf("node accepted %v connections, want at least 2 (the fallback reconnects)", got)
	}
	t.Logf("fallback: %d records over 10 topics, none lost or duplicated; the node accepted %v connections", res.records, got)

	plain := dialAddr(t, n, relay.Addr(), func(o *client.Options) { o.MigrateCheck, o.MigrateTimeout = -1, 300*time.Millisecond })
	ctx := testCtx(t)
	err := plain.Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), "probe") {
		t.Fatalf("Migrate through a relay that refuses the probe: %v, want a probe failure", err)
	}
	t.Logf("without Reconnect: %v", err)
	if st := plain.Stats(); st.Handshakes != 1 || st.FailedMigrations != 1 || st.Fallbacks != 0 {
		t.Errorf("Stats = %+v, want 1 handshake, 1 failed migration, no fallback", st)
	}
	if _, err := plain.Publish(ctx, client.Message{Topic: "fb.after", Payload: []byte("x")}); err != nil {
		t.Errorf("publish after a failed migration: %v", err)
	}
}

// TestMigrateOnRouteChange: with MigrateCheck, a change of the local address the host's
// route to the node uses migrates the connection on its own.
func TestMigrateOnRouteChange(t *testing.T) {
	n := newTestNode(t)
	var src atomic.Value
	src.Store("192.0.2.1")
	route := func(*net.UDPAddr) (string, error) { return src.Load().(string), nil }
	c := dial(t, n, func(o *client.Options) {
		*o = client.WithRouteSource(*o, route)
		o.MigrateCheck = 5 * time.Millisecond
	})
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, "route.t", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, c, "route.t", "a", 10)
	nextN(t, sub, 10)
	src.Store("198.51.100.7")
	waitMigrations(t, c, 1)
	publishN(t, c, "route.t", "b", 10)
	for i, r := range nextN(t, sub, 10) {
		if r.Offset != uint64(10+i) {
			t.Fatalf("record %d after the migration at offset %d", i, r.Offset)
		}
	}
	if st := c.Stats(); st.Handshakes != 1 || st.Migrations != 1 {
		t.Errorf("Stats = %+v, want 1 handshake and 1 migration", st)
	}
}

// TestMigrateOnRouteChangeRetries: a migration after a route change whose probe goes
// unanswered (a relay that admits no new flow yet: the new network is not up) is tried
// again, and completes once the new path answers.
func TestMigrateOnRouteChangeRetries(t *testing.T) {
	n := newTestNode(t)
	relay := newNATRelay(t, n.Addr().String())
	relay.refuseNew.Store(true)
	var src atomic.Value
	src.Store("192.0.2.1")
	route := func(*net.UDPAddr) (string, error) { return src.Load().(string), nil }
	c := dialAddr(t, n, relay.Addr(), func(o *client.Options) {
		*o = client.WithRouteSource(*o, route)
		o.MigrateCheck, o.MigrateTimeout = 5*time.Millisecond, 100*time.Millisecond
	})
	src.Store("198.51.100.7")
	testlog.WaitForErr(t, 20*time.Second, "a failed migration after the route changed", func() error {
		if st := c.Stats(); st.FailedMigrations == 0 {
			return fmt.Errorf("Stats = %+v", st)
		}
		return nil
	})
	relay.refuseNew.Store(false)
	waitMigrations(t, c, 1)
	if st := c.Stats(); st.Handshakes != 1 || st.Fallbacks != 0 {
		t.Errorf("Stats = %+v, want 1 handshake and no fallback", st)
	}
	publishN(t, c, "route.retry", "a", 3)
}

// waitMigrations waits until c counts want migrations, and says what it counts otherwise.
func waitMigrations(t *testing.T, c *client.Conn, want uint64) {
	t.Helper()
	testlog.WaitForErr(t, 20*time.Second, "a migration after the route changed", func() error {
		if st := c.Stats(); st.Migrations != want {
			return fmt.Errorf("Stats = %+v", st)
		}
		return nil
	})
}

// TestMigrateLostConnection: Migrate on a connection that was lost (its node stopped and
// started again) reconnects with Reconnect, and reports the loss without it.
func TestMigrateLostConnection(t *testing.T) {
	data := t.TempDir()
	n := newTestNode(t, func(c *node.Config) { c.DataDir = data })
	addr := n.Addr().String()
	opts := func(reconnect bool) func(*client.Options) {
		return func(o *client.Options) { o.Reconnect, o.MigrateCheck = reconnect, -1 }
	}
	c, plain := dial(t, n, opts(true)), dial(t, n, opts(false))
	publishN(t, c, "lost.t", "a", 1)
	n.stop()
	newTestNode(t, func(c *node.Config) { c.DataDir, c.Listen = data, addr })
	ctx := testCtx(t)
	if err := c.Migrate(ctx); err != nil {
		t.Fatalf("Migrate with Reconnect after the node restarted: %v", err)
	}
	if st := c.Stats(); st.Handshakes != 2 || st.Fallbacks != 1 || st.Migrations != 0 {
		t.Errorf("Stats = %+v, want 2 handshakes and 1 fallback", st)
	}
	if a := publishN(t, c, "lost.t", "b", 1); a[0].Offset != 1 {
		t.Errorf("publish after the fallback at offset %d, want 1", a[0].Offset)
	}
	if err := plain.Migrate(ctx); err == nil {
		t.Error("Migrate without Reconnect after the node restarted: no error")
	} else {
		t.Logf("without Reconnect: %v", err)
	}
}

// streamResult is what runStream saw: every delivery's arrival time, sorted.
type streamResult struct {
	arrivals []time.Time
	records  int
}

// longestGap is the longest time between two deliveries in a row that overlaps [from, to].
func (r streamResult) longestGap(from, to time.Time) time.Duration {
	var longest time.Duration
	for i := 1; i < len(r.arrivals); i++ {
		if a, b := r.arrivals[i-1], r.arrivals[i]; b.After(from) && a.Before(to) {
			longest = max(longest, b.Sub(a))
		}
	}
	return longest
}

// runStream subscribes to topics prefix.t0 ... and publishes to them in rounds (one record
// per topic, payload the round number), pipelined, until well after move returned: move is
// called once 50 rounds were delivered, and publishing stops 50 rounds after it. It checks
// that every subscription received exactly the records of every round, in order, each once.
func runStream(t *testing.T, c *client.Conn, prefix string, topics int, move func()) streamResult {
	t.Helper()
	ctx := testCtx(t)
	subs := make([]*client.Subscription, topics)
	for i := range subs {
		var err error
		if subs[i], err = c.Subscribe(ctx, fmt.Sprintf("%s.t%d", prefix, i), client.SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The publisher: rounds until stop, the acks awaited in order by a second goroutine.
	stop := make(chan struct{})
	rounds := make(chan int, 1)
	futures := make(chan *client.Future, 4096)
	var pubWG sync.WaitGroup
	pubWG.Add(2)
	go func() {
		defer pubWG.Done()
		defer close(futures)
		for round := 0; ; round++ {
			select {
			case <-stop:
				rounds <- round
				return
			default:
			}
			for i := range topics {
				f, err := c.PublishAsync(ctx, client.Message{Topic: fmt.Sprintf("%s.t%d", prefix, i), Payload: strconv.AppendInt(nil, int64(round), 10)})
				if err != nil {
					t.Errorf("publish round %d topic %d: %v", round, i, err)
					rounds <- round
					return
				}
				futures <- f
			}
		}
	}()
	go func() {
		defer pubWG.Done()
		for f := range futures {
			if _, err := f.Wait(ctx); err != nil {
				t.Errorf("publish: %v", err)
			}
		}
	}()

	// The subscribers, each on its own goroutine; total is set once publishing stopped.
	var delivered atomic.Int64
	total := atomic.Int64{}
	total.Store(-1)
	arrivals := make([][]time.Time, topics)
	var subWG sync.WaitGroup
	for i, sub := range subs {
		subWG.Add(1)
		go func() {
			defer subWG.Done()
			for got := int64(0); ; {
				if want := total.Load(); want >= 0 && got == want {
					return
				}
				wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				r, err := sub.Next(wait)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					continue // no record now: look at total again
				}
				if err != nil {
					t.Errorf("topic %d after %d records: %v", i, got, err)
					return
				}
				arrivals[i] = append(arrivals[i], time.Now())
				if string(r.Payload) != strconv.FormatInt(got, 10) || r.Offset != uint64(got) {
					t.Errorf("topic %d record %d: offset %d payload %q (lost, duplicated or reordered)", i, got, r.Offset, r.Payload)
					return
				}
				got++
				delivered.Add(1)
			}
		}()
	}

	testlog.WaitFor(t, 20*time.Second, "50 rounds delivered", func() bool { return delivered.Load() >= int64(50*topics) })
	move()
	at := delivered.Load()
	testlog.WaitFor(t, 20*time.Second, "50 rounds delivered after the move", func() bool { return delivered.Load() >= at+int64(50*topics) || t.Failed() })
	close(stop)
	pubWG.Wait()
	total.Store(int64(<-rounds))
	subWG.Wait()

	res := streamResult{}
	for _, a := range arrivals {
		res.arrivals = append(res.arrivals, a...)
	}
	slices.SortFunc(res.arrivals, func(a, b time.Time) int { return a.Compare(b) })
	res.records = len(res.arrivals)
	return res
}

// dialAddr connects to n through addr (a relay in front of it).
func dialAddr(t testing.TB, n *testNode, addr string, opts ...func(*client.Options)) *client.Conn {
	t.Helper()
	o := client.Options{CAFile: n.CAFile(), Name: t.Name()}
	for _, m := range opts {
		m(&o)
	}
	c, err := client.Dial(testCtx(t), o, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// counter is the value of the node's counter name (unlabelled).
func counter(t testing.TB, n *testNode, name string) float64 {
	t.Helper()
	mfs, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("node has no metric %s", name)
	return 0
}

// waitCounter waits until the node's counter name reaches want, and fails if it passes it.
func waitCounter(t testing.TB, n *testNode, name string, want float64) {
	t.Helper()
	testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("%s = %v", name, want), func() bool { return counter(t, n, name) >= want })
	if got := counter(t, n, name); got != want {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

func udpAddr(t testing.TB, s string) *net.UDPAddr {
	t.Helper()
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
