package federation

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/testlog"
)

// The link's byte and packet figures are counters over all its connections: after a link
// cut and after the peer restarts (each a new connection, whose own figures start at zero)
// they are at least what they were before, and they go on rising. The old per-connection
// gauges are gone, and the series end with the link when the peer leaves the mesh.
func TestLinkCountersSurviveReconnects(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"cnt.>"}})
	b := m.addNode("b", nodeOpts{})
	total := func(name string) float64 {
		t.Helper()
		return metricValue(t, a.registry(), name, map[string]string{"peer_region": "b", "peer_node": "node-b"})
	}
	names := []string{"quicmq_link_sent_bytes_total", "quicmq_link_received_bytes_total",
		"quicmq_link_sent_packets_total", "quicmq_link_received_packets_total"}
	sent := 0
	round := func(what string, before map[string]float64) map[string]float64 {
		t.Helper()
		b.publishSeq(t, "cnt.t", sent, sent+300)
		sent += 300
		testlog.WaitFor(t, 10*time.Second, what+": records mirrored", func() bool { return a.next("cnt.t") == uint64(sent) })
		now := make(map[string]float64)
		for _, n := range names {
			now[n] = total(n)
			if now[n] <= before[n] {
				t.Fatalf("%s: %s %v, was %v before: want it higher", what, n, now[n], before[n])
			}
		}
		return now
	}
	afterReconnect := func(what string, before map[string]float64) {
		t.Helper()
		for _, n := range names {
			if v := total(n); v < before[n] {
				t.Fatalf("%s: %s fell from %v to %v: a counter reset", what, n, before[n], v)
			}
		}
	}

	testlog.WaitFor(t, 10*time.Second, "link a->b", func() bool { li, ok := a.link("b"); return ok && li.Connected })
	v := round("first connection", map[string]float64{})

	li, _ := a.link("b")
	if n := a.fedNow().cutLinks("b"); n != 1 {
		t.Fatalf("cut %d connections, want 1", n)
	}
	waitReconnected(t, a, "b", li.Since, 10*time.Second)
	afterReconnect("after a link cut", v)
	v = round("after a link cut", v)

	// b restarts on its address while the mesh still lists it (as gossip lists a node that
	// crashed until it is reaped): a's link to it reconnects.
	li, _ = a.link("b")
	b.listed.Store(b.addr.Load())
	b.stop()
	b.restart()
	b.listed.Store(nil)
	waitReconnected(t, a, "b", li.Since, 20*time.Second)
	afterReconnect("after the peer restarted", v)
	round("after the peer restarted", v)

	mfs, err := a.registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]dto.MetricType{}
	for _, mf := range mfs {
		seen[mf.GetName()] = mf.GetType()
	}
	for _, n := range append(names, "quicmq_link_lost_packets_total", "quicmq_link_lost_bytes_total") {
		if typ, ok := seen[n]; !ok || typ != dto.MetricType_COUNTER {
			t.Errorf("%s: type %v (exported %v), want a counter", n, typ, ok)
		}
	}
	for _, old := range []string{"quicmq_link_sent_bytes", "quicmq_link_received_bytes", "quicmq_link_lost_packets"} {
		if _, ok := seen[old]; ok {
			t.Errorf("the per-connection gauge %s is still exported", old)
		}
	}

	// b leaves the mesh: the link ends for good, and its series go with it.
	b.stop()
	testlog.WaitFor(t, 10*time.Second, "the series of the link to b deleted", func() bool {
		mfs, err := a.registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "quicmq_link_sent_bytes_total" && len(mf.GetMetric()) > 0 {
				return false
			}
		}
		return true
	})
}

// A peer's links come back (upSince, park.go's live lane) when a connection opens after an
// outage longer than the grace; a link replaced (its successor opening beside it or at
// once after it) or a short blip keeps the earlier time.
func TestLinkCountersUpSince(t *testing.T) {
	c := newLinkCounters()
	t0 := time.Unix(1000, 0)
	const grace = 2 * time.Second
	conn := func() *quic.Conn { return new(quic.Conn) } // keys only: never read
	a := conn()
	c.comeBackLocked(t0, grace)
	c.open[a] = &linkCounts{}
	if got := c.since(); !got.Equal(t0) {
		t.Fatalf("first connection: since %v, want %v", got, t0)
	}
	c.comeBackLocked(t0.Add(8*time.Second), grace) // a successor beside it: replaced
	b := conn()
	c.open[b] = &linkCounts{}
	delete(c.open, a)
	delete(c.open, b)
	c.endedAt = t0.Add(9 * time.Second)
	c.comeBackLocked(t0.Add(10*time.Second), grace) // back 1 s later: a blip
	if got := c.since(); !got.Equal(t0) {
		t.Fatalf("after a replacement and a blip: since %v, want %v", got, t0)
	}
	back := t0.Add(40 * time.Second) // 31 s later: an outage
	c.comeBackLocked(back, grace)
	if got := c.since(); !got.Equal(back) {
		t.Fatalf("after an outage: since %v, want %v", got, back)
	}
}
