package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/timeline"
)

// netTransport delivers between drivers of one process, encoding every
// message as a real transport would.
type netTransport struct {
	from uint64
	net  *testNet
}

type testNet struct {
	mu      sync.Mutex
	drivers map[uint64]*Driver
	down    map[uint64]bool
}

func (t netTransport) Send(to uint64, msgs []Message) {
	t.net.mu.Lock()
	d := t.net.drivers[to]
	down := t.net.down[to] || t.net.down[t.from]
	t.net.mu.Unlock()
	if d == nil || down {
		return
	}
	b, err := EncodeBatch(nil, t.from, to, msgs)
	if err != nil {
		panic(err)
	}
	_, _, cp, err := DecodeBatch(b)
	if err != nil {
		panic(err)
	}
	d.Deliver(cp)
}

// netFetcher fetches a catch-up's records from a driver of the test network,
// through its ReadChunk, as the node's peer links do.
type netFetcher struct{ net *testNet }

func (f netFetcher) Fetch(ctx context.Context, node, group uint64, log string, from, to, maxBytes uint64, chunk func([]byte) error) error {
	for next := from; next < to; {
		f.net.mu.Lock()
		d, down := f.net.drivers[node], f.net.down[node]
		f.net.mu.Unlock()
		if d == nil || down {
			return fmt.Errorf("node %d is down", node)
		}
		c, n, err := d.ReadChunk(group, log, next, to, maxBytes)
		if err != nil {
			return err
		}
		if err := chunk(c); err != nil {
			return err
		}
		next = n
	}
	return ctx.Err()
}

type testReplica struct {
	id     uint64
	fs     vfs.FS
	db     *pebble.DB
	sm     *LogSM
	d      *Driver
	cancel context.CancelFunc
	done   chan error
}

// startReplica opens (or reopens) a node on fs and runs its driver until
// the test ends or stopReplica.
func startReplica(t testing.TB, net *testNet, id uint64, fs vfs.FS, groups []uint64, peers []uint64) *testReplica {
	t.Helper()
	return startReplicaWith(t, net, id, fs, groups, peers, nil)
}

// startReplicaWith is startReplica with tune (if not nil) changing the
// driver's configuration.
func startReplicaWith(t testing.TB, net *testNet, id uint64, fs vfs.FS, groups []uint64, peers []uint64, tune func(*Config)) *testReplica {
	t.Helper()
	dir := "db"
	if fs == vfs.Default {
		dir = t.TempDir() // real files, real fsyncs
	}
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatNewest, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	r := &testReplica{id: id, fs: fs, db: db, sm: NewLogSM(db), done: make(chan error, 1)}
	cfg := Config{
		NodeID: id, DB: db, StateMachine: r.sm, Transport: netTransport{id, net}, Fetcher: netFetcher{net},
		TickInterval: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
	}
	if tune != nil {
		tune(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	r.cancel = runDriver(t, net, id, d, groups, peers, r.done)
	t.Cleanup(func() { r.stop(t, net) })
	return r
}

// runDriver runs d (its result goes to done), opens groups on it and joins
// it to the network; the function returned stops it.
func runDriver(t testing.TB, net *testNet, id uint64, d *Driver, groups, peers []uint64, done chan<- error) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- d.Run(ctx) }()
	for _, g := range groups {
		if err := d.AddGroup(ctx, g, peers); err != nil {
			t.Fatal(err)
		}
	}
	net.mu.Lock()
	net.drivers[id] = d
	delete(net.down, id)
	net.mu.Unlock()
	return cancel
}

func (r *testReplica) stop(t testing.TB, net *testNet) {
	if !haltDriver(t, net, r.id, &r.cancel, r.done) {
		return
	}
	if err := r.db.Close(); err != nil {
		t.Errorf("node %d: close pebble: %v", r.id, err)
	}
}

// haltDriver cuts node id off the network and stops its driver, unless it
// is stopped already (*cancel nil); it reports whether it stopped it.
func haltDriver(t testing.TB, net *testNet, id uint64, cancel *context.CancelFunc, done <-chan error) bool {
	if *cancel == nil {
		return false
	}
	net.mu.Lock()
	net.down[id] = true
	net.mu.Unlock()
	(*cancel)()
	*cancel = nil
	if err := <-done; err != nil {
		t.Errorf("node %d: run: %v", id, err)
	}
	return true
}

