package federation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// ServeStream serves a stream a peer opened on its quicmq-peer/1 connection conn, whose
// first frame (WATCH, MIRROR or RAFT) has been read. It returns when the stream ends. The node
// calls it on the stream's goroutine; the peer was authenticated by mutual TLS. A catalog
// stream (WATCH) begins the peer's link connection: it supersedes the peer's older
// connection, which is closed at once (heal.go).
func (f *Federation) ServeStream(ctx context.Context, conn *quic.Conn, str *quic.Stream, r *wire.Reader, first wire.Frame) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch fr := first.(type) {
	case *wire.Watch:
		f.peerHello(conn, fr.Incarnation)
		return f.serveCatalog(ctx, cancel, conn, str, r, fr)
	case *wire.Mirror:
		return f.serveMirror(ctx, cancel, str, r, fr)
	case *wire.Raft:
		return f.serveRaft(ctx, conn, str, r, fr) // raft.go
	}
	return fmt.Errorf("federation: a peer stream cannot start with %s", first.Type())
}

// IsPeerFrame reports whether a stream starting with f is served by ServeStream.
func IsPeerFrame(f wire.Frame) bool {
	switch f.(type) {
	case *wire.Watch, *wire.Mirror, *wire.Raft:
		return true
	}
	return false
}

// catalogPage is how many topics a catalog stream lists from the log at a time.
const catalogPage = 1024

