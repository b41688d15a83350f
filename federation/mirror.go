package federation

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// Bounds of one mirrored append (one synced batch with its cursor).
const (
	mirrorBatchRecords = 1024
	mirrorBatchBytes   = 4 << 20
)

// mirror copies the records of one topic that originated in the link's peer region into the
// local log, one QUIC stream per mirrored topic (so a slow or lossy topic holds up no other).
// Its run goroutine owns the stream; the metrics collector reads the atomics.
type mirror struct {
	l      *link
	topic  string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	health *mirrorHealth // the link's, for this topic: lag and stall state
	cursor atomic.Int64  // last origin offset mirrored (or scanned past, keepScan), -1 for none
	// expected is the cursor the feed resumed from (or last stored): what a replicated
	// append (Config.MirrorAppend) expects to find. Owned by the run goroutine.
	expected struct {
		ok    bool
		value uint64
	}
	records atomic.Uint64
	gaps    atomic.Uint64 // records lost to the origin's retention before they were mirrored

	openedAt time.Time    // local time the link opened it (park.go: MirrorSlice)
	active   atomic.Int64 // local time (unix ns) of its last appended records, or openedAt
	parking  atomic.Bool  // the link parked it: it ends, and its topic waits for a HEAD
	// live is set once records arrived after the mirror had reached the origin's head: a
	// topic that moves, which keeps its stream while others wait (park.go). Written by the
	// run goroutine, read by the link's.
	live atomic.Bool
	// movedMeanwhile is set, under link.mu, when the origin reported the topic's head moving
	// while the mirror was open: if it ends behind, its topic waits in the moved lane.
	movedMeanwhile bool
}

func newMirror(l *link, topic string, h *mirrorHealth) *mirror {
	ctx, cancel := context.WithCancel(l.ctx)
	m := &mirror{l: l, topic: topic, ctx: ctx, cancel: cancel, done: make(chan struct{}), health: h}
	m.cursor.Store(-1)
	m.openedAt = l.f.cfg.Now()
	m.active.Store(m.openedAt.UnixNano())
	return m
}

func (m *mirror) stop() { m.cancel() }

// park ends the mirror to give its stream back (park.go); its cursor is stored, so the next
// mirror of the topic resumes from it.
func (m *mirror) park() {
	m.parking.Store(true)
	m.cancel()
}

func (m *mirror) activeAt() time.Time { return time.Unix(0, m.active.Load()) }

