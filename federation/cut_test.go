package federation

import (
	"context"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// steadyPublisher appends batches of records "b-<i>" to topic at origin every interval
// until stopped.
type steadyPublisher struct {
	stop chan struct{}
	done chan struct{}
	sent atomic.Int64
}

func startPublisher(t *testing.T, origin *fedNode, topic string, batch int, interval time.Duration) *steadyPublisher {
	p := &steadyPublisher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		i := 0
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			origin.publishSeq(t, topic, i, i+batch)
			i += batch
			p.sent.Store(int64(i))
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *steadyPublisher) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// waitReconnected waits until a's link to region is connected on a connection other than
// the one established at since, and returns when that happened.
func waitReconnected(t *testing.T, a *fedNode, region string, since time.Time, d time.Duration) LinkInfo {
	t.Helper()
	var li LinkInfo
	testlog.WaitFor(t, d, "the link to reconnect", func() bool {
		li, _ = a.link(region)
		return li.Connected && li.Since.After(since)
	})
	return li
}

// The link's connection is cut again and again under steady publishing at the origin, then
// the origin is partitioned away for a second while a burst is published there, then healed.
// The mirror resumes from its cursor each time: zero gaps, zero duplicates. Figures: the
// reconnect time after a cut and the catch-up rate after the partition.
func TestLinkCutUnderPublishingHeals(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"cut.>"}})
	b := m.addNode("b", nodeOpts{})
	const topic = "cut.t"
	pubStart := time.Now()
	pub := startPublisher(t, b, topic, 5, 2*time.Millisecond)
	testlog.WaitFor(t, 10*time.Second, "mirror up", func() bool { return a.next(topic) > 0 })

	rng := testlog.Rand(t, "the times between cuts")
	const cuts = 8
	var reconnect []time.Duration
	for i := 0; i < cuts; i++ {
		testlog.Pause(context.Background(), time.Duration(80+rng.IntN(170))*time.Millisecond) // the seeded cut schedule
		before, _ := a.link("b")
		at := time.Now()
		if n := a.fedNow().cutLinks("b"); n != 1 {
			t.Fatalf("cut %d: %d connections closed, want 1", i, n)
		}
		waitReconnected(t, a, "b", before.Since, 10*time.Second)
		reconnect = append(reconnect, time.Since(at))
	}

	// Partition: b receives nothing; a notices (as its idle timer would) and redials into
	// the void, while a burst lands at the origin.
	before, _ := a.link("b")
	b.filter.mode.Store(filterDropAll)
	a.fedNow().cutLinks("b")
	const burst = 20000
	b.publishSeq(t, "cut.burst", 0, burst)
	testlog.Pause(context.Background(), time.Second) // the partition's length
	heal := time.Now()
	target := b.next("cut.burst")
	b.filter.mode.Store(filterPass)
	li := waitReconnected(t, a, "b", before.Since, 15*time.Second)
	connected := time.Now()
	atConnect := a.next("cut.burst")
	testlog.WaitFor(t, 30*time.Second, "catch-up after the partition", func() bool { return a.next("cut.burst") >= target })
	caughtUp := time.Now()

	pub.halt()
	fence(t, a, b, topic)
	n := checkMirrored(t, a, b, topic)
	if want := int(b.next(topic)); n != want {
		t.Fatalf("%s: %d records mirrored, origin has %d", topic, n, want)
	}
	if n := checkMirrored(t, a, b, "cut.burst"); n != burst {
		t.Fatalf("cut.burst: %d records mirrored, want %d", n, burst)
	}
	li, _ = a.link("b")
	if li.Reconnects != cuts+1 || li.Migrations != 0 {
		t.Fatalf("reconnects %d migrations %d, want %d and 0", li.Reconnects, li.Migrations, cuts+1)
	}
	if got := metricValue(t, a.registry(), "quicmq_link_reconnects_total", map[string]string{"peer_region": "b"}); got != cuts+1 {
		t.Fatalf("quicmq_link_reconnects_total %v, want %d", got, cuts+1)
	}

	backlog := target - atConnect
	catchUp := caughtUp.Sub(connected)
	t.Logf("%d cuts under steady publishing (%.0f records/s): cut -> link up again %v", cuts,
		float64(pub.sent.Load())/time.Since(pubStart).Seconds(), fmtDurations(reconnect))
	t.Logf("partition 1 s, heal -> link up %v; catch-up of %d records in %v = %.0f records/s; %d packets dropped during the partition",
		connected.Sub(heal).Round(time.Millisecond), backlog, catchUp.Round(time.Millisecond),
		float64(backlog)/catchUp.Seconds(), b.filter.dropped.Load())
	t.Logf("total %s: %d records, zero gaps, zero duplicates; reconnects %d", topic, n, li.Reconnects)
}

