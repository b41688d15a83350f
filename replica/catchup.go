package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/internal/timeline"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// Catch-up: a snapshot carries metadata only (snapshot.go), so a replica that receives
// one (MsgSnap) must first hold the records up to the snapshot's next offsets. The engine
// intercepts each MsgSnap: when the state machine reports records missing (Missing), it
// starts a catch-up of the group (once: a retransmitted or newer MsgSnap while one runs
// only becomes the one to step when it ends) and drops the message; the driver fetches
// the records through Config.Fetcher, paced, on a goroutine of its own, from any replica
// that has applied them: the group's other voters first (the snapshot's ConfState names
// them; records are identical on every replica at the same offsets, I9, so any replica
// that applied them serves the same bytes, and the leader is spared the bulk read), the
// snapshot's sender last; a replica that has not applied them (behind, down, unreachable)
// answers with an error, and the fetch goes on from where it stopped at the next. Each
// chunk is written here (ImportChunk) on the driver's goroutine, unsynced
// and unserved. When the fetch ends the engine steps the latest MsgSnap again; with
// nothing missing raft restores it, and the round installs the snapshot (Restore) in its
// synced batch, which also makes the fetched records durable and served. The raft log
// never held those records on this replica, so it votes only as what it is: a learner
// stays one until its leader promotes it, after the snapshot and the entries since.
//
// The leader reports each snapshot it sent (ReportSnapshot) once the follower answers,
// by raft's own progress, or after SnapshotReportTicks without an answer (the follower
// may still be fetching, or the message was lost): raft then probes and sends a newer
// snapshot if the follower still needs one.

// Fetcher reads records from another replica of a group, for a catch-up. Fetch calls
// chunk, in order, with chunks that together hold the records [from, to) of the group's
// log (a topic) on node, each from that node's Snapshotter.ReadChunk(group, log, next,
// to, maxBytes), and returns once all are given, chunk fails, or ctx ends.
type Fetcher interface {
	Fetch(ctx context.Context, node, group uint64, log string, from, to, maxBytes uint64, chunk func([]byte) error) error
}

// catchup is one group's fetch of the records its latest snapshot needs.
type catchup struct {
	id      uint64
	group   uint64
	source  uint64   // the snapshot's sender
	sources []uint64 // the nodes to fetch from, in order: the other voters, the sender last
	index   uint64   // the snapshot's index
	spans   []Span
	msg     *pb.Message // the latest MsgSnap received: stepped when the fetch ends
	start   time.Time

	records, bytes uint64 // fetched so far (driver's goroutine)
}

// snapReport is a snapshot sent to a follower not yet reported to raft.
type snapReport struct {
	group, to uint64
	ticks     int
}

// onSnap handles an inbound MsgSnap: stepped when this replica holds its records, else
// kept for the group's catch-up.
func (e *engine) onSnap(g *group, m *pb.Message) {
	snap := m.GetSnapshot()
	idx := snap.GetMetadata().GetIndex()
	if cu := e.catchups[g.id]; cu != nil {
		if idx > cu.msg.GetSnapshot().GetMetadata().GetIndex() || m.GetTerm() > cu.msg.GetTerm() {
			cu.msg = m
		}
		e.stats.SnapshotsDeferred++
		return
	}
	ss, ok := e.sm.(Snapshotter)
	if !ok || idx <= g.rn.BasicStatus().GetCommit() {
		e.touch(g)
		_ = g.rn.Step(m) // raft refuses it, or the round fails on it (no Snapshotter)
		return
	}
	spans, err := ss.Missing(g.id, snap.GetData())
	if err != nil {
		e.stats.SnapshotsRefused++
		e.cfg.Logger.Warn("snapshot refused", "group", g.id, "from", m.GetFrom(), "index", idx, "err", err)
		return
	}
	if len(spans) == 0 || e.cfg.brokenSkipCatchup {
		e.touch(g)
		_ = g.rn.Step(m)
		return
	}
	e.nextCatchup++
	cu := &catchup{id: e.nextCatchup, group: g.id, source: m.GetFrom(), index: idx, spans: spans, msg: m, start: e.cfg.Now(),
		sources: catchupSources(g.id, e.cfg.NodeID, m.GetFrom(), snap.GetMetadata().GetConfState().GetVoters())}
	e.catchups[g.id] = cu
	e.fetches = append(e.fetches, cu)
	e.stats.CatchupsStarted++
	var n uint64
	for _, s := range spans {
		n += s.To - s.From
	}
	e.cfg.Logger.Info("catch-up started: fetching the records a snapshot needs", "group", g.id, "from_node", m.GetFrom(),
		"snapshot_index", idx, "logs", len(spans), "records", n)
}