// serveCatalog announces every local topic matching the peer's patterns, now and as topics
// are created; a later WATCH replaces the patterns. To a peer of another region it also
// reports the head of each announced topic: once as it is announced, then whenever records
// of this region move it, gathered for HeadReportInterval after the first move (park.go on the peer's side:
// what reopens its parked mirrors). Head moves are learnt from the log's notifications, so
// a catalog of idle topics costs nothing per topic.
//
// Long by design: one loop that owns the catalog stream's state (the patterns, the topics
// announced, the heads to report) and selects over its inputs; splitting it would
// share that state between functions.
func (f *Federation) serveCatalog(ctx context.Context, cancel context.CancelFunc, conn *quic.Conn, str *quic.Stream, r *wire.Reader, first *wire.Watch) error {
	defer str.Close()
	updates := make(chan []string, 1)
	go func() { // the stream's reader: later WATCH frames, or the end of the stream
		defer cancel()
		for {
			fr, err := r.Read()
			if err != nil {
				return
			}
			w, ok := fr.(*wire.Watch)
			if !ok {
				return
			}
			select {
			case <-updates: // keep only the newest
			default:
			}
			updates <- w.Patterns
		}
	}()
	newTopics := make(chan struct{}, 1)
	stop := f.cfg.Log.NotifyNewTopics(newTopics)
	defer stop()

	// moved gathers the topics whose head moved (the log calls it on every advance), for a
	// peer of another region; a node of this region mirrors nothing from here. Registered
	// before any head is read, so a move after the read is reported.
	var moved *movedSet
	if f.peerRegion(peerName(conn)) != f.cfg.Region {
		moved = newMovedSet()
		defer f.cfg.Log.WatchAdvances(moved.add)()
	}
	var reportDue <-chan time.Time // the pending report of moved heads (nil: none)

	patterns := newPatternSet(validPatterns(first.Patterns))
	// announced holds the topics announced on the stream, by the log's topic ID, with the
	// head's next offset last reported (0: none). Keyed by the ID, not the name, it holds no
	// pointer: a node keeps one per topic a peer mirrors, and the GC scanned each entry at
	// every cycle beside the hot topics' work (issue 34's figure 3). A topic deleted and
	// created again has another ID: it is announced again.
	announced := make(map[uint32]uint64)
	w := wire.NewWriter(str)
	// ownHeads: the peer's region reads an announcement's HEAD position as this region's own
	// head (Config.OwnHeads), asked again at each page and report, but only when one of them
	// announces a topic with its head (ownHeadsNow): asking looks up gossip's members and
	// their features, which a report of moves the peer's patterns do not match (every 50 ms
	// on a node whose other topics are busy) or of announced topics does not need.
	ownHeads, ownHeadsAsked := false, false
	askOwnHeads := func() { ownHeadsAsked = false }
	ownHeadsNow := func() bool {
		if !ownHeadsAsked {
			ownHeads = moved != nil && f.cfg.OwnHeads != nil && f.cfg.OwnHeads(f.peerRegion(peerName(conn)))
			ownHeadsAsked = true
		}
		return ownHeads
	}
	announce := func(name string) {
		if !patterns.match(name) {
			return
		}
		id, first, next, ok := f.cfg.Log.BoundsID(name)
		if !ok {
			return // deleted since it was created
		}
		if _, ok := announced[id]; ok {
			return
		}
		w.Write(&wire.Topic{Name: name})
		announced[id] = 0
		if moved != nil && next > 0 {
			// Its head, with the announcement: the peer decides at once whether its mirror
			// is behind.
			announced[id] = next
			t, own := f.headTime(name, next), next
			if ownHeadsNow() {
				t, own = f.ownHead(name, first, next)
			}
			w.Write(&wire.Head{Next: next, Position: own, Time: t, Topic: name})
		}
	}
	// report sends a HEAD for each announced topic whose head moved since its last report,
	// and announces a moved topic the listing has not reached yet now, with its head, ahead
	// of its turn: a topic that moves while a reconnect lists many topics is mirrored at once
	// instead of after the listing reaches its name (issue 34's figure 2: up to 3 s for
	// 30,000 topics on a loaded machine, the p99 of the records sent during the catch-up).
	report := func() {
		askOwnHeads()
		for _, t := range moved.take() {
			id, _, next, ok := f.cfg.Log.BoundsID(t)
			if !ok {
				continue // deleted since it moved
			}
			last, ok := announced[id]
			if !ok {
				announce(t)
				continue
			}
			if next == last || !patterns.match(t) {
				continue
			}
			announced[id] = next
			w.Write(&wire.Head{Next: next, Position: next, Time: f.headTime(t, next), Topic: t})
		}
	}
	// Every topic is listed at the start; when the patterns change, the topics under the
	// patterns added (listPrefixes: a WATCH that adds a subscription's topic lists that
	// topic, not the 10,000 others the peer mirrors); in between, only the topics created
	// since the last look (CreatedSince), so a catalog of many topics does not list them all
	// at each creation or change of interest.
	var mark int
	relist := true
	var prefixes []string // to list after the topics created since the last look
	pageSize, paged, recent := catalogPage, func() {}, recentMovesBound
	if h := f.listing.Load(); h != nil {
		pageSize, paged, recent = h.page, h.paged, h.recent
	}
	askOwnHeads()
	if moved != nil {
		// The topics that moved last first, the most recent first (recent.go): after a cut,
		// those published just before the link came back, which would otherwise wait for
		// the listing to reach their names. The listing skips them (each topic once).
		for _, t := range f.recent.newest(recent) {
			announce(t)
		}
	}
	synced := false
	for {
		if relist {
			relist = false
			_, mark = f.cfg.Log.CreatedSince(-1) // before the listing: a topic created meanwhile is in one or the other
			prefixes = []string{""}
		} else {
			var names []string
			names, mark = f.cfg.Log.CreatedSince(mark)
			for _, name := range names {
				announce(name)
			}
		}
		for _, prefix := range prefixes {
			// Page by page in name order (the log's own), flushing each: a catalog of
			// 100,000 topics is never built as one list, and flow control paces it. The
			// mark was taken before: a topic created meanwhile is listed, or announced at
			// the next look.
			for after := ""; ; {
				page, more, err := f.cfg.Log.TopicsPage(prefix, after, pageSize)
				if err != nil {
					return err
				}
				askOwnHeads()
				for _, t := range page {
					announce(t.Name)
				}
				if moved != nil {
					// The moves of topics listed already, without waiting for the end of a
					// listing of many topics (a reconnect's): the peer serves a topic that
					// moves ahead of its backlog, which the listing's heads make.
					report()
				}
				if err := w.Flush(); err != nil {
					return err
				}
				paged()
				if !more || len(page) == 0 {
					break
				}
				after = page[len(page)-1].Name
			}
		}
		prefixes = nil
		if !synced {
			// Every topic held when the stream began is announced: the peer may now decide
			// that a topic it has not heard of is not held here.
			w.Write(&wire.Subscribed{})
			synced = true
		}
		if err := w.Flush(); err != nil {
			return err
		}
		var movedCh <-chan struct{}
		if moved != nil && reportDue == nil {
			movedCh = moved.ch
		}
		select {
		case <-ctx.Done():
			return nil
		case <-newTopics:
		case p := <-updates:
			next := newPatternSet(validPatterns(p))
			added, _ := next.addedTo(patterns)
			patterns = next
			// A pattern removed needs no listing: what was announced stays announced.
			prefixes = listPrefixes(added)
		case <-movedCh:
			reportDue = time.After(f.cfg.HeadReportInterval)
		case <-reportDue:
			reportDue = nil
			report()
		}
	}
}

