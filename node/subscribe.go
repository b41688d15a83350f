package node

import (
	"context"
	"errors"
	"io"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/vector"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// durableRE is the grammar of durable consumer names; peerDurableRE that of the names a
// sibling relays, which may carry a tenant's namespace ("tenant/T/NAME").
var (
	durableRE     = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,255}$`)
	peerDurableRE = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,400}$`)
)

// subscription is the subscription core: a cursor per matching topic over the durable log,
// plus a bounded read-ahead (Config.ReadAhead), the frames it sends, the checks of the ACKs
// it gets and a durable consumer's positions. How its frames reach the client is its
// stream mapping, out (substream.go): a stream of its own, or its part of a shared stream
// (the ablation, ablation.go); nothing else differs between the two.
//
// Goroutines: the run goroutine owns the cursors and everything marked below, and encodes
// frames; the writer goroutine is the only one writing to the mapping; the ack reader (the
// own stream's ack goroutine, or a shared stream's reader) checks ACKs and stores
// positions. They share only mu. When the client reads slowly, QUIC flow control blocks the
// writer, then the run goroutine, and nothing else: no queue grows, no other stream waits
// (invariants I4, I5).
type subscription struct {
	s     *session
	out   subStream
	req   *wire.Subscribe
	label string // subscription label for metrics: the durable name or "-"
	batch bool   // the client accepts RECORDS frames (wire.SubscribeRecords)
	// runs: records go in RUNS frames, which bind each topic in its first record's entry
	// instead of a TOPIC frame (wire.BufferRun): a wildcard read by sweep (sweep.go) on a
	// stream of its own whose connection speaks protocol version 3 and that set batch.
	runs     bool
	caughtUp bool   // the client asked for CAUGHT_UP (wire.SubscribeCaughtUp)
	owner    string // a literal topic that node of the region owns: served by it alone
	series   *subSeries
	ctx      context.Context
	cancel   context.CancelFunc
	wake     chan struct{} // a matching topic advanced, a new topic matched, or the stream ended
	setUp    chan struct{} // closed once SUBSCRIBED is written, or the subscription failed first
	started  time.Time
	// beforeEnd, if set, runs in end before the node's last frame and FIN (run goroutine).
	beforeEnd func()

	draining atomic.Bool
	ackErr   atomic.Pointer[wire.Error] // a protocol error found by the ack reader
	commits  commits                    // COMMIT frames answered (commit.go)
	vec      vectorState                // vector positions: asked for, and a durable's acknowledged (vector.go)

	// Owned by the run goroutine.
	cursors  []*cursor
	byTopic  map[string]*cursor
	w        *wire.Writer
	rec      wire.Record             // the frame being written, reused
	topicF   wire.Topic              // the TOPIC frame bind writes, reused: none allocated per topic
	enc      *cursor                 // the cursor readCursor reads, for encode
	encBytes int                     // payload bytes encode buffered in this read
	encodeFn func(*wal.Record)       // sub.encode, bound once
	scanFn   func(*wal.Record) error // sub.encodeScanned, bound once
	latest   map[string]uint64       // for start=latest: each topic's head when the subscription began
	ups      map[string]*upstream    // by node: this region's other owners (upstream.go)
	upIndex  map[string]uint64       // upstream topic name -> its number on the subscription
	upRetry  map[string]bool         // nodes whose upstream failed and has not been opened again
	upCh     chan upMsg              // upstream frames, handed over one at a time
	upWG     sync.WaitGroup          // upstream readers
	writeq   chan []byte             // batches for the writer goroutine (started by the first flush)
	written  chan error              // the writer's result for each batch
	writing  bool                    // a batch was handed over and its result not yet taken
	spare    []byte                  // the buffer of the last batch written, reused for the next
	holding  bool                    // a cursor's scanner may hold a log iterator (releaseScans)
	hold     *time.Timer             // bounds how long waitWrite keeps them (scanHold)
	isSetUp  bool                    // setUp is closed
	catchUp  map[*cursor]uint64      // with caughtUp: cursors not yet at their head at set-up
	upWait   map[string]bool         // with caughtUp: upstream nodes whose CAUGHT_UP has not come
	upTopics uint64                  // with caughtUp: topics the upstreams' CAUGHT_UP frames counted
	setupN   uint64                  // topics of this node's log matching at set-up
	caughtOK bool                    // CAUGHT_UP buffered
	sweep    sweepState              // a wildcard's reading by sweep (sweep.go)
	head     uint64                  // with sweep, at set-up: the head of the topic startOffset is asked about

	// Set by the fanout the subscription parked on (fanout.go), under its mu: the frames it
	// counted as delivered and could not write, for the run goroutine to write first.
	handback []byte

	// Owned by the ack reader.
	pending map[string]uint64 // durable positions read, not yet stored

	mu struct {
		sync.Mutex
		newTopics []string     // pushed by the node's topic watcher
		bound     []boundTopic // by topic number: for validating ACKs
		curs      []*cursor    // every cursor, for the lag metric (cursor.pub)
	}
}