// catchupSources orders the nodes a catch-up of group fetches from: the voters other than
// self and the sender, rotated by the group's ID so that the catch-ups of many groups
// spread over them, then the sender.
func catchupSources(group, self, sender uint64, voters []uint64) []uint64 {
	var others []uint64
	for _, v := range voters {
		if v != self && v != sender && v != 0 && !slices.Contains(others, v) {
			others = append(others, v)
		}
	}
	slices.Sort(others)
	if len(others) > 0 {
		k := int(group % uint64(len(others)))
		others = append(others[k:], others[:k]...)
	}
	return append(others, sender)
}

// takeFetches returns the catch-ups started since the last call, for whoever runs
// fetches (the driver, or the simulation).
func (e *engine) takeFetches() []*catchup {
	f := e.fetches
	e.fetches = nil
	return f
}

// errStaleCatchup refuses a chunk of a catch-up that has ended.
var errStaleCatchup = errors.New("replica: catch-up ended")

// fetchChunk writes one fetched chunk of a span of catch-up id, read from node src, in a
// batch of its own, unsynced: the install's synced batch makes it durable. It returns the
// records written.
func (e *engine) fetchChunk(id uint64, span Span, chunk []byte, src uint64) (int, error) {
	if e.failed != nil {
		return 0, e.failed
	}
	cu := e.catchupByID(id)
	if cu == nil {
		return 0, errStaleCatchup
	}
	b := e.cfg.DB.NewBatchWithSize(len(chunk) + 256)
	defer b.Close()
	n, err := e.sm.(Snapshotter).ImportChunk(b, cu.group, span.Log, span.To, chunk)
	if err != nil {
		return 0, fmt.Errorf("replica: group %d: catch-up of %q: %w", cu.group, span.Log, err)
	}
	// pebble.NoSync, never nil: Pebble reads a nil WriteOptions as Sync, and a synced
	// chunk here holds up every group of this node for an fsync
	// (TestCatchupChunksAreNotSynced).
	start := time.Now()
	if err := b.Commit(pebble.NoSync); err != nil {
		err = fmt.Errorf("replica: group %d: catch-up commit: %w", cu.group, err)
		e.fail(err)
		return 0, err
	}
	e.cfg.Timeline.Add(timeline.CatchupWrite, start, time.Since(start), int64(len(chunk)))
	cu.records += uint64(n)
	cu.bytes += uint64(len(chunk))
	e.stats.CatchupRecords += uint64(n)
	e.stats.CatchupBytes += uint64(len(chunk))
	e.fetched[cu.group] += uint64(len(chunk))
	if src != cu.source {
		e.stats.CatchupOtherBytes += uint64(len(chunk))
	}
	return n, nil
}

func (e *engine) catchupByID(id uint64) *catchup {
	for _, cu := range e.catchups {
		if cu.id == id {
			return cu
		}
	}
	return nil
}

// fetchDone ends catch-up id: on success its latest MsgSnap is stepped again (installed
// when nothing is missing any more, or the start of the next catch-up when a newer
// snapshot needs more); on failure it is dropped, and the leader's next snapshot starts
// another.
func (e *engine) fetchDone(id uint64, err error) {
	cu := e.catchupByID(id)
	if cu == nil {
		return
	}
	delete(e.catchups, cu.group)
	took := e.cfg.Now().Sub(cu.start)
	if err != nil {
		e.stats.CatchupsFailed++
		e.cfg.Logger.Warn("catch-up failed: the next snapshot from the leader starts another", "group", cu.group,
			"from_node", cu.source, "snapshot_index", cu.index, "records", cu.records, "bytes", cu.bytes, "took", took, "err", err)
		return
	}
	e.stats.CatchupsDone++
	e.cfg.Logger.Info("catch-up done: installing the snapshot", "group", cu.group, "from_node", cu.source,
		"snapshot_index", cu.index, "records", cu.records, "bytes", cu.bytes, "took", took)
	if g, ok := e.groups[cu.group]; ok {
		e.setQuiet(g, false)
		e.onSnap(g, cu.msg)
	}
}