// runningDriver is a test node: its driver, nil while it is stopped.
type runningDriver interface{ running() *Driver }

func (r *testReplica) running() *Driver {
	if r.cancel == nil {
		return nil
	}
	return r.d
}

// leaderOf waits for a running node that leads group g.
func leaderOf[R runningDriver](t testing.TB, rs []R, g uint64) R {
	t.Helper()
	var leader R
	testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("a leader of group %d", g), func() bool {
		for _, r := range rs {
			d := r.running()
			if d == nil {
				continue
			}
			if st, err := d.Status(context.Background(), g); err == nil && st.RaftState == raft.StateLeader {
				leader = r
				return true
			}
		}
		return false
	})
	return leader
}

func startRegion(t testing.TB, n int, groups []uint64) ([]*testReplica, *testNet) {
	return startRegionOn(t, n, groups, func() vfs.FS { return vfs.NewMem() })
}

func startRegionOn(t testing.TB, n int, groups []uint64, fs func() vfs.FS) ([]*testReplica, *testNet) {
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	var peers []uint64
	for i := range n {
		peers = append(peers, uint64(i+1))
	}
	var rs []*testReplica
	for _, id := range peers {
		rs = append(rs, startReplica(t, net, id, fs(), groups, peers))
	}
	return rs, net
}

// proposeAll makes n concurrent proposals to group g, each retried at the
// current leader while it is refused or dropped by a leader change (a
// dropped proposal never commits, so a retry cannot store it twice).
func proposeAll(t *testing.T, rs []*testReplica, g uint64, n int, prefix string) []Result {
	t.Helper()
	res := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for {
				d := currentLeader(ctx, rs, g)
				if d == nil {
					errs[i] = fmt.Errorf("no leader: %w", ctx.Err())
					return
				}
				res[i], errs[i] = d.Propose(ctx, g, []byte(fmt.Sprintf("%s%d", prefix, i)))
				if !errors.Is(errs[i], ErrNotLeader) && !errors.Is(errs[i], ErrDropped) || ctx.Err() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("proposal %d to group %d: %v", i, g, err)
		}
	}
	return res
}

// currentLeader returns the driver that leads g, polling until ctx ends.
func currentLeader(ctx context.Context, rs []*testReplica, g uint64) *Driver {
	var leader *Driver
	testlog.Until(ctx, func() bool {
		for _, r := range rs {
			if r.cancel == nil {
				continue
			}
			if st, err := r.d.Status(ctx, g); err == nil && st.RaftState == raft.StateLeader {
				leader = r.d
				return true
			}
		}
		return false
	})
	return leader
}

func TestDriverReplicatesWithDenseOffsets(t *testing.T) {
	groups := []uint64{1, 2}
	rs, _ := startRegion(t, 3, groups)
	for _, g := range groups {
		leaderOf(t, rs, g)
		res := proposeAll(t, rs, g, 40, "r")
		seen := map[uint64]bool{}
		for _, r := range res {
			seen[r.Offset] = true
		}
		for off := range uint64(40) {
			if !seen[off] {
				t.Fatalf("group %d: offset %d was never assigned; offsets %v", g, off, res)
			}
		}
		for _, r := range rs {
			testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to apply group %d", r.id, g), func() bool { n, _ := r.sm.Next(g); return n == 40 })
			recs, err := r.sm.Read(g, 0, 100)
			if err != nil || len(recs) != 40 {
				t.Fatalf("node %d group %d: read %d records: %v", r.id, g, len(recs), err)
			}
			for _, x := range res {
				if got := recs[x.Offset]; got.Index != x.Index || got.Time != x.Time {
					t.Fatalf("node %d group %d offset %d: %+v, the leader answered %+v", r.id, g, x.Offset, got, x)
				}
			}
			for i := 1; i < len(recs); i++ {
				if recs[i].Time < recs[i-1].Time {
					t.Fatalf("node %d group %d: time decreases at offset %d", r.id, g, i)
				}
			}
		}
	}
}

