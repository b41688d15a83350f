package federation

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// deliveryClock records, per topic, when the topic's log advanced at the mirroring node: the
// moments its mirror stream delivered.
type deliveryClock struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	at   map[string][]time.Time
}

func watchDeliveries(l *wal.Log, topics []string) *deliveryClock {
	c := &deliveryClock{stop: make(chan struct{}), at: make(map[string][]time.Time)}
	for _, topic := range topics {
		wake := make(chan struct{}, 1)
		cancel := l.Notify(topic, wake)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer cancel()
			var ts []time.Time
			defer func() {
				c.mu.Lock()
				c.at[topic] = ts
				c.mu.Unlock()
			}()
			for {
				select {
				case <-c.stop:
					return
				case <-wake:
					ts = append(ts, time.Now())
				}
			}
		}()
	}
	return c
}

func (c *deliveryClock) halt() map[string][]time.Time {
	close(c.stop)
	c.wg.Wait()
	return c.at
}

// maxGap is the longest time any topic went without a delivery within [from, to), and the
// topic. A gap that spans from counts from from.
func maxGap(at map[string][]time.Time, from, to time.Time) (time.Duration, string) {
	var worst time.Duration
	var topic string
	for t, ts := range at {
		last := from
		for _, x := range append(slices.Clone(ts), to) {
			if x.Before(from) {
				continue
			}
			if x.After(to) {
				x = to
			}
			if g := x.Sub(last); g > worst {
				worst, topic = g, t
			}
			last = x
			if !x.Before(to) {
				break
			}
		}
	}
	return worst, topic
}

// publishRound appends one record "b-<round>" to each topic, all in flight at once (group
// commit), and waits for them.
func publishRound(t testing.TB, n *fedNode, topics []string, round int) {
	var wg sync.WaitGroup
	errs := make(chan error, len(topics))
	for _, topic := range topics {
		wg.Add(1)
		n.log.AppendAsync(wal.AppendRequest{Topic: topic, Records: []wal.Record{{Payload: fmt.Appendf(nil, "b-%d", round)}}},
			func(r wal.AppendResult) {
				if r.Err != nil {
					errs <- r.Err
				}
				wg.Done()
			})
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Errorf("publish round %d: %v", round, err)
	default:
	}
}

func localPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int32(port)
}

