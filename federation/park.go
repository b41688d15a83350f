package federation

import (
	"container/heap"
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// Streams for the topics that move (invariant I11). A link mirrors any number of topics but
// keeps at most Config.MaxMirrorStreams mirror streams open: a mirror holds a stream (and a
// goroutine) only while its topic moves. The state of every mirrored topic of a link is a
// mirrorHealth in link.mu.health (what the origin reported of its head, how far the mirror
// has scanned); the cursor itself stays in the log, so parking and reopening are the
// mirror's ordinary end and resume, exactly once (I7).
//
//   - A mirror parks when it is caught up and quiet: after MirrorParkAfter without records,
//     or at once when other topics wait for a stream and it has only caught up (no record
//     arrived since it first reached the head: a topic catching up, not a hot one).
//   - The origin reports a head on the catalog stream for each announced topic as it is
//     announced and whenever the head moves (serve.go). A parked topic whose reported head is
//     past what it scanned, or one whose head was never reported, waits in the link's queue.
//   - Waiting topics take one of two lanes. A topic whose head the origin reported moving
//     on this connection (a HEAD on the catalog stream that is not its announcement's, or an
//     announcement's with a last record appended since the links to the peer came back) is
//     live: it waits in the moved lane, served ahead of the backlog lane (but one pick in
//     backlogShare goes to the backlog while both wait, so it never starves), where topics wait
//     that were behind when announced (a new link's or a reconnect's catch-up) or whose
//     mirror parked before it caught up, newest head first (backlog). So after a long cut,
//     records published after the return are mirrored within the bound's turnover instead
//     of behind every topic the cut touched (issue 34's figure 2: 21 s p99 after a 30 s cut,
//     the backlog's catch-up, in the FIFO queue).
//   - The link's goroutine opens streams for waiting topics, in turn, while fewer than the
//     bound are open; for the backlog lane only while fewer than the bound less a quarter
//     (movedReserve) are, so a topic that moves during a catch-up finds a stream free at
//     once instead of waiting for a backlog mirror to end. When the bound is reached, the
//     least recently active open mirrors park for them: caught-up ones first, then any that
//     held its stream for MirrorSlice (it waits again at the back, from its cursor). So
//     catching up many topics at once is paced by the bound and finishes, and no topic
//     waits forever.
//
// Each step holds link.mu: a head reported while a mirror is open (or parking) is left to
// the mirror, and the mirror's end (mirrorEnded) queues it again when a head past its scan
// came meanwhile, so no reported move is lost between parking and the notice.

// errParked ends a mirror's feed when it gives its stream back.
var errParked = errors.New("mirror parked")

// resetForConn sets up the link's mirror scheduling for a new connection: nothing
// announced or waiting yet. patterns decides what is mirrored; parkable is false on a link
// within the region (no mirrors) and with the shared-link ablation (its mirrors share one
// stream and never park).
func (l *link) resetForConn(patterns []string, parkable bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.conns++ // nothing is announced on the new connection yet
	l.mu.unwanted = make(map[string]bool)
	l.mu.queue = nil
	l.mu.queued = make(map[string]bool)
	l.mu.moved = nil
	l.mu.hurried = make(map[string]bool)
	l.mu.patterns = newPatternSet(patterns)
	l.mu.parkable = parkable
}

// announce notes a topic the peer announced on the catalog stream (its reader goroutine),
// with the HEAD that came with the announcement (nil: none).
func (l *link) announce(topic string, hd *catalogHead) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hd == nil {
		l.considerLocked(topic)
		return
	}
	if l.announcedHealthLocked(topic) != nil {
		l.headReportedLocked(topic, hd)
	}
}

// considerLocked makes an announced topic one of the link's mirrors if it is wanted, and
// queues it for a stream if it needs one.
func (l *link) considerLocked(topic string) {
	h := l.announcedHealthLocked(topic)
	if h == nil {
		return
	}
	if l.mu.mirrors[topic] == nil && h.needsStream() {
		l.enqueueLocked(topic)
	}
}