type cursor struct {
	topic  string
	index  uint64 // the topic's number on the subscription (the wire index is out.index of it)
	next   uint64
	pub    uint64       // next as the lag metric sees it (the subscription's mu.curs), under mu
	stored uint64       // 1 + the durable consumer's stored position at the start; 0: none
	cancel func()       // stops the log's notifications
	scan   *wal.Scanner // keeps the log's iterator between reads while the cursor catches up
	tail   *topicTail   // the topic's shared tail, nil when tails are off (tail.go)

	skip map[string]uint64 // a vector whose covered records are skipped (vector.go); nil: none

	// A sweep subscription's cursor (sweep.go) has no scanner, tail or cancel of its own.
	inst   wal.Instance // the topic's log it reads
	id     uint32       // inst's ID: the order of the sweep's reads
	active bool         // among the cursors the next round reads

	bound bool // TOPIC frame sent (beside id and active: a cursor of 96 bytes, not 104)
}

type boundTopic struct {
	name        string
	delivered   uint64    // offset after the last record sent
	floor       uint64    // 1 + the highest position stored or staged (durable, this node's log)
	up          *upstream // the node serving the topic, nil for this node's log
	remoteIndex uint64    // the topic's index on the upstream
	unsentAck   uint64    // 1 + the highest ACK not forwarded yet (its upstream failed); 0: none
}

// authorizeSubscribe checks a SUBSCRIBE for the session's principal and returns the request
// as the node serves it (a tenant's namespace added). Every mapping goes through it, so the
// ablation can never skip a tenant or grant check.
func (s *session) authorizeSubscribe(req *wire.Subscribe) (*wire.Subscribe, *wire.Error) {
	n := s.n
	a := s.actor
	if e := a.CheckTopic(req.Pattern, true); e != nil {
		return nil, e
	}
	if e := a.MaySubscribe(req.Pattern); e != nil {
		return nil, e
	}
	durableOK := durableRE.MatchString
	if s.peer {
		durableOK = peerDurableRE.MatchString
	}
	if req.Durable != "" && !durableOK(req.Durable) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "durable name %q: want 1-255 characters of [A-Za-z0-9_.-]", req.Durable)
	}
	if req.Start > wire.StartTime {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "start kind %d: want 0 (earliest), 1 (latest), 2 (offset) or 3 (time)", req.Start)
	}
	if e := checkVector(a, n.cfg.Region, req); e != nil { // vector.go
		return nil, e
	}
	if a.Tenant != "" {
		r := *req
		r.Pattern, r.Durable = a.Topic(req.Pattern), a.Durable(req.Durable)
		r.Vector = namespaceVector(a, req.Vector)
		req = &r
		if e := n.checkDurables(a, req.Durable); e != nil {
			return nil, e
		}
	}
	if req.Region != "" && req.Region != n.cfg.Region && s.peer {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "a replay passed through from another region cannot be passed on to region %q", req.Region)
	}
	return req, nil
}

// countSubscription counts a subscription against the connection's limit; the caller
// uncounts it (s.subs.Add(-1)) when it ends. A peer's connection carries the subscriptions
// of many clients (each already counted on its own connection): only QUIC's stream limit
// bounds it.
func (s *session) countSubscription() *wire.Error {
	if got := s.subs.Add(1); got > int64(s.n.cfg.MaxSubscriptionsPerConn) && !s.peer {
		s.subs.Add(-1)
		return wire.Errorf(wire.CodeLimit, "%d subscriptions open on this connection, the limit is %d", got-1, s.n.cfg.MaxSubscriptionsPerConn)
	}
	return nil
}

// subscribe serves a subscription stream (the product mapping: a stream of its own) until
// it ends.
func (s *session) subscribe(str *quic.Stream, r *wire.Reader, req *wire.Subscribe) {
	n := s.n
	refuse := func(e *wire.Error) {
		n.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(e.Code), 10)).Inc()
		s.failStream(str, e)
	}
	req, e := s.authorizeSubscribe(req)
	if e == nil {
		e = s.countSubscription()
	}
	if e != nil {
		refuse(e)
		return
	}
	defer s.subs.Add(-1)
	if req.Group != nil {
		s.serveMember(str, r, req, refuse) // member.go: a member of a shared consumer group (node/groups)
		return
	}
	var release func() // an exclusive durable's lock (exclusive.go)
	if req.Durable != "" && !s.peer {
		release, e = n.lockDurable(s, req.Durable, s.actor.ClientDurable(req.Durable), req.Flags&wire.SubscribeStandby != 0, str.Context().Done())
		if e != nil || release == nil {
			if e != nil {
				refuse(e)
			}
			return
		}
		defer release()
	}
	if req.Region != "" && req.Region != n.cfg.Region {
		s.passThrough(str, r, req, n.regionTarget(req.Region), refuse)
		return
	}
	sub, e := s.newSubscription(s.ctx, req, ownStream{str})
	if e != nil {
		refuse(e)
		return
	}
	defer sub.cancel()
	// Never on a shared stream (the ablation's index is not a stream-local number) nor to a
	// peer: a peer link speaks wire.PeerVersion, and a region replay's stream is passed
	// through to a client of any version.
	sub.runs = sub.batch && s.version >= wire.RunsVersion && !s.peer
	ackDone := make(chan struct{})
	if release != nil {
		// A durable's subscription leaves the node (its members as management counts them,
		// its lock) before the node ends its side, once the ack reader has stored the ACKs it
		// read: a client that sees the FIN (or ERROR) may subscribe again, or remove the
		// consumer, at once.
		sub.beforeEnd = func() {
			sub.cancel() // the ack reader may still wait for the set-up
			<-ackDone
			n.removeSubscription(sub)
			release()
		}
	}
	go func() {
		defer close(ackDone)
		// Wait for the set-up: ACKs are checked against topics it binds.
		select {
		case <-sub.setUp:
		case <-sub.ctx.Done():
			return
		}
		defer sub.cancel() // the client's FIN ends the subscription, after its ACKs are stored
		if e := sub.readAcks(r); e != nil {
			sub.ackErr.Store(e)
		}
	}()
	sub.serve()
	<-ackDone
}

