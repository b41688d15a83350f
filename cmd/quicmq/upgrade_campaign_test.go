package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/release"
	"github.com/quicmq/quicmq/internal/testlog"
)

// The rolling-upgrade campaign (issue 31; docs/operations.md, "Upgrading one node at a time"):
// the previous release, built from the repository's own history (internal/release/RELEASES),
// runs a replicated region rc of three node processes and a region us of one that mirrors
// rc.>; under publishing and mirroring, each node is stopped (SIGTERM) and started again on
// its data directory with the head's build, one at a time. It checks that nothing
// acknowledged is lost or stored twice (the replicated campaigns' judge: porcupine over the
// whole history, every node's log read back), that no publish is refused, that us holds rc's
// records once each in rc's order, and that clients connected before the upgrade kept
// working through it: a publisher and two readers on one Conn each for the whole run.
//
// It takes a few minutes: set QUICMQ_UPGRADE_CAMPAIGN=1 to run it. It upgrades from the
// release before the latest listed, or from the one QUICMQ_UPGRADE_FROM names (v0.2.0, say,
// once the head is past it); QUICMQ_UPGRADE_FROM_BIN names a build of that release made
// before, to skip building it again.
//
//	QUICMQ_UPGRADE_CAMPAIGN=1 go test ./cmd/quicmq -run TestRollingUpgrade -v -timeout 15m
func TestRollingUpgrade(t *testing.T) {
	if os.Getenv("QUICMQ_UPGRADE_CAMPAIGN") == "" {
		t.Skip("the rolling-upgrade campaign builds the previous release and runs for minutes: set QUICMQ_UPGRADE_CAMPAIGN=1")
	}
	// From the release before the latest (the head is the latest or follows it), or from the
	// one QUICMQ_UPGRADE_FROM names.
	prev, ok := release.Previous()
	if name := os.Getenv("QUICMQ_UPGRADE_FROM"); name != "" {
		if prev, ok = release.Named(name); !ok {
			t.Fatalf("QUICMQ_UPGRADE_FROM=%s: no such release in internal/release/RELEASES", name)
		}
	}
	if !ok {
		t.Skip("internal/release/RELEASES lists no previous release")
	}
	oldBin := buildRelease(t, prev)
	newBin := quicmqBinary(t)
	t.Logf("upgrading from %s (%s) to the head build", prev.Name, prev.Commit[:12])

	// Region rc: three replicas, each with a fixed client address (a client given the three
	// keeps reaching a node that restarted) and a WAN address for the mirror region.
	r := &nodeproc.Region{T: t, Bin: oldBin, CADir: t.TempDir(), Name: "rc", Replicas: 3, Options: meshOptions}
	var listen, wan []string
	for i := range 3 {
		r.Nodes = append(r.Nodes, &nodeproc.Node{Name: fmt.Sprintf("rc%d", i+1), Data: t.TempDir(), LAN: freeAddr(t)})
		listen, wan = append(listen, freeAddr(t)), append(wan, freeAddr(t))
	}
	r.Flags = func(n *nodeproc.Node) []string {
		i := r.Index(n.Name)
		var join []string
		for j := range wan {
			if j != i {
				join = append(join, wan[j])
			}
		}
		return []string{"--listen", listen[i], "--wan", wan[i], "--wan-join", strings.Join(join, ",")}
	}
	for i := range r.Nodes {
		r.Start(i)
	}
	for i := range r.Nodes {
		r.WaitLinks(r.Nodes[i], len(r.Nodes)-1)
	}
	usData, usLAN, usWAN, usListen := t.TempDir(), freeAddr(t), freeAddr(t), freeAddr(t)
	var us, usBefore *nodeproc.Process
	startUS := func(bin string) {
		usBefore = us
		us = startMeshProcess(t, bin, "us1", "--data", usData, "--region", "us", "--ca-dir", r.CADir, "--listen", usListen,
			"--gossip", usLAN, "--wan", usWAN, "--wan-join", strings.Join(wan, ","), "--mirror", "rc.>")
	}
	startUS(oldBin)

	// The load: producers through random nodes of rc (idempotent, publishing again what a
	// lost session left unknown), readers of whole logs at random nodes.
	l := newReplicaLoad(r, 4, 200)
	l.warmUp(t)
	// The warm-up's probes race each other (one connection each, one producer): a later
	// sequence stored first makes an earlier one a refusal, before any upgrade began.
	refusedBefore, stoppingBefore := l.refusalCounts()
	l.run(2)

	// The clients connected before the upgrade, kept for the whole run.
	live := startLiveClients(t, r.CADir, listen, usListen)
	defer live.stop()
	live.dump = func() {
		live.errMu.Lock()
		t.Logf("what the live clients met:\n%s", strings.Join(live.notes, "\n"))
		live.errMu.Unlock()
		for _, n := range r.Nodes {
			t.Logf("%s's log ends:\n%s", n.Name, n.Proc().Tail())
		}
		if usBefore != nil {
			t.Logf("us1's log before its upgrade ends:\n%s", usBefore.Tail())
		}
		t.Logf("us1's log ends:\n%s", us.Tail())
	}
	live.waitAcked(t, 100, 60*time.Second)

	type step struct {
		name         string
		down, caught time.Duration
	}
	var steps []step
	upgrade := func(name string, stop func(), start func(), back func()) {
		before := live.acked.Load()
		t0 := time.Now()
		t.Logf("%s: stopping at %s", name, t0.Format("15:04:05.000"))
		stop()
		start()
		down := time.Since(t0)
		back()
		steps = append(steps, step{name, down, time.Since(t0)})
		t.Logf("%s: stopped and started on the head build in %v, back and caught up %v after the stop; live publisher %d records acknowledged meanwhile",
			name, down.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), live.acked.Load()-before)
		// Let the load run on the new mix before the next node goes.
		live.waitAcked(t, live.acked.Load()+200, 60*time.Second)
	}
	for i, n := range r.Nodes {
		upgrade(n.Name, func() { stopGracefully(t, n.Proc()) }, func() {
			n.Bin = newBin
			r.Start(i)
		}, func() {
			r.WaitLinks(r.Nodes[i], len(r.Nodes)-1)
			waitCaughtUp(t, l, i)
		})
	}
	upgrade("us1", func() { stopGracefully(t, us) }, func() { startUS(newBin) }, func() {
		select {
		case <-us.LinkUp():
		case <-time.After(30 * time.Second):
			t.Fatalf("us1 on the head build: no link up within 30 s\n%s", us.Tail())
		}
	})

	l.Stop()
	live.stop()
	t.Logf("live clients: %s", live.summary())
	if err := live.failed(); err != nil {
		live.dump()
		t.Errorf("a client connected before the upgrade stopped working: %v", err)
	}
	// A producer connected to the node being stopped is told "node shutting down" for what
	// the node had not read: nothing was stored (the checker verifies it), and a client with
	// Reconnect sends it again elsewhere (the live publisher never saw one). Any other refusal
	// is the upgrade refusing a publish.
	refused, stopping := l.refusalCounts()
	refused, stopping = refused-refusedBefore, stopping-stoppingBefore
	t.Logf("publishes refused after the warm-up: %d, of them answered \"node shutting down\" by the node being stopped: %d (not sent again by the load's producers)", refused, stopping)
	if refused > stopping {
		t.Errorf("%d publishes were refused during the upgrade, %d of them for another reason than the node stopping: %s",
			refused, refused-stopping, strings.Join(l.refusals, "; "))
	}
	checkReplicaCampaign(t, l, []int{0, 1, 2})
	checkMirrored(t, r, listen[0], usListen, append(l.topics, liveTopic))
	for _, s := range steps {
		t.Logf("upgrade of %s: restarted in %v, back in %v", s.name, s.down.Round(time.Millisecond), s.caught.Round(time.Millisecond))
	}
}