func fmtDurations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(time.Millisecond/10).String())
	}
	return strings.Join(s, " ")
}

// slowSyncFS delays every WAL sync of a Pebble store, as a busy or networked disk does
// (tens of milliseconds), so that a mirrored batch is often between its append and its
// fsync when the link goes down.
func slowSyncFS(delay time.Duration) func() wal.Options {
	return func() wal.Options {
		return wal.Options{FS: errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
			if strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) {
				time.Sleep(delay) // a slow disk: the delay is the fault injected
			}
			return nil
		}))}
	}
}

// I7 with a slow disk: the link is cut while a mirrored batch waits for its fsync. The
// append's outcome is then unknown to the mirror (its context ended), but the batch still
// commits, with its cursor. The mirror on the new connection must resume from that cursor,
// not from the one before it, or the batch is appended twice.
func TestLinkCutDuringMirroredFsync(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"slow.>"}, walFS: slowSyncFS(100 * time.Millisecond)})
	b := m.addNode("b", nodeOpts{})
	const topic = "slow.t"
	pub := startPublisher(t, b, topic, 20, 5*time.Millisecond)
	testlog.WaitFor(t, 10*time.Second, "mirror up", func() bool { return a.next(topic) > 0 })

	rng := testlog.Rand(t, "the times between cuts")
	const cuts = 10
	for i := 0; i < cuts; i++ {
		testlog.Pause(context.Background(), time.Duration(60+rng.IntN(60))*time.Millisecond) // the seeded cut schedule
		before, _ := a.link("b")
		a.fedNow().cutLinks("b")
		waitReconnected(t, a, "b", before.Since, 10*time.Second)
	}
	pub.halt()
	fence(t, a, b, topic)
	if got, want := a.next(topic), b.next(topic); got != want {
		t.Errorf("a's log of %s has %d records, the origin %d", topic, got, want)
	}
	n := checkMirrored(t, a, b, topic)
	t.Logf("%d cuts with 100 ms fsyncs: %d records mirrored exactly once", cuts, n)
}

// A link that reconnects closes the UDP socket of the connection it gave up. (quic-go's
// Transport.Close does not close a socket it was handed.) Garbage collection is off for the
// test, so that no finalizer closes a leaked socket behind the link's back.
func TestReconnectClosesOldSockets(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"fd.>"}})
	b := m.addNode("b", nodeOpts{})
	b.publishSeq(t, "fd.t", 0, 10)
	testlog.WaitFor(t, 10*time.Second, "mirror up", func() bool { return a.next("fd.t") == 10 })

	defer setGCPercent(setGCPercent(-1))
	var old []string
	for i := 0; i < 5; i++ {
		before, _ := a.link("b")
		old = append(old, before.LocalAddr)
		a.fedNow().cutLinks("b")
		waitReconnected(t, a, "b", before.Since, 10*time.Second)
	}
	var held []string
	for _, addr := range old {
		if c, err := listenUDP(addr); err != nil {
			held = append(held, fmt.Sprintf("%s (%v)", addr, err))
		} else {
			c.Close()
		}
	}
	if len(held) > 0 {
		t.Fatalf("%d of %d sockets of closed link connections are still open: %s", len(held), len(old), strings.Join(held, "; "))
	}
}

func setGCPercent(p int) int { return debug.SetGCPercent(p) }

func listenUDP(addr string) (*net.UDPConn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	return net.ListenUDP("udp", ua)
}