// newSubscription makes the core of a subscription authorized by authorizeSubscribe, on
// mapping out, its context a child of parent. It resolves the owner of a literal topic.
func (s *session) newSubscription(parent context.Context, req *wire.Subscribe, out subStream) (*subscription, *wire.Error) {
	n := s.n
	// A subscription relayed by another node of this region is served from this node's log
	// alone; a client's subscription to a topic another node owns is served from an upstream
	// to that node (upstream.go), which resumes where it was when the owner fails or restarts.
	owner := ""
	if n.rep != nil && !s.peer && routing.IsLiteral(req.Pattern) {
		// replicated.go: any replica serves reads; a durable consumer is served by the leader.
		o, e := n.rep.subscribeOwner(s.ctx, req.Pattern, req.Durable != "")
		if e != nil {
			return nil, e
		}
		if o != "" {
			n.place.RelayedSubs.Inc()
			owner = o
		}
	} else if n.rep == nil && n.place != nil && !s.peer && routing.IsLiteral(req.Pattern) {
		o, e := n.place.Owner(s.ctx, req.Pattern)
		if e != nil {
			return nil, e
		}
		if o != n.cfg.Name {
			n.place.RelayedSubs.Inc()
			owner = o
		}
	}
	// The options apply to this stream only: the requests this subscription sends on to
	// other nodes of the region (upstream.go) read RECORD frames.
	batch := req.Flags&wire.SubscribeRecords != 0
	caughtUp := req.Flags&wire.SubscribeCaughtUp != 0
	if req.Flags != 0 {
		r := *req
		r.Flags = 0
		req = &r
	}
	label := req.Durable
	if label == "" {
		label = "-"
	}
	ctx, cancel := context.WithCancel(parent)
	sub := &subscription{
		s: s, out: out, req: req, label: label, batch: batch, caughtUp: caughtUp, owner: owner,
		ctx: ctx, cancel: cancel,
		wake:    make(chan struct{}, 1),
		setUp:   make(chan struct{}),
		byTopic: make(map[string]*cursor),
		pending: make(map[string]uint64),
		started: time.Now(),
	}
	sub.w = wire.NewWriter(writerFunc(out.write))
	sub.encodeFn, sub.scanFn = sub.encode, sub.encodeScanned
	sub.vec.want = wire.VectorMap(req.Vector)
	return sub, nil
}

// serve registers the subscription with the node, runs it and ends it. Its goroutine is the
// run goroutine.
func (sub *subscription) serve() {
	s, n := sub.s, sub.s.n
	defer sub.cancel()
	if !s.track(sub) {
		sub.end(wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		return
	}
	defer s.untrack(sub)
	sub.series = n.metrics.sub.acquire(sub.req.Pattern, sub.label)
	defer sub.series.release()
	n.addSubscription(sub)
	defer n.removeSubscription(sub)
	n.metrics.subscriptions.Inc()
	defer n.metrics.subscriptions.Dec()
	// A subscriber's pattern (local, or relayed by another node of this region) is interest
	// that other regions' records should be mirrored here. Another region's replay is not:
	// it reads this region's log only. A topic another node owns is mirrored by that node,
	// which registers the interest of the upstream it serves.
	relayed := s.peer && sub.req.Region == n.cfg.Region
	if n.fed != nil && (!s.peer || relayed) && sub.owner == "" {
		n.fed.AddInterest(sub.req.Pattern)
		defer n.fed.RemoveInterest(sub.req.Pattern)
	}

	err := sub.run()
	switch {
	case sub.draining.Load():
		sub.end(wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
	case err != nil:
		sub.end(err)
	default:
		sub.end(nil)
	}
}

func (sub *subscription) drain() {
	sub.draining.Store(true)
	sub.cancel()
	// A write blocked on flow control must give up so the ERROR frame can be attempted.
	sub.out.setWriteDeadline(time.Now().Add(endWriteTimeout))
}

// end ends the subscription's part of the stream, first sending e if not nil. Run
// goroutine, last.
func (sub *subscription) end(e *wire.Error) {
	if e != nil && !sub.draining.Load() {
		sub.s.n.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(e.Code), 10)).Inc()
	}
	sub.out.stopReading() // stops the ack reader if it still runs
	sub.waitWrite()
	if sub.writeq != nil {
		close(sub.writeq) // the writer goroutine ends
	}
	if sub.beforeEnd != nil {
		sub.beforeEnd()
	}
	sub.out.finish(e)
	sub.markSetUp()
}

// markSetUp closes setUp once. Run goroutine.
func (sub *subscription) markSetUp() {
	if !sub.isSetUp {
		sub.isSetUp = true
		close(sub.setUp)
	}
}

