package gossip

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicmq/quicmq/internal/testlog"
)

// tlogWriter sends log lines to t.Log until the test's cleanup has run; serf goroutines
// that outlive a test for a moment must not call t.Log after it ended.
type tlogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tlogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testLogger logs at Warn and above to t.Log (serf and memberlist are chatty at Info).
func testLogger(t testing.TB) *slog.Logger {
	w := &tlogWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() }) // first registered: runs last
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func newKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// testNodeConfig is a ProfileTest config on 127.0.0.1 port 0 (WAN too when wan is set),
// with a "quic" tag derived from the name and its own registry.
func testNodeConfig(t testing.TB, name, region string, key []byte, wan bool) Config {
	cfg := Config{
		Name:       name,
		Region:     region,
		LANAddr:    "127.0.0.1:0",
		Key:        key,
		Tags:       map[string]string{"quic": "quic-" + name + ":4433"},
		Profile:    ProfileTest,
		Logger:     testLogger(t),
		Registerer: prometheus.NewRegistry(),
	}
	if wan {
		cfg.WANAddr = "127.0.0.1:0"
	}
	return cfg
}

// testNode is a Gossip with Run going and a subscription whose events a collector
// goroutine records with their arrival time.
type testNode struct {
	*Gossip
	t       testing.TB
	reg     *prometheus.Registry
	runErr  chan error
	cancel  context.CancelFunc
	stopped bool

	unsubscribe func()
	collected   chan struct{} // closed when the collector has exited
	hist        struct {
		sync.Mutex
		events []seenEvent
	}
}

type seenEvent struct {
	Event
	at time.Time
}

// startTestNode creates and runs a node; t.Cleanup closes it (if the test did not) and
// checks that Run returned.
func startTestNode(t testing.TB, cfg Config) *testNode {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	n := &testNode{Gossip: g, t: t, runErr: make(chan error, 1), collected: make(chan struct{})}
	n.reg, _ = cfg.Registerer.(*prometheus.Registry)
	events := make(chan Event, 4096)
	n.unsubscribe = g.Subscribe(events)
	stopCollect := make(chan struct{})
	go func() { // owned by the cleanup below, which waits for it
		defer close(n.collected)
		for {
			select {
			case ev := <-events:
				n.hist.Lock()
				n.hist.events = append(n.hist.events, seenEvent{ev, time.Now()})
				n.hist.Unlock()
			case <-stopCollect:
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.runErr <- g.Run(ctx) }()
	t.Cleanup(func() {
		n.stop(t)
		n.unsubscribe()
		close(stopCollect)
		<-n.collected
	})
	return n
}

// mark is the position in n's event history from which a later waitEvent looks.
func (n *testNode) mark() int {
	n.hist.Lock()
	defer n.hist.Unlock()
	return len(n.hist.events)
}

// waitEvent waits until n has received, at or after history position from, an event of
// this kind and pool about name; it returns the event and when it arrived.
func (n *testNode) waitEvent(from int, timeout time.Duration, kind EventKind, pool Pool, name string) (Event, time.Time) {
	n.t.Helper()
	var found Event
	var at time.Time
	testlog.WaitForErr(n.t, timeout, fmt.Sprintf("%s: a %s event for %s in the %s pool", n.cfg.Name, kind, name, pool), func() error {
		n.hist.Lock()
		defer n.hist.Unlock()
		for _, ev := range n.hist.events[from:] {
			if ev.Kind == kind && ev.Pool == pool && ev.Member.Name == name {
				found, at = ev.Event, ev.at
				return nil
			}
		}
		return fmt.Errorf("member now: %+v", n.member(name))
	})
	return found, at
}

// stop closes the node (gracefully) once and waits for Run.
func (n *testNode) stop(t testing.TB) {
	t.Helper()
	if n.stopped {
		return
	}
	n.stopped = true
	if err := n.Close(); err != nil {
		t.Errorf("Close(%s): %v", n.cfg.Name, err)
	}
	n.cancel()
	select {
	case err := <-n.runErr:
		if err := runOutcome(err); err != nil {
			t.Errorf("Run(%s): %v", n.cfg.Name, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Run(%s) did not return after Close", n.cfg.Name)
	}
}

// runOutcome is what a test node's Run returned, less ErrRunning: Run is called once, in
// its own goroutine, so ErrRunning only means that Close came first (on a loaded machine
// the goroutine may not have been scheduled yet), and Close then did the teardown itself.
func runOutcome(err error) error {
	if errors.Is(err, ErrRunning) {
		return nil
	}
	return err
}

// stopAll closes nodes in parallel: a graceful leave takes up to about a second each.
func stopAll(t testing.TB, nodes ...*testNode) {
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n.stopped {
			continue
		}
		n.stopped = true
		wg.Go(func() {
			if err := n.Close(); err != nil {
				t.Errorf("Close(%s): %v", n.cfg.Name, err)
			}
			n.cancel()
			if err := runOutcome(<-n.runErr); err != nil {
				t.Errorf("Run(%s): %v", n.cfg.Name, err)
			}
		})
	}
	wg.Wait()
}

func (n *testNode) member(name string) Member {
	for _, m := range n.Members() {
		if m.Name == name {
			return m
		}
	}
	return Member{}
}

// gauge reads one series from the node's registry; -1 when it is missing.
func (n *testNode) metric(name string, labels map[string]string) float64 {
	n.t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		n.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			return metricValue(m)
		}
	}
	return -1
}

func metricValue(m *dto.Metric) float64 {
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return -1
}

// goroutines returns the stacks of live goroutines that contain any of the given substrings.
func goroutines(subs ...string) []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		for _, s := range subs {
			if bytes.Contains(g, []byte(s)) {
				out = append(out, string(g))
				break
			}
		}
	}
	return out
}

func describe(ms []Member) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "[%s %s %s %s] ", m.Name, m.Region, m.Status, m.Pools)
	}
	return b.String()
}