// TestDriverCountsSyncWait: every synced round's wait is counted (Stats.SyncWait, exported as
// quicmq_raft_sync_wait_seconds_total), on the leader and on the followers alike.
func TestDriverCountsSyncWait(t *testing.T) {
	rs, _ := startRegion(t, 3, []uint64{1})
	leaderOf(t, rs, 1)
	proposeAll(t, rs, 1, 20, "w")
	for _, r := range rs {
		testlog.WaitForErr(t, 20*time.Second, fmt.Sprintf("node %d to count its syncs", r.id), func() error {
			st, err := r.d.Stats(context.Background())
			if err != nil {
				return err
			}
			if st.SyncCommits == 0 || st.SyncWait <= 0 || st.Rounds == 0 {
				return fmt.Errorf("rounds %d, syncs %d, wait %v", st.Rounds, st.SyncCommits, st.SyncWait)
			}
			return nil
		})
	}
}

func TestDriverNotLeaderNamesTheLeader(t *testing.T) {
	rs, _ := startRegion(t, 3, []uint64{1})
	l := leaderOf(t, rs, 1)
	for _, r := range rs {
		if r == l {
			continue
		}
		testlog.WaitFor(t, 20*time.Second, "the follower to learn the leader", func() bool {
			st, _ := r.d.Status(context.Background(), 1)
			return st.Lead == l.id
		})
		_, err := r.d.Propose(context.Background(), 1, []byte("x"))
		var nle *NotLeaderError
		if !errors.As(err, &nle) || !errors.Is(err, ErrNotLeader) || nle.Leader != l.id {
			t.Fatalf("propose to follower %d: %v, want a NotLeaderError naming %d", r.id, err, l.id)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("node %d is", l.id)) {
			t.Fatalf("error %q does not name the leader", err)
		}
	}
	if _, err := l.d.Propose(context.Background(), 9, []byte("x")); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("propose to an unknown group: %v", err)
	}
}

// TestDriverQuiescesAndWakesOnLeaderLoss: an idle region goes quiet; with
// its leader gone, a proposal at a follower is refused but wakes the group,
// which elects a new leader that takes the proposal, and the offsets go on.
func TestDriverQuiescesAndWakesOnLeaderLoss(t *testing.T) {
	rs, net := startRegion(t, 3, []uint64{1})
	l := leaderOf(t, rs, 1)
	proposeAll(t, rs, 1, 5, "a")
	for _, r := range rs {
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to quiesce", r.id), func() bool {
			st, err := r.d.Stats(context.Background())
			return err == nil && st.Quiesced == 1
		})
	}
	l.stop(t, net)
	var f *testReplica
	for _, r := range rs {
		if r != l {
			f = r
			break
		}
	}
	if _, err := f.d.Propose(context.Background(), 1, []byte("b")); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("propose to a quiet follower: %v, want ErrNotLeader", err)
	}
	nl := leaderOf(t, rs, 1)
	if nl == l {
		t.Fatal("the stopped leader is still reported as leader")
	}
	res := proposeAll(t, rs, 1, 1, "c")
	if res[0].Offset != 5 {
		t.Fatalf("first offset under the new leader = %d, want 5", res[0].Offset)
	}
}

// A node whose groups are all quiet holds no raft entries in memory and no round batch:
// both are rebuilt by the next round that needs them. After a region created 100,000
// topics, each node kept its groups' last entries and a round batch of 4 MiB or more while
// idle (issue 29: a replica's RSS against a single node's).
func TestDriverAsleepHoldsNoEntriesNorBatch(t *testing.T) {
	rs, _ := startRegion(t, 3, []uint64{1, 2})
	for _, g := range []uint64{1, 2} {
		proposeAll(t, rs, g, 5, "a")
	}
	for _, r := range rs {
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d asleep", r.id), func() bool {
			st, err := r.d.Stats(context.Background())
			return err == nil && st.Asleep
		})
		held := make(chan string, 1)
		if err := r.d.exec(context.Background(), func(e *engine) {
			var what []string
			if e.batch != nil {
				what = append(what, fmt.Sprintf("a round batch of %d bytes", e.batchCap))
			}
			for _, g := range e.order {
				g.st.mu.Lock()
				if n := len(g.st.mu.cache.ents); n > 0 {
					what = append(what, fmt.Sprintf("group %d: %d cached entries", g.id, n))
				}
				g.st.mu.Unlock()
			}
			held <- strings.Join(what, "; ")
		}); err != nil {
			t.Fatal(err)
		}
		if h := <-held; h != "" {
			t.Errorf("node %d, asleep, holds %s", r.id, h)
		}
	}
	// And wakes: the next proposal is answered at the next offset.
	if res := proposeAll(t, rs, 1, 1, "b"); res[0].Offset != 5 {
		t.Fatalf("first offset after sleeping = %d, want 5", res[0].Offset)
	}
}