// run sets the subscription up and streams records until the client ends it, the
// connection ends or the node drains. It returns an error to send, or nil.
func (sub *subscription) run() *wire.Error {
	n := sub.s.n
	if sub.caughtUp {
		sub.catchUp = make(map[*cursor]uint64)
		sub.upWait = make(map[string]bool)
	}
	sweep := sub.sweepable()
	sub.runs = sub.runs && sweep // a literal topic's runs are RECORDS frames, shared by the fanout
	if sweep {
		// A wildcard of this node's logs: no cursor per matching topic (sweep.go).
		stop, err := sub.setUpSweep()
		defer sub.releaseScans()
		defer stop()
		if err != nil {
			return err
		}
	} else {
		// Register interest before listing topics, so that no topic created in between is
		// missed (a topic seen twice is ignored the second time).
		if err := n.interest.Add(sub.req.Pattern, sub); err != nil {
			return &wire.Error{Code: wire.CodeInvalidTopic, Message: err.Error()}
		}
		defer n.interest.Remove(sub.req.Pattern, sub)
		defer func() {
			sub.releaseScans()
			for _, c := range sub.cursors {
				c.cancel()
			}
		}()
		if sub.req.Start == wire.StartLatest {
			sub.latest = make(map[string]uint64)
		}
	}
	var listed []wal.TopicInfo // a sweep listed them in setUpSweep
	switch {
	case sweep:
	case routing.IsLiteral(sub.req.Pattern):
		// One topic matches: its bounds, not a listing of every topic the node holds.
		if first, next, ok := n.wal.Bounds(sub.req.Pattern); ok {
			listed = []wal.TopicInfo{{Name: sub.req.Pattern, First: first, Next: next}}
		}
	default:
		listed = n.wal.Topics()
	}
	for _, t := range listed {
		if sub.owner == "" && routing.Match(sub.req.Pattern, t.Name) {
			if sub.req.Start == wire.StartLatest {
				sub.latest[t.Name] = t.Next
			}
			if err := sub.addTopic(t.Name, false); err != nil {
				return err
			}
			if sub.caughtUp {
				sub.catchUp[sub.byTopic[t.Name]] = t.Next
				sub.setupN++
			}
		}
	}
	var placeChanged <-chan struct{}
	if !sweep && sub.spansRegion() {
		sub.ups = make(map[string]*upstream)
		sub.upIndex = make(map[string]uint64)
		sub.upRetry = make(map[string]bool)
		sub.upCh = make(chan upMsg)
		defer sub.closeUpstreams()
		placeChanged = n.place.Changed()
		if err := sub.openUpstreams(); err != nil {
			return err
		}
		if sub.caughtUp {
			for node := range sub.ups {
				sub.upWait[node] = true
			}
		}
	}
	// SUBSCRIBED is written before the set-up counts as done, so that on a shared stream
	// the answers come in the order of the SUBSCRIBE frames.
	sub.w.Buffer(&wire.Subscribed{})
	if sub.flush() != nil || sub.waitWrite() != nil {
		return nil
	}
	sub.markSetUp()

	for {
		sent, err := sub.sendAvailable()
		if err == errStreamGone {
			return nil // the client is gone or reset the stream
		}
		if err == nil && sub.upCh != nil {
			var n int
			n, err = sub.takeUpstreams()
			sent += n
		}
		if e := sub.ackErr.Load(); e != nil {
			return e
		}
		if err != nil || sub.ctx.Err() != nil {
			return err
		}
		if sub.checkCaughtUp() {
			sent++
		}
		if sub.checkCommitted() {
			sent++
		}
		if sent > 0 {
			if err := sub.flush(); err != nil {
				return nil // the client is gone or reset the stream
			}
			continue
		}
		sub.releaseScans() // caught up: hold no iterator while idle
		// A simple caught-up subscription waits on its connection's fanout, which writes
		// the topic's new records to all of them (fanout.go).
		fan, werr := sub.park()
		if werr != nil {
			return nil // the client is gone or reset the stream
		}
		select {
		case <-sub.ctx.Done():
			sub.unpark(fan)
			return sub.ackErr.Load()
		case <-sub.wake:
			sub.unpark(fan) // the fanout handed it back, or something else happened
		case m := <-sub.upCh:
			if err := sub.takeUpstream(m); err != nil {
				return err
			}
			if _, err := sub.takeUpstreams(); err != nil {
				return err
			}
			sub.checkCaughtUp()
			if err := sub.flush(); err != nil {
				return nil
			}
		case <-placeChanged:
			// A node joined or returned: it may own matching topics from now on.
			placeChanged = n.place.Changed()
			if err := sub.ownerMoved(); err != nil {
				return err
			}
			sub.addUpstreams()
		}
		if err := sub.takeNewTopics(); err != nil {
			return err
		}
	}
}

// checkCaughtUp buffers CAUGHT_UP, once, when the client asked for it and every topic
// matching at set-up has been sent up to its head at set-up (this node's cursors, and each
// upstream's own CAUGHT_UP). It reports whether it buffered the frame. Run goroutine.
func (sub *subscription) checkCaughtUp() bool {
	if !sub.caughtUp || sub.caughtOK || sub.sweep.pending != nil {
		return false // with a sweep: not before every cursor of set-up is made
	}
	for c, head := range sub.catchUp {
		if c.next >= head {
			delete(sub.catchUp, c)
		}
	}
	if len(sub.catchUp) > 0 || len(sub.upWait) > 0 {
		return false
	}
	sub.caughtOK = true
	sub.w.Buffer(&wire.CaughtUp{Topics: sub.setupN + sub.upTopics})
	return true
}