// buildRelease builds release rel's quicmq from this repository's history (git archive of its
// commit into a temporary directory), named as a release build is (-X main.version); it
// skips the test when the commit is not in this clone.
func buildRelease(t *testing.T, rel release.Release) string {
	t.Helper()
	if bin := os.Getenv("QUICMQ_UPGRADE_FROM_BIN"); bin != "" { // built before, for repeated runs
		out, err := runBinary(bin, "version")
		if want := "quicmq " + rel.Name + " (commit " + rel.Commit[:12]; err != nil || !strings.HasPrefix(out, want) {
			t.Fatalf("QUICMQ_UPGRADE_FROM_BIN=%s says %q (%v), want %q...", bin, out, err, want)
		}
		return bin
	}
	if out, err := exec.Command("git", "cat-file", "-e", rel.Commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("release %s (commit %s, internal/release/RELEASES) is not in this clone (a shallow clone or a source tarball?): cannot build it: %v %s",
			rel.Name, rel.Commit, err, strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	start := time.Now()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	// From the top: in a subdirectory git archive takes only that subdirectory's tree.
	archive := exec.Command("sh", "-c", fmt.Sprintf("git archive --format=tar %s | tar -x -C %s", rel.Commit, dir))
	archive.Dir = strings.TrimSpace(string(top))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rel.Commit, err, out)
	}
	bin := filepath.Join(dir, "quicmq-"+rel.Name)
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+rel.Name+" -X main.commit="+rel.Commit, "-o", bin, "./cmd/quicmq")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building release %s from %s: %v\n%s", rel.Name, rel.Commit, err, out)
	}
	out, err := runBinary(bin, "version")
	if want := "quicmq " + rel.Name + " (commit " + rel.Commit[:12]; err != nil || !strings.HasPrefix(out, want) {
		t.Fatalf("release %s's build says %q (%v), want %q...", rel.Name, out, err, want)
	}
	t.Logf("built %s in %v: %s", rel.Name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	return bin
}