func (m *mirror) ended() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// run mirrors over the connection's feeds until the mirror is stopped or the connection
// ends, retrying a failed feed after a pause (the cursor makes every retry exactly-once). An
// error of the connection itself is the link's to report, not the mirror's.
func (m *mirror) run(parent context.Context, conn *quic.Conn, o mirrorOpener) {
	defer close(m.done)
	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	stop := context.AfterFunc(parent, cancel)
	defer stop()
	for ctx.Err() == nil && conn.Context().Err() == nil {
		err := m.once(ctx, o)
		if ctx.Err() != nil || conn.Context().Err() != nil || connectionEnded(err) || errors.Is(err, errParked) {
			return
		}
		if peerStopping(err) {
			m.l.log.Info("mirror stream ended: peer stopping; retrying from the cursor", "topic", m.topic)
		} else {
			m.l.log.Warn("mirror stream ended; retrying from the cursor", "topic", m.topic, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(m.l.f.cfg.MirrorRetry):
		}
	}
}

// once runs one mirror feed from the stored cursor. It holds the federation's lock of
// (origin region, topic) throughout: a second mirror of the same records (after a quick
// reconnect, or an old link still finishing) waits instead of reading a cursor that a batch
// in flight is about to move.
func (m *mirror) once(ctx context.Context, o mirrorOpener) error {
	from, unlock, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	feed, err := o.open(ctx, m.topic, from)
	if err != nil {
		return err
	}
	defer feed.close()
	b := mirrorBatch{next: from}
	defer m.keepScan(ctx, &b) // before unlock: under the topic's mirror lock
	for {
		f, err := feed.next()
		if err != nil {
			return err
		}
		if err := m.apply(ctx, &b, f); err != nil {
			return err
		}
		// Append when nothing more is waiting, or the batch is full: one synced commit with
		// the cursor per batch.
		if b.due(feed.idle()) {
			if err := m.flush(&b); err != nil {
				return err
			}
		}
		// Caught up and every record appended: a mirror that only caught up gives its
		// stream back at once when other topics wait for one (park.go).
		if b.atHead && len(b.records) == 0 && !m.live.Load() && m.l.waiting() {
			m.parking.Store(true)
			return errParked
		}
	}
}

// begin takes the topic's mirror lock (one mirror per origin region and topic at a time, on
// any link) and reads the cursor: the first origin offset still to mirror.
func (m *mirror) begin(ctx context.Context) (from uint64, unlock func(), err error) {
	region := m.l.peer.Region
	unlock, err = m.l.f.lockMirror(ctx, region, m.topic)
	if err != nil {
		return 0, nil, err
	}
	pos, ok, err := m.l.f.cfg.Log.Position(cursorName(region), m.topic)
	if err != nil {
		unlock()
		return 0, nil, fmt.Errorf("read cursor: %w", err)
	}
	if ok {
		from = pos + 1
		m.cursor.Store(int64(pos))
	}
	m.expected.ok, m.expected.value = ok, pos
	return from, unlock, nil
}

// keepScanTimeout bounds keepScan's store, which runs as the mirror ends.
const keepScanTimeout = 5 * time.Second

// keepScan runs as the mirror's feed ends: if the link parked it at the origin's head with
// everything received appended, and the origin scanned past the cursor with nothing of its
// own in between (its log holds records it mirrored from other regions there, this node's
// own among them), it moves the cursor to the last offset scanned, as a GAP moves it. The
// cursor then marks everything before it as done, mirrored or skipped, and a mirror opened
// later resumes there, also after this node restarts, when its memory of what was scanned is
// gone. Without it a node restarted beside a region holding copies of its 100,000 topics
// opened a stream for each copy to learn again that it held nothing of that region's (issue
// 34's kill of the origin node: 37-40 s to catch up instead of 23).
func (m *mirror) keepScan(ctx context.Context, b *mirrorBatch) {
	if !m.parking.Load() || !b.atHead || len(b.records) > 0 || b.headPos == 0 || int64(b.headPos-1) <= m.cursor.Load() {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keepScanTimeout)
	defer cancel()
	if err := m.store(sctx, nil, b.headPos-1); err != nil {
		// Only a shortcut is lost: the next mirror scans from the old cursor.
		m.l.log.Debug("mirror parked without storing its scan", "topic", m.topic, "err", err)
		return
	}
	m.cursor.Store(int64(b.headPos - 1))
}

// mirrorBatch is what a mirror session holds between synced appends: the records received
// since the last one, and the next origin offset it accepts.
type mirrorBatch struct {
	records []wal.Record
	bytes   int
	next    uint64
	// The origin's scan position from a HEAD that followed the batch's records, and the
	// origin time of the last record scanned: progress once the batch is appended.
	scanPos  uint64
	scanTime int64
	lastTime int64  // origin time of the batch's last record
	atHead   bool   // the last HEAD showed the origin's scan at its head, and no record came since
	headPos  uint64 // the last HEAD's position: how far the origin scanned
	reached  bool   // a HEAD showed the scan at the head once on this feed
}

// due reports whether the batch should be appended now: it is full, or it is not empty and
// nothing more is waiting (idle).
func (b *mirrorBatch) due(idle bool) bool {
	return len(b.records) > 0 && (idle || len(b.records) >= mirrorBatchRecords || b.bytes >= mirrorBatchBytes)
}

// apply takes one frame of the topic's mirror feed, whichever the stream mapping: it checks and batches a RECORD, notes a HEAD's lag, skips a GAP
// (appending what came before it first), or stores a durable's POSITION. Any other frame is a protocol error.
func (m *mirror) apply(ctx context.Context, b *mirrorBatch, f wire.Frame) error {
	region := m.l.peer.Region
	switch f := f.(type) {
	case *wire.Record:
		if f.OriginRegion != region {
			return fmt.Errorf("record of %q from origin %q on a mirror of region %q: refused (loop)", m.topic, f.OriginRegion, region)
		}
		if f.OriginOffset < b.next {
			return fmt.Errorf("record of %q at origin offset %d, expected %d or later: out of order", m.topic, f.OriginOffset, b.next)
		}
		b.next = f.OriginOffset + 1
		if b.atHead || b.reached {
			m.live.Store(true) // a record after the head was reached: the topic moves
		}
		b.atHead = false
		if brokenSkip() {
			return nil // the broken build (mirrorskip_broken.go): taken, never appended
		}
		b.records = append(b.records, wal.Record{
			OriginRegion: region, OriginOffset: f.OriginOffset,
			ProducerID: f.ProducerID, Sequence: f.Sequence,
			Headers: f.Headers, Payload: f.Payload,
		})
		b.bytes += len(f.Payload)
		b.lastTime = f.Time
	case *wire.Head:
		now := m.l.f.cfg.Now()
		m.health.reported(f.Next, f.Time, now)
		b.atHead = f.Position >= f.Next
		b.headPos = f.Position
		b.reached = b.reached || b.atHead
		var scanTime int64 // origin time of the last record scanned (0: unknown)
		if f.Time != 0 {
			scanTime = f.Time
			if f.Position < f.Next {
				scanTime = f.Time - max(f.Lag, 0)
			}
		}
		if len(b.records) == 0 {
			m.health.scanned(f.Position, scanTime, now)
		} else { // progress once the records before it are appended (flush)
			b.scanPos, b.scanTime = f.Position, scanTime
		}
	case *wire.Gap:
		if err := m.flush(b); err != nil {
			return err
		}
		m.gaps.Add(f.To - f.From)
		m.l.f.metrics.gaps.Add(float64(f.To - f.From))
		m.l.log.Error("records deleted at the origin before they were mirrored: gap", "topic", m.topic,
			"from", f.From, "to", f.To, "origin", region)
		if f.To > 0 {
			if err := m.store(ctx, nil, f.To-1); err != nil {
				return err
			}
			m.cursor.Store(int64(f.To - 1))
		}
		b.next = f.To
	case *wire.Position:
		return m.storePosition(ctx, f) // positions.go
	case *wire.GroupPosition:
		return m.storeGroupPosition(ctx, f) // groups.go
	default:
		return fmt.Errorf("unexpected %s on a mirror stream", f.Type())
	}
	return nil
}

// flush appends the batch and the cursor in one synced Pebble batch (I7).
func (m *mirror) flush(b *mirrorBatch) error {
	if len(b.records) == 0 {
		return nil
	}
	last := b.records[len(b.records)-1].OriginOffset
	// Not ctx: an append abandoned half-way would leave its outcome unknown to the next
	// mirror. It completes (or fails) in about one fsync, or when the log closes.
	if err := m.store(context.Background(), b.records, last); err != nil {
		return fmt.Errorf("append mirrored records: %w", err)
	}
	m.cursor.Store(int64(last))
	now := m.l.f.cfg.Now()
	m.active.Store(now.UnixNano())
	m.health.scanned(last+1, b.lastTime, now)
	if b.scanPos > 0 {
		m.health.scanned(b.scanPos, b.scanTime, now)
		b.scanPos, b.scanTime = 0, 0
	}
	m.records.Add(uint64(len(b.records)))
	m.l.f.metrics.mirrored.Add(float64(len(b.records)))
	b.records, b.bytes = nil, 0 // the log may keep the slice: a new one
	return nil
}

// lag is the mirror's distance behind the origin's head as the origin last reported it:
// records not yet scanned in the origin's log (an upper bound: it counts records the origin
// mirrored from other regions, which are skipped), the origin time between its head and the
// last record scanned, and whether the mirror is stalled.
func (m *mirror) lag() (records uint64, seconds float64, stalled bool) {
	seconds, stalled = m.health.lag(m.l.f.cfg.Now())
	return m.health.lagRecords(), seconds, stalled
}

// store appends recs (possibly none: a gap) and moves the cursor to last, in one synced
// batch of the log, or in one raft entry that also checks the cursor (Config.MirrorAppend).
func (m *mirror) store(ctx context.Context, recs []wal.Record, last uint64) error {
	name := cursorName(m.l.peer.Region)
	if app := m.l.f.cfg.MirrorAppend; app != nil {
		err := app(ctx, MirrorAppend{Topic: m.topic, Region: m.l.peer.Region, Cursor: name,
			HasExpected: m.expected.ok, Expected: m.expected.value, Records: recs, Value: last})
		if err != nil {
			return err
		}
		m.expected.ok, m.expected.value = true, last
		return nil
	}
	if len(recs) == 0 {
		return m.l.f.cfg.Log.SetPosition(ctx, wal.Position{Name: name, Topic: m.topic, Value: last})
	}
	res := m.l.f.cfg.Log.Append(ctx, wal.AppendRequest{Topic: m.topic, Records: recs,
		Position: &wal.Position{Name: name, Topic: m.topic, Value: last}})
	return res.Err
}