// snapshotSent records the snapshots among a round's messages, to report them.
func (e *engine) snapshotSent(group uint64, msgs []*pb.Message) {
	for _, m := range msgs {
		if m.GetType() != pb.MsgSnap {
			continue
		}
		e.stats.SnapshotsSent++
		i := slices.IndexFunc(e.reports, func(r snapReport) bool { return r.group == group && r.to == m.GetTo() })
		if i < 0 {
			e.reports = append(e.reports, snapReport{group: group, to: m.GetTo()})
			i = len(e.reports) - 1
		}
		e.reports[i].ticks = e.cfg.SnapshotReportTicks
	}
}

// tickReports reports, once their ticks ran out, the snapshots whose follower is still
// waiting for one by raft's progress (not answered: lost, or still fetching): raft then
// probes it again. A follower that installed it has answered, and raft moved on.
func (e *engine) tickReports() {
	kept := e.reports[:0]
	for _, r := range e.reports {
		g, ok := e.groups[r.group]
		if !ok {
			continue
		}
		if r.ticks--; r.ticks > 0 {
			kept = append(kept, r)
			continue
		}
		inSnap := false
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id == r.to && pr.State == tracker.StateSnapshot {
				inSnap = true
			}
		})
		if inSnap {
			e.touch(g)
			g.rn.ReportSnapshot(r.to, raft.SnapshotFailure)
		}
	}
	e.reports = kept
}

// buildSnapshot is the group's snapshot at its state machine's applied index, built for
// raft when it must send one (Storage.Snapshot). raft panics on any error but
// ErrSnapshotTemporarilyUnavailable, so every failure is reported as that one and logged.
func (e *engine) buildSnapshot(g *group) (*pb.Snapshot, error) {
	ss, ok := e.sm.(Snapshotter)
	if !ok {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	applied, data, err := ss.SnapshotData(g.id)
	var term uint64
	if err == nil {
		term, err = g.st.Term(applied)
	}
	if err != nil || applied == 0 {
		e.cfg.Logger.Warn("snapshot not built", "group", g.id, "applied", applied, "err", err)
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	_, cs, _ := g.st.InitialState()
	e.stats.SnapshotsBuilt++
	return &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(applied), Term: proto.Uint64(term), ConfState: cs}}, nil
}

// ReadChunk serves a peer's fetch (Fetcher's other side): records [from, to) of the
// group's log as applied here, at most maxBytes after the first. Any goroutine.
func (d *Driver) ReadChunk(group uint64, log string, from, to, maxBytes uint64) (chunk []byte, next uint64, err error) {
	ss, ok := d.cfg.StateMachine.(Snapshotter)
	if !ok {
		return nil, 0, fmt.Errorf("replica: group %d: the state machine keeps no snapshots", group)
	}
	start := time.Now()
	chunk, next, err = ss.ReadChunk(group, log, from, to, int(min(maxBytes, 1<<30)))
	d.cfg.Timeline.Add(timeline.CatchupRead, start, time.Since(start), int64(len(chunk)))
	return chunk, next, err
}

// CatchupBytes returns the chunk bytes catch-ups of group fetched and wrote here since the
// driver started (a replica moved here catches up through them).
func (d *Driver) CatchupBytes(ctx context.Context, group uint64) (uint64, error) {
	ch := make(chan uint64, 1)
	if err := d.exec(ctx, func(e *engine) { ch <- e.fetched[group] }); err != nil {
		return 0, fmt.Errorf("replica: catch-up bytes of group %d: %w", group, err)
	}
	return <-ch, nil
}

// runFetch runs one catch-up's fetch on its own goroutine: its spans (one per log) on up to
// Config.CatchupStreams goroutines of its own, each from the first of the catch-up's sources
// that has the records (the next one taking over where one fails), chunks paced together to
// Config.CatchupBytesPerSecond and written on Run's goroutine.
func (d *Driver) runFetch(ctx context.Context, cu *catchup) {
	err := d.fetch(ctx, cu)
	_ = d.exec(ctx, func(e *engine) { e.fetchDone(cu.id, err) })
}