// stopGracefully stops a node as an operator does before replacing its binary (SIGTERM:
// it leaves gossip and closes its links as a deliberate departure).
func stopGracefully(t *testing.T, p *nodeproc.Process) {
	t.Helper()
	if !p.Stop(30 * time.Second) {
		t.Fatalf("%s did not stop within 30 s of SIGTERM\n%s", p.Name, p.Tail())
	}
}

// waitCaughtUp waits until node i's own log of every topic of the load holds every record
// acknowledged when the wait began (`quicmq topics` at the node: a replica's own count).
func waitCaughtUp(t *testing.T, l *replicaLoad, i int) {
	t.Helper()
	want := l.ackedOffsets()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := testlog.UntilErr(ctx, func() error {
		rows, err := l.r.Topics(ctx, i, "rc.>")
		next := map[string]uint64{}
		for _, row := range rows {
			next[row.Topic] = row.Next
		}
		behind := false
		for ti, tp := range l.topics {
			behind = behind || int64(next[tp]) <= want[ti]
		}
		if err == nil && !behind {
			return nil
		}
		return fmt.Errorf("%v (want above %v; %v)", next, want, err)
	}); err != nil {
		t.Fatalf("%s did not catch up within 60 s: %v\n%s", l.r.Nodes[i].Name, err, l.r.Nodes[i].Proc().Tail())
	}
}

// liveTopic is the topic of the clients connected before the upgrade.
const liveTopic = "rc.live"

func livePayload(seq uint64) string { return fmt.Sprintf("live-%d", seq) }

// liveClients are clients connected before the upgrade and kept through it, as an
// application's: one Conn (Reconnect, Idempotent) given rc's three nodes publishing to
// liveTopic in order; one Conn to rc's nodes reading liveTopic from its start; one Conn to us
// reading the topic as mirrored there. Each must see every record once, in order.
type liveClients struct {
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	once        sync.Once
	acked       atomic.Uint64 // records of liveTopic acknowledged, in publish order
	duplicates  atomic.Uint64 // acks with Duplicate set (a publish resent after a lost connection)
	readRC      atomic.Uint64 // records read at rc, in offset order
	readUS      atomic.Uint64 // records read at us, in origin order
	errMu       sync.Mutex
	err         error
	notes       []string
	stopReading chan struct{}
	dump        func() // logs the nodes' last lines
}