// notifyNewTopic is called by the node's topic watcher for a new topic matching the
// pattern. It must not block.
func (sub *subscription) notifyNewTopic(topic string) {
	sub.mu.Lock()
	sub.mu.newTopics = append(sub.mu.newTopics, topic)
	sub.mu.Unlock()
	sub.poke()
}

// poke wakes the run goroutine, if it is not already due to wake. It never blocks.
func (sub *subscription) poke() {
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

func (sub *subscription) takeNewTopics() *wire.Error {
	if sub.sweep.on {
		return nil // the node's advances name new topics too (sweep.go)
	}
	sub.mu.Lock()
	topics := sub.mu.newTopics
	sub.mu.newTopics = nil
	sub.mu.Unlock()
	for _, t := range topics {
		if sub.owner != "" {
			break // served by the owner's upstream, whatever this node holds
		}
		if _, up := sub.upIndex[t]; up {
			continue // a replica created here of a topic an upstream serves already
		}
		if err := sub.addTopic(t, true); err != nil {
			return err
		}
	}
	return nil
}

// addTopic starts a cursor on topic, unless one exists. created says the topic appeared
// after the subscription began: it is read from its start whatever the start position.
func (sub *subscription) addTopic(topic string, created bool) *wire.Error {
	if _, ok := sub.byTopic[topic]; ok {
		return nil
	}
	n := sub.s.n
	c := &cursor{topic: topic, scan: n.wal.NewScanner(topic), tail: n.tails.acquire(topic)}
	_ = c.scan.Check() // bound to the topic as it is: a delete of it ends the cursor
	// Register for wake-ups before reading the bounds, so no append is missed: with the
	// shared tail, its (a connection's subscriptions woken one after the other).
	var stop func()
	if c.tail != nil {
		stop = c.tail.watch(sub.s, sub.wake)
	} else {
		stop = n.wal.Notify(topic, sub.wake)
	}
	c.cancel = func() {
		stop()
		n.tails.release(c.tail)
		c.tail = nil
	}
	next, stored, err := sub.startOffset(topic, created)
	if err != nil {
		c.cancel()
		return err
	}
	c.next, c.stored, c.skip = next, stored, sub.vec.skip(topic)
	sub.beginStored(topic, next, stored > 0) // vector.go
	sub.mu.Lock()
	c.pub = next
	sub.mu.curs = append(sub.mu.curs, c)
	sub.mu.Unlock()
	sub.byTopic[topic] = c
	sub.cursors = append(sub.cursors, c)
	return nil
}

// startOffset is where the cursor on topic starts, and 1 + the durable consumer's stored
// position there (0: none). An explicit offset past the topic's head (beyond the offset the
// next record gets) is refused with CodeOffsetOutOfRange naming the head, for a topic that
// exists at set-up; one below the first retained record is raised to it.
func (sub *subscription) startOffset(topic string, created bool) (uint64, uint64, *wire.Error) {
	n := sub.s.n
	if sub.req.Durable != "" && n.rep != nil && n.rep.isReplicated(topic) {
		// A new leader may not have applied all its term committed: read the durable's
		// positions (its own, those mirrored here) only once it has.
		if e := n.rep.positionBarrier(sub.ctx, sub.req.Durable, topic); e != nil { // replpos.go
			return 0, 0, e
		}
	}
	if next, ok, e := sub.vectorResume(topic); ok || e != nil { // vector.go
		return next, next, e
	}
	if sub.req.Durable != "" {
		// Resume, not Position + 1: a consumer reset to offset 0 has acknowledged nothing
		// there, yet resumes at 0 rather than at its start position.
		resume, ok, err := n.wal.Resume(sub.req.Durable, topic)
		if err != nil {
			return 0, 0, wire.Errorf(wire.CodeInternal, "read position of %q on %q: %v", sub.req.Durable, topic, err)
		}
		if ok {
			return resume, resume, nil
		}
	}
	first, next, _ := n.wal.Bounds(topic)
	if created {
		return first, 0, nil
	}
	switch sub.req.Start {
	case wire.StartLatest:
		if sub.sweep.on {
			return sub.head, 0, nil
		}
		if v, ok := sub.latest[topic]; ok {
			return v, 0, nil
		}
		return next, 0, nil
	case wire.StartOffset:
		if sub.req.StartValue > next {
			return 0, 0, wire.Errorf(wire.CodeOffsetOutOfRange, "start offset %d of topic %q is past its head: the next record gets offset %d (start at most there)",
				sub.req.StartValue, sub.s.actor.ClientName(topic), next)
		}
		return max(sub.req.StartValue, first), 0, nil
	case wire.StartTime:
		off, err := n.wal.OffsetForTime(topic, int64(sub.req.StartValue))
		if err != nil && !errors.Is(err, wal.ErrUnknownTopic) {
			return 0, 0, wire.Errorf(wire.CodeInternal, "find time %d in %q: %v", sub.req.StartValue, topic, err)
		}
		return max(off, first), 0, nil
	}
	return first, 0, nil
}

// errStreamGone is sendAvailable's report that a write to the stream failed: the client is
// gone or reset it, so the subscription ends with no ERROR frame to send.
var errStreamGone = &wire.Error{Code: wire.CodeInternal, Message: "subscription stream write failed"}

// sendAvailable reads each cursor's available records (at most ReadAhead bytes per cursor
// per round, so one busy topic cannot starve the others) and writes them to the stream.
// Writes block when the client's flow-control window is full: that is the backpressure. A
// failed write ends the round with errStreamGone.
func (sub *subscription) sendAvailable() (int, *wire.Error) {
	if sub.sweep.on {
		return sub.sendSwept() // sweep.go
	}
	n := sub.s.n
	sent := 0
	for _, c := range sub.cursors {
		got, bytes, err := sub.readCursor(c)
		if got > 0 {
			// Count the batch as delivered before it is written: the client may ACK a
			// record as soon as it arrives.
			sub.delivered(c)
			sent += got
			sub.series.records.Add(float64(got))
			sub.series.bytes.Add(float64(bytes))
			// Write this cursor's batch (at most ReadAhead bytes) before reading the next:
			// the read-ahead bounds what a subscription holds, whatever its lag.
			if sub.flush() != nil {
				return sent, errStreamGone
			}
		}
		// errors.AsType, not errors.As, here as everywhere in node: As's target escapes, an
		// allocation per read.
		oor, isOOR := errors.AsType[*wal.OffsetOutOfRangeError](err)
		switch {
		case err == nil:
		case isOOR:
			sub.skipDeleted(c, oor.First)
			sent++
		case errors.Is(err, wal.ErrUnknownTopic):
		case errors.Is(err, wal.ErrTopicDeleted):
			return sent, wire.Errorf(wire.CodeTopicDeleted, "topic %q was deleted (quicmq topics delete); subscribe again to read a topic created under its name", sub.s.actor.ClientName(c.topic))
		case errors.Is(err, wal.ErrClosed):
			return sent, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		default:
			n.log.Error("subscription read failed", "topic", c.topic, "offset", c.next, "err", err)
			return sent, wire.Errorf(wire.CodeInternal, "read %q at offset %d: %v", c.topic, c.next, err)
		}
	}
	return sent, nil
}

// maxReadRecords bounds the records of one read of a cursor, beside ReadAhead's bytes: 4096
// records of 100 B are 400-500 KiB stored, so for small records the bytes bound comes first.
const maxReadRecords = 4096

// readCursor encodes c's available records (at most ReadAhead bytes) into the stream's
// buffer, from the topic's shared tail when c is caught up (tail.go), else straight from the
// log's memory with c's own scanner, with no copy and no blocking while the log's iterator is
// open, and advances c. It returns the records and payload bytes encoded, and the log's
// error, if any, about the record after them.
func (sub *subscription) readCursor(c *cursor) (int, int, error) {
	n := sub.s.n
	sub.enc, sub.encBytes = c, 0 // for encode, during this read
	if c.tail != nil {
		if err := c.scan.Check(); err != nil {
			return 0, 0, err // deleted (a replicated topic's delete keeps its log and tail)
		}
		got, ok, err := c.tail.read(c.next, maxReadRecords, n.cfg.ReadAhead, sub.encodeFn)
		if ok || err != nil {
			return got, sub.encBytes, err
		}
	}
	sub.holding = true
	got, err := c.scan.ReadFunc(c.next, maxReadRecords, n.cfg.ReadAhead, sub.scanFn)
	return got, sub.encBytes, err
}

// encode buffers rec, the next record of the cursor readCursor reads (sub.enc), and advances
// the cursor. It is a method, bound once (encodeFn), so that a read allocates no closure.
func (sub *subscription) encode(rec *wal.Record) {
	c := sub.enc
	bind := ""
	if !c.bound {
		if sub.runs {
			bind = sub.bindIndex(c) // in the record's RUNS entry
		} else {
			sub.bind(c)
		}
	}
	if c.skip != nil && vector.Covered(c.skip, rec.OriginRegion, sub.s.n.cfg.Region, rec.OriginOffset) {
		if bind != "" {
			sub.bufferTopic(c, bind) // the topic is bound now: its later records carry no name
		}
		c.next = rec.Offset + 1 // the vector it resumed from covers it (vector.go)
		return
	}
	sub.rec = recordFrame(sub.out.index(c.index), rec, sub.s.n.cfg.Region) // one value, reused: encoded at once
	if sub.runs {
		sub.rec.Bind = bind
		sub.w.BufferRun(&sub.rec)
	} else if sub.batch {
		sub.w.BufferRecord(&sub.rec)
	} else {
		sub.w.Buffer(&sub.rec)
	}
	sub.encBytes += len(rec.Payload)
	c.next = rec.Offset + 1
}

// encodeScanned is encode for a wal.Scanner's ReadFunc.
func (sub *subscription) encodeScanned(rec *wal.Record) error {
	sub.encode(rec)
	return nil
}

// recordFrame is the RECORD a subscriber gets for rec of this node's log, under the stream's
// topic index. Records published here carry no origin region in the log: it is region.
func recordFrame(index uint64, rec *wal.Record, region string) wire.Record {
	origin := rec.OriginRegion
	if origin == "" {
		origin = region
	}
	return wire.Record{
		Index: index, Offset: rec.Offset, Time: rec.Time,
		OriginRegion: origin, OriginOffset: rec.OriginOffset,
		ProducerID: rec.ProducerID, Sequence: rec.Sequence,
		Headers: rec.Headers, Payload: rec.Payload,
	}
}

// skipDeleted buffers GAP for c's records from c.next to first, which retention or a purge
// deleted before the subscription reached them, and moves c past them. The gap counts as
// sent: an ACK inside it is right (protocol.md), so a durable whose remaining records were
// all deleted can store a position past them.
func (sub *subscription) skipDeleted(c *cursor, first uint64) {
	sub.bind(c)
	sub.w.Buffer(&wire.Gap{Index: sub.out.index(c.index), From: c.next, To: first})
	c.next = first
	sub.delivered(c)
}

// delivered records that everything of c before c.next was sent (or skipped by a GAP): an
// ACK up to it is right from now on, and the lag counts from it.
func (sub *subscription) delivered(c *cursor) {
	sub.mu.Lock()
	sub.mu.bound[c.index].delivered = c.next
	c.pub = c.next
	sub.mu.Unlock()
}

// bind buffers the TOPIC frame for c before its first record or gap. It never blocks.
func (sub *subscription) bind(c *cursor) {
	if c.bound {
		return
	}
	sub.bufferTopic(c, sub.bindIndex(c))
}

// bindIndex gives c the next topic number of the stream and returns the topic's name as the
// client sees it, for a TOPIC frame or the RUNS entry of its first record. c is not bound.
func (sub *subscription) bindIndex(c *cursor) string {
	sub.mu.Lock()
	c.index = uint64(len(sub.mu.bound))
	sub.mu.bound = append(sub.mu.bound, boundTopic{name: c.topic, delivered: c.next, floor: c.stored})
	sub.mu.Unlock()
	c.bound = true
	return sub.s.actor.ClientName(c.topic)
}

// bufferTopic buffers the TOPIC frame binding c's number to name.
func (sub *subscription) bufferTopic(c *cursor, name string) {
	sub.topicF = wire.Topic{Index: sub.out.index(c.index), Name: name}
	sub.w.Buffer(&sub.topicF)
}

// flush hands the buffered frames to the subscription's writer goroutine, which writes
// them, counting the time the write was blocked, and returns once the previous batch is
// written: the run goroutine reads and encodes the next batch from the log while QUIC packs
// this one, so a subscription holds at most two batches (2 x ReadAhead), whatever its lag.
// The error is that of the previous batch: a failed write is seen one flush later. end
// waits for the last batch and stops the writer.
func (sub *subscription) flush() error {
	if err := sub.waitWrite(); err != nil {
		return err
	}
	if sub.w.Buffered() == 0 {
		return nil
	}
	buf := sub.w.Swap(sub.spare)
	sub.spare = nil
	sub.handOver(buf)
	return nil
}

// handOver has the writer goroutine write buf, whole frames already counted as delivered:
// a batch flush took from the buffer, or the frames a fanout could not queue (unpark). The
// writer is idle.
func (sub *subscription) handOver(buf []byte) {
	if sub.writeq == nil {
		sub.writeq, sub.written = make(chan []byte), make(chan error, 1)
		go sub.writer()
	}
	sub.writing = true
	sub.writeq <- buf
}

// writer is the subscription's writer goroutine: one per subscription, for its life, so a
// live tail does not start a goroutine per batch.
func (sub *subscription) writer() {
	for buf := range sub.writeq {
		start := time.Now()
		err := sub.out.write(buf)
		if d := time.Since(start); d > 100*time.Microsecond {
			sub.series.blocked.Add(d.Seconds())
		}
		if cap(buf) <= 1<<20 {
			sub.spare = buf[:0] // read by the run goroutine only after it received from written
		}
		sub.written <- err
	}
}

// scanHold is how long waitWrite keeps the cursors' log iterators open while the writer is
// still busy: longer than writing one batch takes when the client keeps up, so a replay reads
// the log with one iterator from batch to batch (wal.Scanner), and short enough that a stalled
// subscriber pins nothing of the store.
const scanHold = 5 * time.Millisecond

// waitWrite waits until the batch flush handed over, if any, is written, and returns the
// write's error. A wait longer than scanHold releases the log iterators first.
func (sub *subscription) waitWrite() error {
	if !sub.writing {
		return nil
	}
	sub.writing = false
	if sub.holding {
		select {
		case err := <-sub.written:
			return err
		default:
		}
		if sub.hold == nil {
			sub.hold = time.NewTimer(scanHold)
		} else {
			sub.hold.Reset(scanHold) // stopped or fired: since Go 1.23 no stale tick is left
		}
		select {
		case err := <-sub.written:
			sub.hold.Stop()
			return err
		case <-sub.hold.C:
			sub.releaseScans()
		}
	}
	return <-sub.written
}

// releaseScans closes the log iterators the cursors' scanners hold.
func (sub *subscription) releaseScans() {
	if !sub.holding {
		return
	}
	if sub.sweep.sw != nil {
		sub.sweep.sw.Release()
	}
	for _, c := range sub.cursors {
		if c.scan != nil {
			c.scan.Release()
		}
	}
	sub.holding = false
}

// lag is the number of durable records in the subscription's topics not yet handed to the
// stream. Called by the metrics collector from any goroutine.
func (sub *subscription) lag() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	var lag uint64
	var ins [lagChunk]wal.Instance
	var heads [lagChunk]uint64
	var at [lagChunk]*cursor
	k := 0
	sum := func() {
		sub.s.n.wal.HeadsOf(ins[:k], heads[:k])
		for i, c := range at[:k] {
			if heads[i] > c.pub {
				lag += heads[i] - c.pub
			}
		}
		clear(ins[:k])
		k = 0
	}
	for _, c := range sub.mu.curs {
		if !c.inst.Valid() { // a cursor of its own (not a sweep's): by name
			if _, head, ok := sub.s.n.wal.Bounds(c.topic); ok && head > c.pub {
				lag += head - c.pub
			}
			continue
		}
		// A sweep's cursor (sweep.go) holds its topic's log: its head is read from it, many
		// under one hold of the log's lock, instead of a lookup and a lock per topic.
		ins[k], at[k] = c.inst, c
		if k++; k == lagChunk {
			sum()
		}
	}
	sum()
	return lag
}