// listingHooks pace a catalog stream's listing in a test: page topics a page, paged
// called after each page is flushed, and at most recent topics announced ahead of it.
type listingHooks struct {
	page   int
	paged  func()
	recent int
}

// movedSet is the set of topics whose head moved since a catalog stream's last report. The
// log adds to it on every advance (never blocking); the stream's goroutine takes it.
type movedSet struct {
	ch  chan struct{} // poked when the set becomes non-empty
	mu  sync.Mutex
	set map[string]struct{}
}

func newMovedSet() *movedSet {
	return &movedSet{ch: make(chan struct{}, 1), set: make(map[string]struct{})}
}

// add notes that topic's head moved (wal.Log.WatchAdvances) when records first published in
// this region moved it. A move of mirrored records only is not reported: a peer is served
// only this region's records (no loops), so they would open its parked mirror for nothing
// (a stream that scans them, skips them all and parks again: the peer's copy of each record
// it mirrored here coming back to it as a head move). The next move of this region's records
// reports the head past them, and the peer's mirror scans them then.
func (s *movedSet) add(topic string, local bool) {
	if !local {
		return
	}
	s.mu.Lock()
	s.set[topic] = struct{}{}
	n := len(s.set)
	s.mu.Unlock()
	if n == 1 {
		select {
		case s.ch <- struct{}{}:
		default:
		}
	}
}

// take empties the set and returns what it held.
func (s *movedSet) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.set))
	for t := range s.set {
		out = append(out, t)
	}
	s.set = make(map[string]struct{}) // not clear: a map keeps the buckets of its largest size
	return out
}

// peerRegion is the region of the peer named name ("" when Peers does not list it).
func (f *Federation) peerRegion(name string) string {
	for _, p := range f.cfg.Peers() {
		if p.Name == name {
			return p.Region
		}
	}
	return ""
}

// headTime is the time of topic's last record before next (0 when there is none).
func (f *Federation) headTime(topic string, next uint64) int64 {
	if next == 0 {
		return 0
	}
	var t int64
	// ReadFunc, not Read: only the time is wanted, not a copy of the record.
	if _, err := f.cfg.Log.ReadFunc(topic, next-1, 1, 0, func(rec *wal.Record) error { t = rec.Time; return nil }); err != nil {
		return 0
	}
	return t
}

// ownHeadWindow bounds what an announcement reads to find this region's own head: the
// topic's last ownHeadWindow records, and no more than ownHeadBytes of them.
const (
	ownHeadWindow = 16
	ownHeadBytes  = 64 << 10
)