// healthLocked is the health of topic, made from its cursor if the topic is one of the
// link's mirrors now; nil when it is not mirrored here.
func (l *link) healthLocked(topic string) *mirrorHealth {
	if !l.f.mirrored(topic, l.mu.patterns) {
		return nil
	}
	h := l.mu.health[topic]
	if h == nil {
		h = &mirrorHealth{}
		l.mu.health[topic] = h
		delete(l.mu.unwanted, topic)
		// The cursor is the origin offset of the last record mirrored, which is its offset
		// in the origin's log: everything before it is scanned.
		if pos, ok, err := l.f.cfg.Log.Position(cursorName(l.peer.Region), topic); err == nil && ok {
			h.scanned(pos+1, 0, l.f.cfg.Now())
		}
	}
	return h
}

// announcedHealthLocked is healthLocked for a topic the peer announced on the current
// connection, noted as announced; nil (the topic noted unwanted) when it is not mirrored.
func (l *link) announcedHealthLocked(topic string) *mirrorHealth {
	h := l.healthLocked(topic)
	if h == nil {
		l.mu.unwanted[topic] = true
		return nil
	}
	h.announcedOn = l.mu.conns
	return h
}

// announcedLocked reports whether the peer announced topic on the current connection.
func (l *link) announcedLocked(topic string) bool {
	if h := l.mu.health[topic]; h != nil {
		return h.announcedOn == l.mu.conns
	}
	return l.mu.unwanted[topic]
}

// catalogHead is a HEAD the origin sent on the catalog stream.
type catalogHead struct {
	next  uint64 // the origin log's next offset
	own   uint64 // the origin's own head: the records from it to next are copies (<= next)
	time  int64  // the origin's time of its last record
	moved bool   // it reports a move on this connection (the moved lane), not a listing's head
}

// headReported notes a head the origin reported on the catalog stream, and queues the topic
// for a stream when it is parked and behind: in the moved lane when the head moved on this
// connection (moved), else in the backlog.
func (l *link) headReported(topic string, hd *catalogHead) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.health[topic] == nil {
		return // not mirrored here
	}
	l.headReportedLocked(topic, hd)
}

func (l *link) headReportedLocked(topic string, hd *catalogHead) {
	h := l.mu.health[topic]
	now := l.f.cfg.Now()
	h.reported(hd.next, hd.time, now)
	// Everything of the origin's own is scanned: the rest are copies a stream would skip.
	h.copiesAfter(hd.own, hd.next, hd.time, now)
	if m := l.mu.mirrors[topic]; m != nil {
		// Left to the open mirror; if it parks before it has the move, its end queues the
		// topic in the moved lane.
		m.movedMeanwhile = m.movedMeanwhile || hd.moved
		return
	}
	if h.announcedOn != l.mu.conns {
		return
	}
	if !h.needsStream() {
		// Caught up, on this report: it waits no more (its entries in the lanes are
		// skipped as stale), so it neither counts among the waiting nor parks others.
		delete(l.mu.queued, topic)
		delete(l.mu.hurried, topic)
		return
	}
	switch {
	case hd.moved:
		l.hurryLocked(topic)
	case l.mu.queued[topic] && !l.mu.hurried[topic]:
		// Waiting in the backlog, queued before its head was known (announced, then the
		// announcement's HEAD): its turn now follows this head's time. The earlier entry is
		// skipped as stale once the topic is taken.
		l.pushBacklogLocked(topic, hd.time)
	default:
		l.enqueueLocked(topic)
	}
}

// enqueueLocked queues topic in the backlog lane, at the time of its last reported head.
func (l *link) enqueueLocked(topic string) {
	if l.mu.queued[topic] {
		return
	}
	l.mu.queued[topic] = true
	var at int64
	if h := l.mu.health[topic]; h != nil {
		at = h.headAt()
	}
	l.pushBacklogLocked(topic, at)
	l.poke()
}

func (l *link) pushBacklogLocked(topic string, at int64) {
	l.mu.seq++
	heap.Push(&l.mu.queue, backlogEntry{topic: topic, at: at, seq: l.mu.seq})
}