func TestDriverRestartKeepsLogAndOffsets(t *testing.T) {
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	peers := []uint64{1, 2, 3}
	fss := []vfs.FS{vfs.NewMem(), vfs.NewMem(), vfs.NewMem()}
	var rs []*testReplica
	for i, id := range peers {
		rs = append(rs, startReplica(t, net, id, fss[i], []uint64{7}, peers))
	}
	proposeAll(t, rs, 7, 10, "x")
	for _, r := range rs {
		testlog.WaitFor(t, 20*time.Second, "every node to apply", func() bool { n, _ := r.sm.Next(7); return n == 10 })
		r.stop(t, net)
	}
	rs = rs[:0]
	for i, id := range peers {
		rs = append(rs, startReplica(t, net, id, fss[i], []uint64{7}, nil)) // no peers: the stored state is used
	}
	for _, r := range rs {
		if n, _ := r.sm.Next(7); n != 10 {
			t.Fatalf("node %d after restart: next offset %d, want 10", r.id, n)
		}
	}
	res := proposeAll(t, rs, 7, 1, "y")
	if res[0].Offset != 10 {
		t.Fatalf("first offset after restart = %d, want 10", res[0].Offset)
	}
}

func TestConfigValidateReportsEverything(t *testing.T) {
	err := (&Config{ElectionTicks: 2, HeartbeatTicks: 3, InboxSize: -1}).Validate()
	if err == nil {
		t.Fatal("an empty config was accepted")
	}
	for _, want := range []string{"NodeID", "DB", "StateMachine", "Transport", "InboxSize", "ElectionTicks (2) must be greater than HeartbeatTicks (3)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if !strings.HasPrefix(err.Error(), "replica: config: ") {
		t.Errorf("error %q lacks the package prefix", err)
	}
}

// failingSM fails Apply once armed, standing in for a failed write.
type failingSM struct {
	*LogSM
	mu    sync.Mutex
	armed bool
}

func (f *failingSM) Apply(b *pebble.Batch, group, applied uint64, ents []Entry) ([]Result, error) {
	f.mu.Lock()
	armed := f.armed
	f.mu.Unlock()
	if armed && len(ents) > 0 {
		return nil, errors.New("injected apply failure")
	}
	return f.LogSM.Apply(b, group, applied, ents)
}