func (d *Driver) fetch(ctx context.Context, cu *catchup) error {
	if d.cfg.Fetcher == nil {
		return errors.New("replica: no Fetcher configured: records cannot be caught up")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &fetchPace{start: time.Now(), rate: d.cfg.CatchupBytesPerSecond}
	spans := make(chan Span)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range min(d.cfg.CatchupStreams, len(cu.spans)) {
		wg.Go(func() {
			for span := range spans {
				if err := d.fetchSpan(ctx, cu, span, p); err != nil {
					select {
					case errc <- err:
					default:
					}
					cancel() // the others stop: the catch-up fails as a whole
				}
			}
		})
	}
	for _, span := range cu.spans {
		select {
		case spans <- span:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(spans)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return ctx.Err()
	}
}

// fetchPace paces a catch-up's fetch streams together to rate bytes per second (none when
// rate is not positive).
type fetchPace struct {
	start time.Time
	rate  int64
	mu    sync.Mutex
	sent  uint64
}

// wait counts n bytes fetched and waits until the pace allows them.
func (p *fetchPace) wait(ctx context.Context, n int) error {
	if p.rate <= 0 {
		return nil
	}
	p.mu.Lock()
	p.sent += uint64(n)
	due := p.start.Add(time.Duration(float64(p.sent) / float64(p.rate) * float64(time.Second)))
	p.mu.Unlock()
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fetchSpan fetches one log's records of a catch-up from the first of its sources that has
// them, the next one going on from the record where one stopped.
func (d *Driver) fetchSpan(ctx context.Context, cu *catchup, span Span, p *fetchPace) error {
	next := span.From
	for src := 0; ; src++ {
		var chunkErr error // a chunk that could not be written: no other source helps
		node := cu.sources[src]
		err := d.cfg.Fetcher.Fetch(ctx, node, cu.group, span.Log, next, span.To, d.cfg.CatchupChunkBytes, func(chunk []byte) error {
			if err := p.wait(ctx, len(chunk)); err != nil {
				chunkErr = err
				return err
			}
			type wrote struct {
				n   int
				err error
			}
			wc := make(chan wrote, 1)
			if err := d.exec(ctx, func(e *engine) { n, err := e.fetchChunk(cu.id, span, chunk, node); wc <- wrote{n, err} }); err != nil {
				chunkErr = err
				return err
			}
			w := <-wc
			next += uint64(w.n) // offsets are dense: the next record to fetch
			chunkErr = w.err
			return w.err
		})
		if err == nil || next >= span.To && chunkErr == nil {
			return nil
		}
		if chunkErr != nil || ctx.Err() != nil || src == len(cu.sources)-1 {
			return fmt.Errorf("replica: group %d: fetch of %q [%d, %d) from node %d: %w", cu.group, span.Log, next, span.To, node, err)
		}
		d.cfg.Logger.Debug("catch-up: a replica could not serve the records; fetching from the next", "group", cu.group,
			"log", span.Log, "from_node", node, "next", next, "err", err)
	}
}

// stageRestore stages, in the round's batch, the installation of a snapshot raft hands
// over in a Ready: the raft storage's (log replaced, ConfState) and the state machine's.
// The first function updates the storage in memory, the second the state machine, both
// once the batch is committed.
func (e *engine) stageRestore(b *pebble.Batch, g *group, snap *pb.Snapshot) (func(), func() error, error) {
	ss, ok := e.sm.(Snapshotter)
	idx := snap.GetMetadata().GetIndex()
	if !ok {
		return nil, nil, fmt.Errorf("replica: group %d: received a snapshot at index %d: the state machine keeps no snapshots", g.id, idx)
	}
	fst, err := g.st.stageSnapshot(b, snap)
	if err != nil {
		return nil, nil, fmt.Errorf("replica: group %d: snapshot at index %d: %w", g.id, idx, err)
	}
	fsm, err := ss.Restore(b, g.id, idx, snap.GetData())
	if err != nil {
		return nil, nil, fmt.Errorf("replica: group %d: restore snapshot at index %d: %w", g.id, idx, err)
	}
	e.cfg.Logger.Info("snapshot installed", "group", g.id, "index", idx, "term", snap.GetMetadata().GetTerm())
	return fst, fsm, nil
}