// backlog is the backlog lane: the topics whose head was behind when announced, or whose
// mirror parked before it caught up, served newest head first (by the origin's time of the
// last record, FIFO among equals). After a cut, the topics that moved last, just before the
// link came back (records published after the return but before the reconnect, whose heads
// the listing announces with a time before the link's return), go first instead of waiting
// their turn in name order behind every topic the cut touched: issue 34's figure 2, where
// the records sent in the 0.2 s before the reconnect made the p99 of those sent during the
// catch-up (7.6 s; the median 1.3 s). Every entry is taken in the end: the lane is a
// catch-up's, and gains entries only from announcements and mirrors parked behind.
type backlog []backlogEntry

type backlogEntry struct {
	topic string
	at    int64  // the origin's time of the topic's head when queued (unix ns; 0: unknown)
	seq   uint64 // order of queueing, among equal times
}

func (b backlog) Len() int { return len(b) }
func (b backlog) Less(i, j int) bool {
	if b[i].at != b[j].at {
		return b[i].at > b[j].at
	}
	return b[i].seq < b[j].seq
}
func (b backlog) Swap(i, j int) { b[i], b[j] = b[j], b[i] }
func (b *backlog) Push(x any)   { *b = append(*b, x.(backlogEntry)) }
func (b *backlog) Pop() any {
	old := *b
	e := old[len(old)-1]
	old[len(old)-1] = backlogEntry{} // the slot keeps no topic name alive past its turn
	*b = old[:len(old)-1]
	return e
}

// hurryLocked queues topic in the moved lane, also when it waits in the backlog already (its
// entry there is then skipped as stale: a topic waits once, counted in queued).
func (l *link) hurryLocked(topic string) {
	if l.mu.hurried[topic] {
		return
	}
	l.mu.hurried[topic] = true
	l.mu.queued[topic] = true
	l.mu.moved = append(l.mu.moved, topic)
	l.poke()
}

// backlogShare is how often the backlog lane is served while both lanes wait: one pick in
// backlogShare. Without it a moved lane that never empties (records to random topics at the
// rate the streams turn over) starves the backlog: a topic parked before it caught up
// waited minutes (issue 34's campaign at load 20).
const backlogShare = 4

// movedReserve sets the part of the bound kept for the moved lane: the backlog lane opens a
// stream only while more than bound/movedReserve of the bound's streams are free. Without it
// a catch-up's backlog takes every stream, and a topic that moves meanwhile waits until one
// of them reaches its head or holds its stream for MirrorSlice: the p99 of the records
// published during a catch-up after a 30 s cut was 2-3 s on a quiet machine (issue 34's
// figure 2), while every stream of the bound served the backlog.
const movedReserve = 4

// backlogBoundLocked is how many streams may be open for the backlog lane to open one more:
// the bound less its reserve for the moved lane.
func (l *link) backlogBoundLocked() int {
	b := l.boundLocked()
	if b == math.MaxInt {
		return b
	}
	return b - b/movedReserve
}

// nextWaitingLocked takes the next waiting topic: the moved lane's first, else the
// backlog's newest (and the backlog's one pick in backlogShare while both wait), skipping stale
// entries (topics taken from the other lane, or no longer mirrored). The backlog is served
// only if backlogOK (streams free beyond the moved lane's reserve). It returns false when
// none waits that may be served.
func (l *link) nextWaitingLocked(backlogOK bool) (string, bool) {
	for len(l.mu.moved) > 0 || (backlogOK && len(l.mu.queue) > 0) {
		var t string
		l.mu.picks++
		if len(l.mu.moved) > 0 && (!backlogOK || len(l.mu.queue) == 0 || l.mu.picks%backlogShare != 0) {
			t, l.mu.moved = l.mu.moved[0], l.mu.moved[1:]
		} else {
			t = heap.Pop(&l.mu.queue).(backlogEntry).topic
		}
		if !l.mu.queued[t] {
			continue
		}
		delete(l.mu.queued, t)
		delete(l.mu.hurried, t)
		return t, true
	}
	return "", false
}

// poke wakes the link's goroutine to open streams for waiting topics.
func (l *link) poke() {
	select {
	case l.sched <- struct{}{}:
	default:
	}
}

// waiting reports whether topics wait for a stream on a link whose mirrors park.
func (l *link) waiting() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.parkable && len(l.mu.queued) > 0
}