// lagChunk is how many heads lag reads under one hold of the log's lock.
const lagChunk = 512

// readAcks is the ack goroutine of a subscription on its own stream: it reads ACK frames
// and hands them to takeAck, storing a durable consumer's positions whenever no further
// frame is buffered (ACKs that arrive together are stored together). It returns when the
// client closes or resets its side; after the client's FIN, every ACK read before it is
// stored when it returns, and only then does the subscription end and the node send FIN.
func (sub *subscription) readAcks(r *wire.Reader) *wire.Error {
	for {
		f, err := r.Read()
		switch {
		case errors.Is(err, wire.ErrFrameTooLarge):
			return &wire.Error{Code: wire.CodeTooLarge, Message: err.Error()} // as a first frame over the limit
		case errors.Is(err, wire.ErrMalformed), errors.Is(err, io.ErrUnexpectedEOF):
			return &wire.Error{Code: wire.CodeProtocol, Message: err.Error()}
		case err != nil:
			return sub.storeAcks() // FIN, reset, or the connection ended: the subscription is over
		}
		if c, ok := f.(*wire.Commit); ok {
			if e := sub.commit(c); e != nil { // commit.go
				return e
			}
			continue
		}
		ack, ok := f.(*wire.Ack)
		if !ok {
			return wire.Errorf(wire.CodeProtocol, "unexpected %s on a subscription stream: only ACK and COMMIT may follow SUBSCRIBE", f.Type())
		}
		if e := sub.takeAck(ack.Index, ack.Index, ack.Offset); e != nil {
			return e
		}
		if !r.FrameBuffered() {
			if e := sub.storeAcks(); e != nil {
				return e
			}
		}
	}
}