// The dialing side moves one link carrying 100 mirror streams to a new UDP socket while the
// origin publishes to all 100 topics: the same connection carries on (Since unchanged, no
// handshake), counted as one migration and no reconnect, and no stream loses or repeats a
// record. Then a migration whose path cannot be validated (the peer drops everything from
// the new socket) falls back to a reconnect, and every stream resumes from its cursor. The
// largest gap between two deliveries of any stream is measured in each phase.
func TestMigrationUnderTrafficOn100Streams(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"mig.>"}})
	b := m.addNode("b", nodeOpts{})
	topics := make([]string, 100)
	for i := range topics {
		topics[i] = fmt.Sprintf("mig.%03d", i)
	}
	round := 0
	publishRound(t, b, topics, round)
	round++
	testlog.WaitFor(t, 20*time.Second, "100 mirror streams", func() bool {
		li, _ := a.link("b")
		if len(li.Mirrors) != 100 {
			return false
		}
		for _, topic := range topics {
			if a.next(topic) != 1 {
				return false
			}
		}
		return true
	})
	clock := watchDeliveries(a.log, topics)

	const interval = 25 * time.Millisecond // 100 topics: 4000 records/s
	stop := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			publishRound(t, b, topics, round)
			round++
		}
	}()

	// Baseline.
	pub0 := time.Now()
	base0 := pub0
	testlog.Pause(context.Background(), time.Second) // the baseline's measurement window

	// 1. Migration.
	before, _ := a.link("b")
	mig0 := time.Now()
	if err := a.fedNow().Migrate(context.Background(), "b"); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	mig1 := time.Now()
	after, _ := a.link("b")
	if !after.Since.Equal(before.Since) || after.Migrations != 1 || after.Reconnects != 0 || after.LocalAddr == before.LocalAddr || !after.Connected {
		t.Fatalf("after migration: since %v -> %v, migrations %d, reconnects %d, local %s -> %s: want the same connection on a new socket",
			before.Since, after.Since, after.Migrations, after.Reconnects, before.LocalAddr, after.LocalAddr)
	}
	if len(after.Mirrors) != 100 {
		t.Fatalf("%d mirrors after the migration, want 100", len(after.Mirrors))
	}
	testlog.Pause(context.Background(), time.Second) // the measurement window after the migration
	if li, _ := a.link("b"); !li.Since.Equal(before.Since) || li.Reconnects != 0 {
		t.Fatalf("the connection did not survive the migration: %+v", li)
	}

	// 2. A migration that cannot complete: b accepts packets only from the socket in use.
	b.filter.onlyPort.Store(localPort(t, after.LocalAddr))
	b.filter.mode.Store(filterOnlyPort)
	fail0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err := a.fedNow().Migrate(ctx, "b")
	cancel()
	probeFailed := time.Now()
	b.filter.mode.Store(filterPass) // the reconnect dials from another new socket
	if err == nil {
		t.Fatal("Migrate succeeded through a path the peer drops")
	}
	re := waitReconnected(t, a, "b", after.Since, 15*time.Second)
	reconnected := time.Now()
	if re.Reconnects != 1 || re.Migrations != 1 {
		t.Fatalf("after the failed migration: reconnects %d migrations %d, want 1 and 1", re.Reconnects, re.Migrations)
	}
	testlog.WaitFor(t, 10*time.Second, "100 mirrors again", func() bool { li, _ := a.link("b"); return len(li.Mirrors) == 100 })
	testlog.Pause(context.Background(), time.Second) // the measurement window after the fallback

	close(stop)
	<-pubDone
	pubTime := time.Since(pub0)
	for _, topic := range topics {
		testlog.WaitFor(t, 20*time.Second, topic+" caught up", func() bool { return a.next(topic) == b.next(topic) })
	}
	at := clock.halt()
	total := 0
	for _, topic := range topics {
		n := checkMirrored(t, a, b, topic)
		if n != round {
			t.Fatalf("%s: %d records mirrored, want %d", topic, n, round)
		}
		total += n
	}
	for name, want := range map[string]float64{"quicmq_link_migrations_total": 1, "quicmq_link_reconnects_total": 1} {
		if got := metricValue(t, a.registry(), name, map[string]string{"peer_region": "b"}); got != want {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
	}

	baseGap, _ := maxGap(at, base0.Add(200*time.Millisecond), mig0)
	migGap, migTopic := maxGap(at, mig0, mig1.Add(500*time.Millisecond))
	failGap, failTopic := maxGap(at, fail0, reconnected.Add(500*time.Millisecond))
	t.Logf("100 streams, %d records each (%d in all, %.0f records/s; a round every %v at most): no loss, no duplicate",
		round, total, float64(total)/pubTime.Seconds(), interval)
	t.Logf("largest delivery gap of any stream: baseline %v; during the migration %v (%s; Migrate took %v, Since unchanged, migrations 1, reconnects 0)",
		baseGap.Round(time.Millisecond), migGap.Round(time.Millisecond), migTopic, mig1.Sub(mig0).Round(time.Microsecond))
	t.Logf("failed migration: probe gave up after %v (%v); reconnected %v later; largest gap %v (%s); reconnects 1",
		probeFailed.Sub(fail0).Round(time.Millisecond), err, reconnected.Sub(probeFailed).Round(time.Millisecond),
		failGap.Round(time.Millisecond), failTopic)
}

// When the host's addresses change, every link migrates to a new socket on its own: same
// connection, counted as a migration, and mirroring carries on exactly once.
func TestAddressChangeMigratesLinks(t *testing.T) {
	var addrs atomic.Value
	addrs.Store([]net.Addr{&net.IPNet{IP: net.ParseIP("10.0.0.1"), Mask: net.CIDRMask(24, 32)}})
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"addr.>"}, localAddrs: func() ([]net.Addr, error) {
		return addrs.Load().([]net.Addr), nil
	}})
	b := m.addNode("b", nodeOpts{})
	b.publishSeq(t, "addr.t", 0, 100)
	testlog.WaitFor(t, 20*time.Second, "first mirror", func() bool { return a.next("addr.t") == 100 })
	before, _ := a.link("b")

	addrs.Store([]net.Addr{&net.IPNet{IP: net.ParseIP("10.0.0.2"), Mask: net.CIDRMask(24, 32)}})
	testlog.WaitFor(t, 10*time.Second, "a migration", func() bool {
		li, _ := a.link("b")
		return li.Migrations == 1
	})
	b.publishSeq(t, "addr.t", 100, 200)
	testlog.WaitFor(t, 20*time.Second, "mirror after the migration", func() bool { return a.next("addr.t") == 200 })
	after, _ := a.link("b")
	if after.Reconnects != 0 || !after.Since.Equal(before.Since) || after.LocalAddr == before.LocalAddr {
		t.Fatalf("before %+v\nafter %+v: want the same connection on a new socket", before, after)
	}
	checkMirrored(t, a, b, "addr.t")
}