// waitingForStream reports whether topics wait while every stream they may take is taken:
// the bound's for the moved lane, the bound's less the moved lane's reserve for the backlog.
func (l *link) waitingForStream() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.parkable && len(l.mu.queued) > 0 && l.freeLocked() == 0
}

// freeLocked is how many streams the waiting topics may open now: the bound's free ones when
// topics wait in the moved lane, else those beyond the moved lane's reserve.
func (l *link) freeLocked() int {
	if len(l.mu.hurried) > 0 {
		return max(l.boundLocked()-len(l.mu.mirrors), 0)
	}
	return max(l.backlogBoundLocked()-len(l.mu.mirrors), 0)
}

func (l *link) boundLocked() int {
	if !l.mu.parkable {
		return math.MaxInt
	}
	return l.f.cfg.MaxMirrorStreams
}

// schedule opens streams for waiting topics, in turn, while fewer than the bound are open.
// It runs on the link's goroutine; the mirrors it starts are counted in wg.
func (l *link) schedule(ctx context.Context, conn *quic.Conn, o mirrorOpener, wg *sync.WaitGroup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	bound := l.boundLocked()
	for len(l.mu.mirrors) < bound {
		t, ok := l.nextWaitingLocked(len(l.mu.mirrors) < l.backlogBoundLocked())
		if !ok {
			break
		}
		h := l.mu.health[t]
		if h == nil || l.mu.mirrors[t] != nil || h.announcedOn != l.mu.conns || !h.needsStream() {
			continue // caught up meanwhile (a head reported after it was queued)
		}
		m := newMirror(l, t, h)
		l.mu.mirrors[t] = m
		l.mu.mostOpen = max(l.mu.mostOpen, len(l.mu.mirrors))
		l.mu.opened++
		l.mu.burst++
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.run(ctx, conn, o)
			l.mirrorEnded(m)
		}()
	}
	if len(l.mu.queue) == 0 && len(l.mu.moved) == 0 && (l.mu.queue != nil || l.mu.moved != nil) {
		// Let the arrays and the maps of a long catch-up go (a map keeps its largest size).
		l.mu.queue, l.mu.moved = nil, nil
		if len(l.mu.queued) == 0 {
			l.mu.queued = make(map[string]bool)
			l.mu.hurried = make(map[string]bool)
		}
	}
}

// mirrorEnded drops an ended mirror from the open set and queues its topic again if the
// origin reported a head past what it scanned (a move noticed while it was open or parking,
// or a mirror parked for another before it caught up).
//
// The last mirror of a catch-up to end calls Config.CatchupEnded (catchupEndedLocked).
func (l *link) mirrorEnded(m *mirror) {
	m.cancel() // a parked mirror's context would stay among the link's children
	l.mu.Lock()
	if l.mu.mirrors[m.topic] == m {
		delete(l.mu.mirrors, m.topic)
	}
	if h := l.mu.health[m.topic]; h != nil && h.announcedOn == l.mu.conns && h.needsStream() {
		if m.movedMeanwhile {
			l.hurryLocked(m.topic)
		} else {
			l.enqueueLocked(m.topic)
		}
	}
	l.poke() // a stream is free
	ended := l.catchupEndedLocked()
	l.mu.Unlock()
	if ended && l.f.cfg.CatchupEnded != nil {
		l.f.cfg.CatchupEnded()
	}
}

// catchupEndedLocked reports whether the link's catch-up just ended: no mirror open, none
// waiting, and at least a quarter of the bound's streams opened since that was last so
// (catchupOpenedLocked). A few topics that move now and then never count as one: their
// streams' garbage is what Go's pacing collects anyway.
func (l *link) catchupEndedLocked() bool {
	if len(l.mu.mirrors) > 0 || len(l.mu.queued) > 0 {
		return false
	}
	ended := l.mu.burst >= l.catchupOpenedLocked()
	l.mu.burst = 0
	return ended
}

// catchupOpenedLocked is how many mirrors a link opens between two moments with none open
// for it to count as a catch-up: a quarter of the bound (at least one).
func (l *link) catchupOpenedLocked() int { return max(l.boundLocked()/4, 1) }