func startLiveClients(t *testing.T, caDir string, rc []string, us string) *liveClients {
	t.Helper()
	lc := &liveClients{stopReading: make(chan struct{}), dump: func() {}}
	lc.ctx, lc.cancel = context.WithCancel(context.Background())
	opts := client.Options{CAFile: filepath.Join(caDir, "ca.pem"), Reconnect: true, Idempotent: true}
	dial := func(addrs ...string) *client.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, opts, addrs...)
		if err != nil {
			t.Fatalf("live client: dial %v: %v", addrs, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	pub, subRC, subUS := dial(rc...), dial(rc[1], rc[2], rc[0]), dial(us)
	lc.wg.Add(3)
	go func() {
		defer lc.wg.Done()
		lc.publish(pub)
	}()
	go func() {
		defer lc.wg.Done()
		lc.read(subRC, "rc", func(rec client.Record, n uint64) error {
			if rec.Offset != n || rec.OriginRegion != "rc" && rec.OriginRegion != "" || string(rec.Payload) != livePayload(n) {
				return fmt.Errorf("rc: record %d is offset %d origin %s payload %q", n, rec.Offset, rec.OriginRegion, rec.Payload)
			}
			return nil
		}, &lc.readRC)
	}()
	go func() {
		defer lc.wg.Done()
		lc.read(subUS, "us", func(rec client.Record, n uint64) error {
			if rec.OriginRegion != "rc" || rec.OriginOffset != n || string(rec.Payload) != livePayload(n) {
				return fmt.Errorf("us: record %d is offset %d origin %s@%d payload %q", n, rec.Offset, rec.OriginRegion, rec.OriginOffset, rec.Payload)
			}
			return nil
		}, &lc.readUS)
	}()
	return lc
}

func (lc *liveClients) fail(err error) {
	lc.errMu.Lock()
	defer lc.errMu.Unlock()
	if lc.err == nil {
		lc.err = fmt.Errorf("at %s: %w", time.Now().Format("15:04:05.000"), err)
	}
}

// note keeps what a client met on the way (the last 20), for a failure's report.
func (lc *liveClients) note(s string) {
	lc.errMu.Lock()
	defer lc.errMu.Unlock()
	if lc.notes = append(lc.notes, s); len(lc.notes) > 20 {
		lc.notes = lc.notes[1:]
	}
}

func (lc *liveClients) failed() error {
	lc.errMu.Lock()
	defer lc.errMu.Unlock()
	return lc.err
}

// publish publishes liveTopic's records one after another, 50 a second, each waited for:
// with Idempotent and Reconnect the Conn resends what a lost connection left unanswered, so
// every publish must end acknowledged, at the offset of its sequence (one publisher, in order).
func (lc *liveClients) publish(c *client.Conn) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for seq := uint64(0); ; seq++ {
		select {
		case <-lc.ctx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(lc.ctx, 30*time.Second)
		ack, err := c.Publish(ctx, client.Message{Topic: liveTopic, Payload: []byte(livePayload(seq))})
		cancel()
		if err != nil {
			if lc.ctx.Err() == nil {
				lc.fail(fmt.Errorf("publish %d: %w", seq, err))
			}
			return
		}
		if ack.Offset != seq {
			lc.fail(fmt.Errorf("publish %d acknowledged at offset %d (duplicate %v): stored twice or out of order", seq, ack.Offset, ack.Duplicate))
			return
		}
		if ack.Duplicate {
			lc.duplicates.Add(1)
		}
		lc.acked.Add(1)
	}
}

// read reads liveTopic from its start on one subscription for the whole run; with Reconnect
// the SDK makes the subscription again after a lost connection, from where it was. It stops
// once it has read everything acknowledged after stop was called.
func (lc *liveClients) read(c *client.Conn, where string, check func(client.Record, uint64) error, n *atomic.Uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := c.Subscribe(ctx, liveTopic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		lc.fail(fmt.Errorf("%s: subscribe: %w", where, err))
		return
	}
	defer sub.Close()
	quiet := 0 // reads in a row that timed out after stop
	for {
		select {
		case <-lc.stopReading:
			if n.Load() >= lc.acked.Load() {
				return
			}
		default:
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		rec, err := sub.Next(rctx)
		rcancel()
		if err != nil {
			lc.note(fmt.Sprintf("%s %s: Next after %d: %v", time.Now().Format("15:04:05.000"), where, n.Load(), err))
		}
		if errors.Is(err, context.DeadlineExceeded) {
			select {
			case <-lc.stopReading:
				if quiet++; quiet == 5 {
					lc.fail(fmt.Errorf("%s: read %d records, %d were acknowledged: nothing more within 10 s", where, n.Load(), lc.acked.Load()))
					return
				}
			default:
			}
			continue
		}
		if err != nil {
			lc.fail(fmt.Errorf("%s: after %d records: %w", where, n.Load(), err))
			return
		}
		if err := check(rec, n.Load()); err != nil {
			lc.fail(err)
			return
		}
		n.Add(1)
	}
}

// waitAcked waits until the live publisher has n records acknowledged.
func (lc *liveClients) waitAcked(t *testing.T, n uint64, within time.Duration) {
	t.Helper()
	testlog.WaitForErr(t, within, fmt.Sprintf("the live publisher to have %d records acknowledged", n), func() error {
		if err := lc.failed(); err != nil {
			lc.dump()
			t.Fatalf("live clients: %v", err)
		}
		if got := lc.acked.Load(); got < n {
			return fmt.Errorf("%d acknowledged", got)
		}
		return nil
	})
}

// stop stops publishing, then lets the readers read what was acknowledged, and waits.
func (lc *liveClients) stop() {
	lc.once.Do(func() {
		lc.cancel()
		close(lc.stopReading)
		lc.wg.Wait()
	})
}

func (lc *liveClients) summary() string {
	return fmt.Sprintf("%d records published and acknowledged in order (%d answered as duplicates of a resent publish), %d read at rc, %d read at us",
		lc.acked.Load(), lc.duplicates.Load(), lc.readRC.Load(), lc.readUS.Load())
}

// checkMirrored checks that us's log of each topic holds rc's records once each, in rc's
// order: at us offset k, rc's record of origin offset k, the same payload, once us has them
// all.
func checkMirrored(t *testing.T, r *nodeproc.Region, rcAddr, usAddr string, topics []string) {
	t.Helper()
	rc, usc := dialCA(t, rcAddr, r.CADir), dialCA(t, usAddr, r.CADir)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, tp := range topics {
		n, err := topicNext(ctx, rc, tp)
		if err != nil {
			t.Fatalf("rc topics %s: %v", tp, err)
		}
		if err := testlog.UntilErr(ctx, func() error {
			m, err := topicNext(ctx, usc, tp)
			if err != nil {
				t.Fatalf("us topics %s: %v", tp, err)
			}
			if m > n {
				t.Fatalf("us holds %d records of %s, rc %d: mirrored twice", m, tp, n)
			}
			if m == n {
				return nil
			}
			return fmt.Errorf("us holds %d records of %s, rc %d", m, tp, n)
		}); err != nil {
			t.Fatalf("after 120 s: %v", err)
		}
		want, got := readLog(t, ctx, rc, tp, n), readLog(t, ctx, usc, tp, n)
		for k := range got {
			w, g := want[k], got[k]
			if g.Offset != uint64(k) || g.OriginRegion != "rc" || g.OriginOffset != w.Offset || g.Payload != w.Payload || g.Producer != w.Producer || g.Seq != w.Seq {
				t.Fatalf("%s at us offset %d: %+v, want rc's record %+v", tp, k, g, w)
			}
		}
		t.Logf("%s: us holds rc's %d records once each, in order", tp, n)
	}
}

// refusalCounts is the number of publishes refused so far, and of those refused because the node
// was shutting down.
func (l *replicaLoad) refusalCounts() (all, stopping int) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return int(l.refused.Load()), l.refusedCodes[client.CodeShuttingDown]
}
