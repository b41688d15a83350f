package subscriptions

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"

	"github.com/quicmq/quicmq/node/tail"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Subscription is the subscription core: a cursor per matching topic over the durable log,
// plus a bounded read-ahead (Config.ReadAhead), the frames it sends, the checks of the ACKs
// it gets and a durable consumer's positions. How its frames reach the client is its
// stream mapping, out (Stream): a stream of its own, or its part of a shared stream
// (the ablation, node/sharedstream); nothing else differs between the two.
//
// Goroutines, and who owns what, in the types:
//   - the run goroutine owns a subRun (the cursors, the frame buffer, the upstreams, the
//     sweep), made by Serve and reached by no other goroutine but a fanout while the
//     subscription is parked on it (park.go);
//   - every other goroutine that tells the run goroutine something (the topic watcher, the
//     log's completer, the ack reader's COMMIT and errors, the node ending it) writes only
//     to its inbox (inbox.go), which the run goroutine alone takes from;
//   - the ack reader (its own stream's, or a shared stream's reader) owns pending and the
//     acknowledged vectors (vec), and checks ACKs against mu;
//   - mu is the one piece with several writers: what was delivered per topic number (the
//     run goroutine, or the fanout while parked), the durable's floor and the ACKs waiting
//     for an upstream (the ack reader), read by the lag metric's collector too. An ACK must
//     be checked against what was delivered before it is stored, on the ack reader, without
//     waiting for a run goroutine blocked on flow control: so it stays a small struct under
//     its mutex rather than a message;
//   - the rest is fixed before Serve starts, or atomic (draining).
//
// The writer goroutine (Writer) is handed each batch and gives its buffer back. When the
// client reads slowly, QUIC flow control blocks the writer, then the run goroutine, and
// nothing else: no queue grows, no other stream waits (invariants I4, I5).
type Subscription struct {
	h     *Host
	conn  tail.Conn       // the session's connection (tail.Conn groups wake-ups and fanouts)
	actor *auth.Principal // the session's principal: names shown without its namespace
	peer  bool            // the connection is another node's
	out   Stream
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
	setUp    chan struct{} // closed once SUBSCRIBED is written, or the subscription failed first
	started  time.Time
	// beforeEnd, if set, runs in end before the node's last frame and FIN (run goroutine).
	beforeEnd func()

	in       inbox       // what the other goroutines tell the run goroutine, and its wake-up
	draining atomic.Bool // the node drains: the stream ends with CodeShuttingDown
	vec      vectorState // vector positions: asked for, and a durable's acknowledged (vector.go)

	// Owned by the ack reader.
	pending map[string]uint64 // durable positions read, not yet stored

	mu struct {
		sync.Mutex
		bound []boundTopic // by topic number: for validating ACKs
		curs  []*cursor    // every cursor, for the lag metric (cursor.pub)
	}
}

// subRun is a subscription's state owned by its run goroutine. serve makes the one value and
// hands it to run; no other goroutine holds it, except a fanout while the subscription is
// parked on it (park.go: park hands the cursor and the stream's writes over, unpark takes
// them back; meanwhile the fanout calls subRun's tail.Member methods), so only subRun's
// methods, called on the run goroutine or a parked subscription's fanout, touch these fields.
// What other goroutines share is the embedded subscription: immutable after set-up,
// atomic, or under its mu.
type subRun struct {
	*Subscription

	cursors   []*cursor
	byTopic   map[string]*cursor
	w         *wire.Writer
	rec       wire.Record             // the frame being written, reused
	topicF    wire.Topic              // the TOPIC frame bind writes, reused: none allocated per topic
	enc       *cursor                 // the cursor readCursor reads, for encode
	encBytes  int                     // payload bytes encode buffered in this read
	encodeFn  func(*wal.Record)       // sub.encode, bound once
	scanFn    func(*wal.Record) error // sub.encodeScanned, bound once
	latest    map[string]uint64       // for start=latest: each topic's head when the subscription began
	ups       map[string]*upstream    // by node: this region's other owners (upstream.go)
	upIndex   map[string]uint64       // upstream topic name -> its number on the subscription
	upRetry   map[string]bool         // nodes whose upstream failed and has not been opened again
	upCh      chan upMsg              // upstream frames, handed over one at a time
	upWG      sync.WaitGroup          // upstream readers
	wr        *Writer                 // the writer goroutine and the batches handed to it
	holding   bool                    // a cursor's scanner may hold a log iterator (releaseScans)
	isSetUp   bool                    // setUp is closed
	catchUp   map[*cursor]uint64      // with caughtUp: cursors not yet at their head at set-up
	upWait    map[string]bool         // with caughtUp: upstream nodes whose CAUGHT_UP has not come
	upTopics  uint64                  // with caughtUp: topics the upstreams' CAUGHT_UP frames counted
	setupN    uint64                  // topics of this node's log matching at set-up
	caughtOK  bool                    // CAUGHT_UP buffered
	sweep     sweepState              // a wildcard's reading by sweep (sweep.go)
	head      uint64                  // with sweep, at set-up: the head of the topic startOffset is asked about
	committed uint64                  // the highest COMMITTED buffered (commit.go)
}