// TestDriverFailStop: when a round cannot be written, Run returns the error,
// the proposal is answered with it (never acknowledged), and the driver
// refuses everything after.
func TestDriverFailStop(t *testing.T) {
	db := openTestDB(t, nil)
	sm := &failingSM{LogSM: NewLogSM(db)}
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	d, err := New(Config{NodeID: 1, DB: db, StateMachine: sm, Transport: netTransport{1, net}, TickInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(context.Background()) }()
	ctx := context.Background()
	if err := d.AddGroup(ctx, 1, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	if err := d.Campaign(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testlog.WaitFor(t, 20*time.Second, "a single-node leader", func() bool {
		st, err := d.Status(ctx, 1)
		return err == nil && st.RaftState == raft.StateLeader
	})
	if r, err := d.Propose(ctx, 1, []byte("ok")); err != nil || r.Offset != 0 {
		t.Fatalf("first proposal: %+v, %v", r, err)
	}
	sm.mu.Lock()
	sm.armed = true
	sm.mu.Unlock()
	if r, err := d.Propose(ctx, 1, []byte("lost")); err == nil || !strings.Contains(err.Error(), "injected apply failure") {
		t.Fatalf("proposal whose apply failed: %+v, %v; want the failure", r, err)
	}
	if err := <-runErr; err == nil || !strings.Contains(err.Error(), "injected apply failure") {
		t.Fatalf("Run returned %v, want the failure", err)
	}
	if _, err := d.Propose(ctx, 1, []byte("after")); !errors.Is(err, ErrStopped) {
		t.Fatalf("proposal after the failure: %v, want ErrStopped", err)
	}
	if n, _ := sm.Next(1); n != 1 {
		t.Fatalf("records after the failure: %d, want 1", n)
	}
}

// A replica restarted under a quiet group learns its leader from a Wake within a few
// ticks, not after its own election timeout (ElectionTicks and more), and without an
// election: the term stays.
func TestDriverRestartedFollowerWakesQuietLeader(t *testing.T) {
	rs, net, fss := startRegionKeepingDisks(t, 3, 1)
	l := leaderOf(t, rs, 1)
	proposeAll(t, rs, 1, 5, "a")
	waitQuiet(t, rs)
	var f *testReplica
	for _, r := range rs {
		if r != l {
			f = r
			break
		}
	}
	before, err := l.d.Status(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	f.stop(t, net)
	f = restartReplica(t, net, rs, f, fss)
	st := waitLeaderKnown(t, f, 1)
	if st.Lead != l.id || st.GetTerm() != before.GetTerm() {
		t.Fatalf("restarted follower: leader %d at term %d, want %d at term %d (no election)", st.Lead, st.GetTerm(), l.id, before.GetTerm())
	}
	if ticks := ticksOf(t, f); ticks >= 10 {
		t.Fatalf("restarted follower learned its leader after %d ticks, not before its election timeout (10)", ticks)
	}
}

// A leader restarted while its group was quiet is no longer leading; its Wake makes the
// followers, which still take it for their leader, elect at once.
func TestDriverRestartedLeaderWakesFollowersToElect(t *testing.T) {
	rs, net, fss := startRegionKeepingDisks(t, 3, 1)
	l := leaderOf(t, rs, 1)
	proposeAll(t, rs, 1, 5, "a")
	waitQuiet(t, rs)
	l.stop(t, net)
	l = restartReplica(t, net, rs, l, fss)
	waitLeaderKnown(t, l, 1)
	if ticks := ticksOf(t, l); ticks >= 10 {
		t.Fatalf("restarted leader saw a new leader after %d ticks, not before its election timeout (10)", ticks)
	}
	if st, err := l.d.Stats(context.Background()); err != nil || st.Wakes == 0 {
		t.Fatalf("restarted leader sent no Wake (%+v, %v)", st, err)
	}
	res := proposeAll(t, rs, 1, 1, "b")
	if res[0].Offset != 5 {
		t.Fatalf("first offset under the new leader = %d, want 5", res[0].Offset)
	}
}

func startRegionKeepingDisks(t *testing.T, n int, group uint64) ([]*testReplica, *testNet, []vfs.FS) {
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	var peers []uint64
	var fss []vfs.FS
	for i := range n {
		peers = append(peers, uint64(i+1))
		fss = append(fss, vfs.NewMem())
	}
	var rs []*testReplica
	for i, id := range peers {
		rs = append(rs, startReplica(t, net, id, fss[i], []uint64{group}, peers))
	}
	return rs, net, fss
}

// restartReplica starts stopped replica r again on its disk, in its place in rs.
func restartReplica(t *testing.T, net *testNet, rs []*testReplica, r *testReplica, fss []vfs.FS) *testReplica {
	i := slices.Index(rs, r)
	rs[i] = startReplica(t, net, r.id, fss[i], []uint64{1}, nil)
	return rs[i]
}

func waitQuiet(t *testing.T, rs []*testReplica) {
	for _, r := range rs {
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to quiesce", r.id), func() bool {
			st, err := r.d.Stats(context.Background())
			return err == nil && st.Quiesced == 1
		})
	}
}

func waitLeaderKnown(t *testing.T, r *testReplica, g uint64) raft.BasicStatus {
	var st raft.BasicStatus
	testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to know a leader of group %d", r.id, g), func() bool {
		s, err := r.d.Status(context.Background(), g)
		st = s
		return err == nil && s.Lead != raft.None
	})
	return st
}

func ticksOf(t *testing.T, r *testReplica) uint64 {
	st, err := r.d.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.GroupTicks
}

// A driver with a timeline records each round and each sync it waited for there (the grow
// campaign's episode timeline, internal/timeline).
func TestDriverRecordsTimeline(t *testing.T) {
	tl := timeline.New(1 << 12)
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	rs := []*testReplica{startReplicaWith(t, net, 1, vfs.NewMem(), []uint64{1}, []uint64{1}, func(c *Config) { c.Timeline = tl })}
	leaderOf(t, rs, 1)
	proposeAll(t, rs, 1, 5, "w")
	kinds := map[timeline.Kind]int{}
	for _, ev := range tl.Since(time.Time{}) {
		kinds[ev.Kind]++
	}
	if kinds[timeline.Round] == 0 || kinds[timeline.Sync] == 0 {
		t.Fatalf("timeline kinds %v: want rounds and syncs", kinds)
	}
}