// takeAck checks the client's ACK of the subscription's topic number n (wireIndex on the
// wire) at offset against what was sent: the topic must be bound on the stream and the
// record delivered on it, else the ACK is wrong and ends the subscription with
// CodeInvalidArgument. A durable consumer's position only moves forward: an ACK at or below
// the highest one stored (or staged) is accepted and ignored. An ACK of a topic another node
// serves is forwarded to it. Ack reader.
func (sub *subscription) takeAck(n, wireIndex, offset uint64) *wire.Error {
	sub.mu.Lock()
	if n >= uint64(len(sub.mu.bound)) || offset >= sub.mu.bound[n].delivered {
		sub.mu.Unlock()
		return wire.Errorf(wire.CodeInvalidArgument, "ACK of topic index %d offset %d: no such record was delivered on this stream", wireIndex, offset)
	}
	bt := &sub.mu.bound[n]
	staged := false
	if bt.up == nil && sub.req.Durable != "" && offset+1 > bt.floor {
		bt.floor = offset + 1
		staged = true
	}
	cur := *bt
	sub.mu.Unlock()
	sub.series.acks.Inc()
	switch {
	case cur.up != nil:
		// The owner checks it again and stores a durable consumer's position.
		sub.forwardAck(n, cur, offset)
	case staged:
		sub.pending[cur.name] = offset
	}
	return nil
}