// parkIdle parks the open mirrors that are caught up and quiet for MirrorParkAfter and, while
// topics wait for a stream with none free, the least recently active others: caught-up
// ones first, then those that held their stream for MirrorSlice, and a few more caught-up
// quiet ones. It runs on the link's goroutine every tenth of the shorter of the two, and
// looks only at open mirrors (at their health only when topics wait or they are quiet).
func (l *link) parkIdle() {
	now := l.f.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.parkable {
		return
	}
	type cand struct {
		m      *mirror
		caught bool
		active time.Time
	}
	var cands []cand
	parking := 0
	waiting := len(l.mu.queued) > 0
	for _, m := range l.mu.mirrors {
		if m.parking.Load() {
			parking++
			continue
		}
		active := m.activeAt()
		quiet := now.Sub(active) >= l.f.cfg.MirrorParkAfter
		if !quiet && !waiting {
			continue // nothing to decide about it: its health (a lock) is not needed
		}
		caught := !m.health.needsStream()
		if caught && quiet {
			m.park()
			parking++
			continue
		}
		if waiting && (caught || now.Sub(m.openedAt) >= l.f.cfg.MirrorSlice) {
			cands = append(cands, cand{m, caught, active})
		}
	}
	need := len(l.mu.queued) - l.freeLocked() - parking
	if need <= 0 || len(cands) == 0 {
		return
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.caught != b.caught {
			if a.caught {
				return -1
			}
			return 1
		}
		return a.active.Compare(b.active)
	})
	// Park beyond the need, up to a sixteenth of the bound (at least one), the caught-up
	// mirrors quiet for a park tick: when topics that move at random wake their parked
	// mirrors one by one (1,000 records/s over 100,000 topics: each record a topic of its
	// own), each waiting topic would otherwise run this scan of every open mirror again
	// (issue 34's figure 2: 14% of the mirroring node's CPU at 1,024 open mirrors). Such a
	// topic rarely moves again while it would hold its stream; a hot one is live, and kept.
	n := min(need, len(cands))
	for extra := max(l.boundLocked()/16, 1); n < len(cands) && extra > 0; n, extra = n+1, extra-1 {
		c := cands[n]
		if !c.caught || c.m.live.Load() || now.Sub(c.active) < l.f.cfg.parkTick() {
			break
		}
	}
	for _, c := range cands[:n] {
		c.m.park()
	}
}

// parkTick is how often parkIdle runs.
func (c Config) parkTick() time.Duration {
	return max(min(c.MirrorParkAfter, c.MirrorSlice)/10, 10*time.Millisecond)
}

// repattern applies new watch patterns to the current connection's mirrors: mirrors of
// topics no longer wanted stop (their cursors stay, so returning interest resumes them)
// and newly wanted announced topics are considered. When the patterns only grew and all is
// false (a subscription's new pattern, not a Resync), no mirror can stop and only the
// announced topics not mirrored yet can start: it looks at those alone, so a change of
// interest costs nothing per parked mirror (issue 34: with 10,000 parked mirrors, each of
// 100 subscriptions set up looked at every one of them, 13 to 400 ms of this goroutine).
func (l *link) repattern(patterns []string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := newPatternSet(patterns)
	_, onlyAdds := next.addedTo(l.mu.patterns)
	l.mu.patterns = next
	if onlyAdds && !all {
		for t := range l.mu.unwanted {
			l.considerLocked(t) // leaves unwanted when it is mirrored now
		}
		return
	}
	// The announced topics, before the health of those no longer mirrored goes.
	announced := make([]string, 0, len(l.mu.unwanted))
	for t, h := range l.mu.health {
		if h.announcedOn == l.mu.conns {
			announced = append(announced, t)
		}
	}
	for t := range l.mu.unwanted {
		announced = append(announced, t)
	}
	for t, m := range l.mu.mirrors {
		if !l.f.mirrored(t, next) {
			m.stop() // it stays in mirrors until it ended, so a successor never overlaps it
		}
	}
	for t := range l.mu.health {
		if !l.f.mirrored(t, next) {
			delete(l.mu.health, t) // a topic no longer mirrored here is not behind
			delete(l.mu.queued, t)
			delete(l.mu.hurried, t)
		}
	}
	clear(l.mu.unwanted)
	for _, t := range announced {
		l.considerLocked(t)
	}
}