// ownHead is, for a topic announced to a peer of another region whose region reads it
// (Config.OwnHeads), the time of its last record before next (0 when none) and its own head:
// the offset after the last record first published in this region, the HEAD's position.
// The records from own to next are all copies mirrored here from other regions, which a
// mirror stream would skip: a peer whose mirror has scanned to own needs no stream (issue
// 34's figure 2: after a cut, us opened a stream for each of eu's 100,000 copies of its own
// topics, held up to 1,024 streams at eu for thousands of them, and scanned each to learn
// that it holds nothing of eu's). It reads the last record, and when that is a copy the
// last ownHeadWindow records; when none of
// them is this region's and records before them are retained, the own head is not known
// here and is next, as a HEAD without it says. With no own record retained it is the first
// retained offset: a peer whose cursor is before it still opens a stream, and learns of the
// gap there.
func (f *Federation) ownHead(topic string, first, next uint64) (t int64, own uint64) {
	if next == 0 {
		return 0, 0
	}
	// The last record first, as headTime reads it: a topic whose last record is this
	// region's own (every topic published here) costs its announcement no more than before,
	// however large its records.
	lastOwn := false
	if _, err := f.cfg.Log.ReadFunc(topic, next-1, 1, 0, func(rec *wal.Record) error {
		t, lastOwn = rec.Time, rec.OriginRegion == ""
		return nil
	}); err != nil || lastOwn {
		return t, next
	}
	from := max(first, next-min(next, ownHeadWindow))
	found := false
	n, err := f.cfg.Log.ReadFunc(topic, from, ownHeadWindow, ownHeadBytes, func(rec *wal.Record) error {
		t = rec.Time
		if rec.OriginRegion == "" {
			own, found = rec.Offset+1, true
		}
		return nil
	})
	switch {
	case err != nil || from+uint64(n) < next:
		// Not read to the head (retention, a byte bound): the time only if the head was read.
		return f.headTime(topic, next), next
	case found:
		return t, own
	case from == first:
		return t, first
	}
	return t, next
}

func validPatterns(ps []string) []string {
	out := ps[:0:0]
	for _, p := range ps {
		if routing.ValidatePattern(p) == nil {
			out = append(out, p)
		}
	}
	return out
}