// storeAcks stores (synced) the durable positions takeAck staged. A position read from the
// client is stored even when the connection has ended meanwhile. The positions of this
// node's log go to it all at once, so they share its synced batches: a wildcard that
// acknowledges records of many topics at once waits for one fsync, not one per topic. Ack
// reader.
func (sub *subscription) storeAcks() *wire.Error {
	n := sub.s.n
	type stored struct {
		topic string
		err   error
	}
	var done chan stored
	waiting := 0
	for t, off := range sub.pending {
		if n.rep != nil && n.rep.isReplicated(t) {
			if e := n.rep.setPosition(context.WithoutCancel(sub.ctx), sub.req.Durable, t, off, sub.ackedVector(t, off)); e != nil {
				return e
			}
			delete(sub.pending, t)
			continue
		}
		if done == nil {
			done = make(chan stored, len(sub.pending))
		}
		p := wal.Position{Name: sub.req.Durable, Topic: t, Value: off, Vector: sub.ackedVector(t, off)} // vector.go
		waiting++
		n.wal.AppendAsync(wal.AppendRequest{Position: &p}, func(res wal.AppendResult) { done <- stored{t, res.Err} })
	}
	var failed *wire.Error
	for range waiting {
		r := <-done
		switch {
		case r.err == nil:
			delete(sub.pending, r.topic)
		case failed != nil:
		case errors.Is(r.err, wal.ErrClosed):
			failed = wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		default:
			failed = wire.Errorf(wire.CodeInternal, "store position of %q on %q: %v", sub.req.Durable, r.topic, r.err)
		}
	}
	return failed
}