type cursor struct {
	topic  string
	index  uint64 // the topic's number on the subscription (the wire index is out.index of it)
	next   uint64
	pub    uint64       // next as the lag metric sees it (the subscription's mu.curs), under mu
	stored uint64       // 1 + the durable consumer's stored position at the start; 0: none
	cancel func()       // stops the log's notifications
	scan   *wal.Scanner // keeps the log's iterator between reads while the cursor catches up
	tail   *tail.Topic  // the topic's shared tail, nil when tails are off (node/tail)

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

// Params are what a subscription takes from the session that serves its stream.
type Params struct {
	Conn   tail.Conn       // the connection: its subscriptions' wake-ups and fanouts are grouped by it
	Actor  *auth.Principal // who subscribes: its tenant's names are shown to it without the namespace
	Peer   bool            // the connection is another node's (a relayed subscription or a replay)
	Parent context.Context // the subscription's context is a child of it
	Req    *wire.Subscribe // authorized (node's authorizeSubscribe: the tenant's namespace added)
	Out    Stream          // where its frames go
	// Runs: the stream may carry RUNS frames (wire.RunsVersion, a stream of its own, no peer);
	// a wildcard read by sweep then uses them when the client asked for RECORDS.
	Runs bool
}

// New makes a subscription for p on the node h, its context a child of p.Parent. It
// resolves the owner of a literal topic another node of the region serves.
func New(h *Host, p Params) (*Subscription, *wire.Error) {
	n, req := h, p.Req
	// A subscription relayed by another node of this region is served from this node's log
	// alone; a client's subscription to a topic another node owns is served from an upstream
	// to that node (upstream.go), which resumes where it was when the owner fails or restarts.
	owner := ""
	if !p.Peer && routing.IsLiteral(req.Pattern) {
		// Replicated: any replica serves reads, a durable consumer the leader. Single copy:
		// the owner.
		o, e := n.topics.Owner(p.Parent, req.Pattern, req.Durable != "")
		if e != nil {
			return nil, e
		}
		if o != "" {
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
	ctx, cancel := context.WithCancel(p.Parent)
	sub := &Subscription{
		h: h, conn: p.Conn, actor: p.Actor, peer: p.Peer,
		out: p.Out, req: req, label: label, batch: batch, runs: batch && p.Runs, caughtUp: caughtUp, owner: owner,
		ctx: ctx, cancel: cancel,
		setUp:   make(chan struct{}),
		pending: make(map[string]uint64),
		started: time.Now(),
	}
	sub.in.init()
	sub.vec.want = wire.VectorMap(req.Vector)
	return sub, nil
}

// newRun makes the run goroutine's state of sub (serve, and tests).
func newRun(sub *Subscription) *subRun {
	r := &subRun{Subscription: sub, byTopic: make(map[string]*cursor)}
	r.w = wire.NewWriter(WriterFunc(sub.out.Write))
	r.wr = NewWriter(sub.out)
	r.encodeFn, r.scanFn = r.encode, r.encodeScanned
	return r
}

// Serve registers the subscription with the node, runs it and ends it: its stream gets the
// error that ended it, or FIN. The calling goroutine is the run goroutine: the subRun Serve
// makes is reached from it alone (and from a fanout while the subscription is parked).
func (sub *Subscription) Serve() { newRun(sub).serve() }

// Refuse ends a subscription that will not be served (its session is draining) with e.
func (sub *Subscription) Refuse(e *wire.Error) {
	defer sub.cancel()
	newRun(sub).end(e)
}

func (sub *subRun) serve() {
	n := sub.h
	defer sub.cancel()
	sub.series = n.metrics.sub.acquire(sub.req.Pattern, sub.label)
	sub.wr.CountBlocked(sub.series.blocked)
	defer sub.series.release()
	n.add(sub.Subscription)
	defer n.Remove(sub.Subscription)
	n.metrics.subscriptions.Inc()
	defer n.metrics.subscriptions.Dec()
	// A subscriber's pattern (local, or relayed by another node of this region) is interest
	// that other regions' records should be mirrored here. Another region's replay is not:
	// it reads this region's log only. A topic another node owns is mirrored by that node,
	// which registers the interest of the upstream it serves.
	relayed := sub.peer && sub.req.Region == n.cfg.Region
	if n.fed != nil && (!sub.peer || relayed) && sub.owner == "" {
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

// Drain ends the subscription because the node drains: its stream gets CodeShuttingDown.
// Any goroutine.
func (sub *Subscription) Drain() {
	sub.draining.Store(true)
	sub.cancel()
	// A write blocked on flow control must give up so the ERROR frame can be attempted.
	sub.out.SetWriteDeadline(time.Now().Add(endWriteTimeout))
}

// endWriteTimeout bounds the write of a stream's last frames (its ERROR) to a client that
// does not read (EndWriteTimeout).
const endWriteTimeout = EndWriteTimeout

// end ends the subscription's part of the stream, first sending e if not nil. Run
// goroutine, last.
func (sub *subRun) end(e *wire.Error) {
	if e != nil && !sub.draining.Load() {
		sub.h.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(e.Code), 10)).Inc()
	}
	sub.out.StopReading() // stops the ack reader if it still runs
	sub.wr.Close(sub.holding, sub.releaseScans)
	if sub.beforeEnd != nil {
		sub.beforeEnd()
	}
	sub.out.Finish(e)
	sub.markSetUp()
}

// markSetUp closes setUp once. Run goroutine.
func (sub *subRun) markSetUp() {
	if !sub.isSetUp {
		sub.isSetUp = true
		close(sub.setUp)
	}
}

// run sets the subscription up and streams records until the client ends it, the
// connection ends or the node drains. It returns an error to send, or nil.
func (sub *subRun) run() *wire.Error {
	placeChanged, undo, err := sub.prepare()
	defer undo()
	if err != nil {
		return err
	}
	// SUBSCRIBED is written before the set-up counts as done, so that on a shared stream
	// the answers come in the order of the SUBSCRIBE frames.
	sub.w.Buffer(&wire.Subscribed{})
	if sub.flush() != nil || sub.waitWrite() != nil {
		return nil
	}
	sub.markSetUp()
	return sub.stream(placeChanged)
}

// prepare registers the subscription (a sweep of this node's logs, or interest in new
// topics), adds the topics that match now and, for one that spans the region, opens its
// upstreams. placeChanged is closed at the next placement change when the subscription
// follows them. undo undoes the set-up, last step first; it is set even with an error.
func (sub *subRun) prepare() (placeChanged <-chan struct{}, undo func(), err *wire.Error) {
	n := sub.h
	var steps []func()
	undo = func() {
		for i := len(steps) - 1; i >= 0; i-- {
			steps[i]()
		}
	}
	if sub.caughtUp {
		sub.catchUp = make(map[*cursor]uint64)
		sub.upWait = make(map[string]bool)
	}
	sweep := sub.sweepable()
	sub.runs = sub.runs && sweep // a literal topic's runs are RECORDS frames, shared by the fanout
	if sweep {
		// A wildcard of this node's logs: no cursor per matching topic (sweep.go).
		stop, err := sub.setUpSweep()
		steps = append(steps, sub.releaseScans, stop)
		if err != nil {
			return nil, undo, err
		}
	} else {
		// Register interest before listing topics, so that no topic created in between is
		// missed (a topic seen twice is ignored the second time).
		if err := n.interest.Add(sub.req.Pattern, sub.Subscription); err != nil {
			return nil, undo, &wire.Error{Code: wire.CodeInvalidTopic, Message: err.Error()}
		}
		steps = append(steps, func() { n.interest.Remove(sub.req.Pattern, sub.Subscription) }, func() {
			sub.releaseScans()
			for _, c := range sub.cursors {
				c.cancel()
			}
		})
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
				return nil, undo, err
			}
			if sub.caughtUp {
				sub.catchUp[sub.byTopic[t.Name]] = t.Next
				sub.setupN++
			}
		}
	}
	if !sweep && sub.spansRegion() {
		sub.ups = make(map[string]*upstream)
		sub.upIndex = make(map[string]uint64)
		sub.upRetry = make(map[string]bool)
		sub.upCh = make(chan upMsg)
		steps = append(steps, sub.closeUpstreams)
		placeChanged = n.place.Changed()
		if err := sub.openUpstreams(); err != nil {
			return nil, undo, err
		}
		if sub.caughtUp {
			for node := range sub.ups {
				sub.upWait[node] = true
			}
		}
	}
	return placeChanged, undo, nil
}

// stream sends what the subscription's cursors and upstreams have, then waits for more,
// until the subscription ends. It returns an error to send, or nil.
func (sub *subRun) stream(placeChanged <-chan struct{}) *wire.Error {
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
		if e := sub.in.err.Load(); e != nil {
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
		// the topic's new records to all of them (park.go, node/tail).
		fan, werr := sub.park()
		if werr != nil {
			return nil // the client is gone or reset the stream
		}
		select {
		case <-sub.ctx.Done():
			sub.unpark(fan)
			return sub.in.err.Load()
		case <-sub.in.wake:
			sub.unpark(fan) // the fanout handed it back, or something else happened
		case m := <-sub.upCh:
			if gone, err := sub.takeUpstreamsNow(m); gone || err != nil {
				return err
			}
		case <-placeChanged:
			// A node joined or returned: it may own matching topics from now on.
			placeChanged = sub.h.place.Changed()
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

// takeUpstreamsNow takes m and whatever else the upstreams have sent, and writes it. gone
// is true when the client is gone or reset the stream.
func (sub *subRun) takeUpstreamsNow(m upMsg) (gone bool, err *wire.Error) {
	if err := sub.takeUpstream(m); err != nil {
		return false, err
	}
	if _, err := sub.takeUpstreams(); err != nil {
		return false, err
	}
	sub.checkCaughtUp()
	return sub.flush() != nil, nil
}