// serveMirror serves a mirror stream, whichever the stream mapping its first frame chose:
// each topic asked for on it (one for a stream of its own, any number on the ablation's
// shared stream) from its origin offset, then following the log. Records this node mirrored
// from other regions are skipped: each region serves only its own records, so a full mesh
// has no loops. Topics take turns of one log batch each, each batch flushed with its HEAD
// before the next is read. Writes block on the stream's flow control when the mirroring node
// is slow: nothing else waits. This goroutine is the only writer and owns the cursors; the
// reader goroutine hands later requests over through a requestQueue.
func (f *Federation) serveMirror(ctx context.Context, cancel context.CancelFunc, str *quic.Stream, r *wire.Reader, first *wire.Mirror) error {
	w := wire.NewWriter(str)
	stopWrites := context.AfterFunc(ctx, func() { str.CancelWrite(wire.AppCancelled) })
	defer stopWrites()
	fail := func(e *wire.Error) error {
		stopWrites() // the reader's cancel, when the stream ends, must not reset the ERROR away
		w.Write(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
		w.Flush()
		str.Close()
		return e
	}
	mp, e := f.mappingFor(first)
	if e != nil {
		str.CancelRead(wire.AppCancelled)
		return fail(e)
	}
	wake := make(chan struct{}, 1)
	var cursors []*serveCursor
	defer func() {
		for _, c := range cursors {
			c.stop()
		}
	}()
	add := func(req *wire.Mirror) *wire.Error {
		if err := routing.ValidateTopic(req.Topic); err != nil {
			return &wire.Error{Code: wire.CodeInvalidTopic, Message: err.Error()}
		}
		c := &serveCursor{topic: req.Topic, next: req.From, ready: true}
		c.index, c.topicBeforeHead = mp.tag(uint64(len(cursors)))
		c.stop = f.cfg.Log.Notify(c.topic, wake)
		cursors = append(cursors, c)
		return nil
	}
	for _, req := range mp.opening(first) {
		if e := add(req); e != nil {
			str.CancelRead(wire.AppCancelled)
			return fail(e)
		}
	}

	posTick := time.NewTicker(f.cfg.PositionInterval) // durable positions (positions.go)
	defer posTick.Stop()
	posDue := false
	var q requestQueue
	readDone := make(chan struct{})
	go func() { // the stream's reader: later requests, or the end of the stream
		defer close(readDone)
		if q.read(r, mp, wake) {
			cancel() // the peer's end of the stream ends the mirror
		}
	}()
	defer func() { <-readDone }()
	defer str.CancelRead(wire.AppCancelled)

	for {
		reqs, e := q.take()
		if e != nil {
			return fail(e)
		}
		for _, req := range reqs {
			if e := add(req); e != nil {
				return fail(e)
			}
		}
		if ctx.Err() != nil {
			str.Close()
			return nil
		}
		select {
		case <-posTick.C: // also while records keep the loop from waiting below
			posDue = true
		default:
		}
		if posDue {
			posDue = false
			if err := f.servePositions(w, cursors); err != nil {
				return err
			}
		}
		paused := f.pause.changed()
		served, e, err := f.serveReady(w, cursors)
		if e != nil {
			return fail(e)
		}
		if err != nil {
			return err
		}
		if served {
			continue
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-paused:
		case <-posTick.C:
			posDue = true
		}
	}
}

// serveReady writes a batch for each cursor with something to send (not paused, and ready
// or its topic's head moved) and reports whether there was one.
func (f *Federation) serveReady(w *wire.Writer, cursors []*serveCursor) (served bool, e *wire.Error, err error) {
	for _, c := range cursors {
		if f.pause.has(c.topic) || (!c.ready && !f.headMoved(c)) {
			continue
		}
		served = true
		if e, err = f.serveBatch(w, c); e != nil || err != nil {
			return served, e, err
		}
	}
	return served, nil, nil
}

// pauseSet is the set of topics whose mirror serving a test has paused (export_test.go),
// to show stall detection; it is always empty in the product.
type pauseSet struct {
	mu      sync.Mutex
	topics  map[string]bool
	changes chan struct{} // closed and replaced on each change
}

func (p *pauseSet) has(topic string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.topics[topic]
}

// changed returns a channel closed at the next change.
func (p *pauseSet) changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changes == nil {
		p.changes = make(chan struct{})
	}
	return p.changes
}

func (p *pauseSet) set(topic string, paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.topics == nil {
		p.topics = make(map[string]bool)
	}
	p.topics[topic] = paused
	if p.changes != nil {
		close(p.changes)
	}
	p.changes = make(chan struct{})
}

// requestQueue hands the requests a mirror stream's reader goroutine reads to the serving
// goroutine.
type requestQueue struct {
	mu      sync.Mutex
	pending []*wire.Mirror
	err     *wire.Error // a frame the mapping does not allow: it ends the stream
}

// read reads r until the stream ends (true) or sends a frame the mapping refuses (false),
// queueing each request and waking the serving goroutine.
func (q *requestQueue) read(r *wire.Reader, mp streamMapping, wake chan<- struct{}) (ended bool) {
	for {
		fr, err := r.Read()
		if err != nil {
			return true
		}
		req, e := mp.later(fr)
		if req == nil && e == nil {
			continue
		}
		q.mu.Lock()
		if e != nil {
			q.err = e
		} else {
			q.pending = append(q.pending, req)
		}
		q.mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
		if e != nil {
			return false
		}
	}
}

// take returns the requests queued since the last call, or the error that ends the stream.
func (q *requestQueue) take() ([]*wire.Mirror, *wire.Error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	reqs := q.pending
	q.pending = nil
	return reqs, q.err
}

// serveCursor is one topic served on a mirror stream, owned by serveMirror's goroutine.
type serveCursor struct {
	topic           string
	index           uint64 // on its RECORD and GAP frames (the mapping's tag)
	topicBeforeHead bool   // a TOPIC frame with index precedes each HEAD (the mapping's tag)
	next            uint64 // the next offset of the local log to read
	ready           bool   // read it without waiting for its log to move: new, or its last read found records or a gap
	stop            func() // ends the log's notifications
	headNext        uint64 // the log's next offset when headTime was read
	headTime        int64  // the time of the log's record before headNext

	sentPos map[string]int64 // durable -> update time of the position last sent (positions.go)
	// sentGroup is group -> update time of the group state last sent (groups.go).
	sentGroup map[string]int64
}

// headMoved reports whether c's log has records past c's position.
func (f *Federation) headMoved(c *serveCursor) bool {
	_, next, _ := f.cfg.Log.Bounds(c.topic)
	return next > c.next
}

// serveBatch serves one batch of c's topic: its records from c's position and a HEAD,
// flushed; or, where retention deleted records the peer still wants, a GAP to the first
// retained offset. The *wire.Error ends the stream; the error is the stream's.
func (f *Federation) serveBatch(w *wire.Writer, c *serveCursor) (*wire.Error, error) {
	got, after, scannedTime, err := f.bufferRecords(w, c.topic, c.index, c.next)
	c.next = after
	var oor *wal.OffsetOutOfRangeError
	switch {
	case err == nil, errors.Is(err, wal.ErrUnknownTopic):
	case errors.As(err, &oor):
		w.Buffer(&wire.Gap{Index: c.index, From: c.next, To: oor.First})
		c.next, c.ready = oor.First, true
		return nil, nil
	case errors.Is(err, wal.ErrClosed):
		return wire.Errorf(wire.CodeShuttingDown, "node shutting down"), nil
	default:
		w.Flush() // the records before the failed one are good
		return wire.Errorf(wire.CodeInternal, "read %q at %d: %v", c.topic, c.next, err), nil
	}
	if c.topicBeforeHead {
		w.Buffer(&wire.Topic{Index: c.index})
	}
	w.Buffer(f.head(c, scannedTime))
	c.ready = got > 0 // after a batch, read again at once: HEAD once more on catching up
	return nil, w.Flush()
}

// head describes how far c's scan position is behind the log's head, and the head's time
// (the time of the log's last record, read once per head: c caches it).
func (f *Federation) head(c *serveCursor, scannedTime int64) *wire.Head {
	_, next, _ := f.cfg.Log.Bounds(c.topic)
	h := &wire.Head{Next: next, Position: c.next}
	switch {
	case next == c.headNext:
	case c.next == next && scannedTime > 0: // the batch's last record is the head
		c.headNext, c.headTime = next, scannedTime
	default:
		c.headNext, c.headTime = next, f.headTime(c.topic, next)
	}
	h.Time = c.headTime
	if c.next < next && scannedTime > 0 && h.Time > 0 {
		h.Lag = max(h.Time-scannedTime, 0)
	}
	return h
}

// bufferRecords encodes the next batch of topic's log from offset next straight from the
// log's memory into w's buffer (never blocking while the log's iterator is open), as RECORD
// frames with index (the stream mapping's tag), skipping records mirrored here from other regions (their region serves
// them). It returns how many records it scanned, the offset after them and the time of the
// last, and ReadFunc's error.
func (f *Federation) bufferRecords(w *wire.Writer, topic string, index, next uint64) (got int, after uint64, scannedTime int64, err error) {
	after = next
	var out wire.Record // one value, reused: Buffer encodes it at once
	got, err = f.cfg.Log.ReadFunc(topic, next, 1024, 256<<10, func(rec *wal.Record) error {
		after, scannedTime = rec.Offset+1, rec.Time
		if rec.OriginRegion != "" {
			return nil
		}
		out = wire.Record{
			Index: index, Offset: rec.Offset, Time: rec.Time,
			OriginRegion: f.cfg.Region, OriginOffset: rec.Offset,
			ProducerID: rec.ProducerID, Sequence: rec.Sequence,
			Headers: rec.Headers, Payload: rec.Payload,
		}
		w.Buffer(&out)
		return nil
	})
	return got, after, scannedTime, err
}
