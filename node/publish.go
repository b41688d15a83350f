package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Batching bounds for one append request built from consecutive publishes to one topic.
const (
	maxBatchRecords = 512
	maxBatchBytes   = 4 << 20
)

// publisher serves one publish stream. Its run goroutine reads frames and submits appends;
// its writer goroutine sends the answers in the order the publishes were read, or, on a
// stream opened with PUBLISH_OPEN's any-order flag, as each batch completes. Between them
// is a FIFO of pending batches (mu) and a window of unanswered publishes: when the window is
// full the reader stops reading, and QUIC flow control stops the client.
type publisher struct {
	s      *session
	str    *quic.Stream
	r      *wire.Reader
	window chan struct{} // one token per unanswered publish
	wake   chan struct{} // a batch completed, or reading ended

	draining atomic.Bool
	// anyOrder: the stream began with PUBLISH_OPEN's any-order flag, so its sender matches
	// answers by seq, and each batch is answered once it completes, not after every batch
	// read before it: one group's stall (a leadership hand-off) holds back only its own
	// topics' answers. Set before run.
	anyOrder bool
	// ranges is set once the stream carried a PUBLISH_BATCH: its client then understands
	// PUBLISH_ACKS, and the writer answers runs of successes with one.
	ranges atomic.Bool

	mu struct {
		sync.Mutex
		queue    []*pendingBatch
		readDone bool
		read     uint64 // batches enqueued (pendingBatch.order)
	}

	batch  *pendingBatch           // being built by the reader; not yet submitted
	relays map[string]*relayStream // by owner node: under dispatchMu
	// unflushed: relays with frames buffered, under dispatchMu (flushRelays).
	unflushed []*relayStream
	relayWG   sync.WaitGroup // relay answer readers

	// inbox: the topics this stream parked until their placement (publishpark.go), and
	// parkWG its releaser goroutine.
	inbox struct {
		sync.Mutex
		parkInbox
	}
	parkWG sync.WaitGroup

	// dispatchMu serializes handing batches to the log or a relay: the reader goroutine
	// and the placement awaiter (awaitPlacement) both do.
	dispatchMu sync.Mutex
	// awaiting are the batches of topics the region had not placed when they were read, in
	// read order, waiting for their placements (replicated regions): the reader never
	// waits for one, so that a client creating many topics gets them placed together.
	// A batch a moving leadership refused before raft appended it (reroute) queues here
	// too, ahead of its topic's later batches (publishorder.go).
	awaiting struct {
		sync.Mutex
		q       map[string][]*pendingBatch // per topic, in read order
		topics  map[string]int             // batches queued per topic: a later batch of one queues too
		workers map[string]bool            // topics with an awaiter goroutine
		// out: per topic, the batches dispatched and not answered, and where they went.
		out map[string]*inFlight
		// settled: per topic with batches queued, the latest read order of its batches
		// answered meanwhile (waitTurn).
		settled map[string]uint64
		cond    sync.Cond // on the mutex: an awaiter ended, or an out count fell
	}
}

// pendingBatch is one append request (or one refused publish) waiting for its answer.
type pendingBatch struct {
	topic   string
	seqs    []uint64
	records []wal.Record
	bytes   int // payload bytes of records
	stored  int // payload bytes of the records appended (not duplicates nor refused), once done
	read    time.Time
	err     *wire.Error // refused before or by the append
	res     wal.AppendResult
	done    bool

	await bool // submitted through awaitPlacement: its topic was not placed when it was read
	// predicted: relayed before this node read its topic's placement, to the leader of the
	// group it will most likely name (replpredict.go); a placement that names another group
	// is no leader move (relayStream.watchLeader).
	predicted bool
	// A batch relayed to the topic's owner is answered record by record.
	relayTo  string              // the owner node, or "" for this node's log
	outcomes []wal.RecordOutcome // per record, from the owner's acks (offset, time, duplicate)
	errs     []*wire.Error       // per record, from the owner's refusals
	got      []bool              // per record, the owner answered it (in any order: relay.go)
	answered int                 // records the owner answered
	relaySeq uint64              // the seq of its first record on the relay stream
	// relayWatch: the relay's check that its owner answers (relayStream.watch), set and
	// cancelled under the relay's mu.
	relayWatch *watch
	// unknown marks the errs of records the owner did not answer (not got) as outcomes the
	// relay cannot tell (the owner went away after the records were sent): they end the
	// client's stream instead of being refused.
	unknown bool
	order   uint64 // read order on the stream (enqueue)
	// A batch refused by a leadership move before raft appended it is routed again to the
	// new leader until rerouteUntil (reroute); back lets it go back to the node that
	// relayed it here (replicated.route). inFlight: counted in awaiting.out.
	inFlight     bool
	moveErr      *wire.Error // what refused it (reroute)
	rerouteUntil time.Time
	reroutes     int
	back         bool

	// one holds a one-record batch's seq and record (add) and its owner's answer (relay)
	// in the batch itself: a client publishing over many topics makes a batch of each
	// publish, and these five small allocations each were a fifth of what a batch cost the
	// nodes it crossed (issue 29). A batch that grows past one record moves its seqs and
	// records out.
	one struct {
		seq     [1]uint64
		record  [1]wal.Record
		outcome [1]wal.RecordOutcome
		err     [1]*wire.Error
		got     [1]bool
	}
}

// dropRecords lets go of b's records (their payloads), which nothing reads again.
func (b *pendingBatch) dropRecords() {
	b.records = nil
	b.one.record[0] = wal.Record{}
}

func newPublisher(s *session, str *quic.Stream, r *wire.Reader) *publisher {
	return &publisher{
		s:      s,
		str:    str,
		r:      r,
		window: make(chan struct{}, s.n.cfg.MaxPendingPublishes),
		wake:   make(chan struct{}, 1),
	}
}

func (p *publisher) drain() {
	p.draining.Store(true)
	p.str.CancelRead(wire.AppShutdown) // unblocks the reader; pending publishes still get answers
}

// run reads publishes (first is the stream's first frame, PUBLISH or PUBLISH_BATCH) until
// the stream ends, then waits for every answer to be written.
func (p *publisher) run(first wire.Frame) {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		p.writeAnswers()
	}()

	// A topic parked until its placement is given up when the session ends, as the
	// awaiter's wait for it would be (publishpark.go).
	stopParks := context.AfterFunc(p.s.ctx, func() {
		p.cancelParks(wire.Errorf(wire.CodeUnavailable, "the session ended before the topic was placed: nothing was appended"))
	})
	defer stopParks()

	streamErr := p.readLoop(first)

	p.submit()
	p.flushRelays()
	p.waitAwaiter() // every batch read is dispatched
	p.mu.Lock()
	p.mu.readDone = true
	p.mu.Unlock()
	p.signal()
	<-writerDone
	// Every batch is answered, so none is rerouted now: no relay opens after this.
	p.waitAwaiter()
	p.parkWG.Wait() // its releaser: every topic it held is answered (waitAwaiter)
	for _, rs := range p.relays {
		rs.str.Close() // the owner has answered everything; it ends its side
	}
	p.relayWG.Wait()

	if streamErr != nil {
		p.s.failStream(p.str, streamErr)
		return
	}
	p.str.Close()
}

// addRun adds the publishes of a PUBLISH_BATCH or a PUBLISH_MULTI, each when a place among
// the unanswered is free; from then on the stream's answers go by seq range. It reports false
// when the stream ended while waiting for a place.
func (p *publisher) addRun(ps []wire.Publish) bool {
	p.ranges.Store(true)
	for i := range ps {
		if !p.acquire() {
			return false
		}
		p.add(&ps[i])
	}
	return true
}

// readLoop reads and batches publishes. It returns a protocol error to send, or nil when the
// stream ended (FIN, reset, drain or connection loss).
func (p *publisher) readLoop(f wire.Frame) *wire.Error {
	for {
		switch f := f.(type) {
		case *wire.Publish:
			if !p.acquire() {
				return nil
			}
			p.add(f)
		case *wire.PublishBatch:
			if !p.addRun(f.Publishes) {
				return nil
			}
		case *wire.PublishMulti:
			if !p.s.peer && p.s.version < wire.MultiVersion {
				return wire.Errorf(wire.CodeProtocol, "PUBLISH_MULTI is a frame of protocol version %d; this connection speaks %d", wire.MultiVersion, p.s.version)
			}
			// Each run goes on as a PUBLISH_BATCH of its topic would: add starts a new batch
			// at each change of topic, and refuses a run's publishes one by one.
			if !p.addRun(f.Publishes) {
				return nil
			}
		default:
			return wire.Errorf(wire.CodeProtocol, "a publish stream carries only PUBLISH, PUBLISH_BATCH and PUBLISH_MULTI frames, got %s", f.Type())
		}
		// Keep building the batch while frames are already buffered; submit before blocking.
		if !p.r.FrameBuffered() {
			p.submit()
			p.flushRelays()
		}
		var err error
		f, err = p.r.Read()
		if err != nil {
			return p.readError(err)
		}
	}
}

func (p *publisher) readError(err error) *wire.Error {
	var se *quic.StreamError
	switch {
	case errors.Is(err, io.EOF), p.draining.Load(), p.s.ctx.Err() != nil, errors.As(err, &se):
		return nil
	case errors.Is(err, wire.ErrFrameTooLarge):
		return &wire.Error{Code: wire.CodeTooLarge, Message: err.Error()}
	case errors.Is(err, wire.ErrMalformed), errors.Is(err, io.ErrUnexpectedEOF):
		return &wire.Error{Code: wire.CodeProtocol, Message: err.Error()}
	}
	return nil // the connection is gone
}

// acquire takes a window slot, submitting the batch under construction before it waits
// (its answers are what frees slots).
func (p *publisher) acquire() bool {
	select {
	case p.window <- struct{}{}:
		return true
	default:
	}
	p.submit()
	p.flushRelays()
	select {
	case p.window <- struct{}{}:
		return true
	case <-p.s.ctx.Done():
		return false
	}
}

// add validates one publish and appends it to the batch under construction, or queues its
// refusal in order.
func (p *publisher) add(pub *wire.Publish) {
	e := pub.Refused // over a per-publish limit the decoder checks (wire.Limits)
	if e == nil {
		e = p.s.actor.CheckTopic(pub.Topic, false)
	}
	if e == nil {
		e = p.s.actor.MayPublish(pub.Topic)
	}
	if e == nil {
		pub.Topic = p.s.actor.Topic(pub.Topic)
		e = p.s.n.checkPublish(pub)
	}
	if e != nil {
		p.submit()
		p.enqueue(&pendingBatch{seqs: []uint64{pub.Seq}, err: e, done: true, read: time.Now()})
		return
	}
	if b := p.batch; b != nil && (b.topic != pub.Topic || len(b.seqs) >= maxBatchRecords || b.bytes >= maxBatchBytes) {
		p.submit()
	}
	if p.batch == nil && p.mustAwait(pub.Topic) {
		p.batch = &pendingBatch{topic: pub.Topic, read: time.Now(), await: true}
	}
	if p.batch == nil {
		owner, e := p.route(pub.Topic)
		switch {
		case e != nil && owner != "" && p.s.peer:
			// Relayed here by the node this one takes for the leader (replicated.route): the
			// leadership just moved, to the sender or from it; routed again off the reader.
			p.batch = &pendingBatch{topic: pub.Topic, read: time.Now(), await: true, back: true,
				rerouteUntil: time.Now().Add(p.s.n.cfg.Raft.QuorumTimeout)}
		case e != nil:
			p.enqueue(&pendingBatch{seqs: []uint64{pub.Seq}, err: e, done: true, read: time.Now()})
			return
		default:
			p.batch = &pendingBatch{topic: pub.Topic, read: time.Now(), relayTo: owner}
		}
	}
	b := p.batch
	if b.seqs == nil {
		b.seqs, b.records = b.one.seq[:0], b.one.record[:0]
	}
	b.seqs = append(b.seqs, pub.Seq)
	b.bytes += len(pub.Payload)
	b.records = append(b.records, wal.Record{
		ProducerID: pub.ProducerID,
		Sequence:   pub.Sequence,
		Headers:    pub.Headers,
		Payload:    pub.Payload,
	})
}

// checkPublish refuses what must not be appended, naming the limit and the value: the topic
// grammar and the node's MaxPayload and MaxHeaderBytes. (The decoder refuses what is over
// the wire limits: header count and key, producer id, topic length; see pub.Refused.)
func (n *Node) checkPublish(pub *wire.Publish) *wire.Error {
	if err := routing.ValidateTopic(pub.Topic); err != nil {
		return &wire.Error{Code: wire.CodeInvalidTopic, Message: auth.SubjectMessage(err)}
	}
	if len(pub.Payload) > n.cfg.MaxPayload {
		return wire.Errorf(wire.CodeTooLarge, "payload of %d bytes is over the limit of %d bytes", len(pub.Payload), n.cfg.MaxPayload)
	}
	hb := 0
	for _, h := range pub.Headers {
		hb += len(h.Key) + len(h.Value)
	}
	if hb > n.cfg.MaxHeaderBytes {
		return wire.Errorf(wire.CodeTooLarge, "headers of %d bytes (keys and values) are over the limit of %d bytes", hb, n.cfg.MaxHeaderBytes)
	}
	return nil
}

// submit hands the batch under construction to the log (or, its topic not placed yet, to
// awaitPlacement). The log calls back from its
// committer after the synced commit; the callback only records the result and wakes the
// writer.
func (p *publisher) submit() {
	b := p.batch
	if b == nil {
		return
	}
	p.batch = nil
	p.enqueue(b)
	if b.await || !p.takeTurn(b) {
		p.awaitPlacement(b) // behind its topic's batches waiting (a placement, a reroute)
		return
	}
	p.dispatchMu.Lock()
	defer p.dispatchMu.Unlock()
	p.dispatch(b)
}

// dispatch hands b, queued for answering, to its topic's log or to its owner (dispatchMu
// held).
func (p *publisher) dispatch(b *pendingBatch) {
	if b.relayTo != "" {
		p.relay(b)
		return
	}
	done := func(res wal.AppendResult) {
		stored := 0
		if res.Err == nil {
			stored = b.bytes
			for _, sk := range res.Skipped {
				stored -= len(b.records[sk.Index].Payload)
			}
		}
		var re *replicatedError
		unknown := errors.As(res.Err, &re) && re.unknown // replicated.go: the entry may commit
		var moved *wire.Error
		if re != nil && re.moved {
			moved = re.e
		}
		if p.attemptEnded(b, moved) {
			return // rerouted
		}
		p.mu.Lock()
		b.res, b.done, b.stored = res, true, stored
		b.unknown = b.unknown || unknown
		b.dropRecords() // the payloads are on disk; do not hold them until the ack is written
		p.mu.Unlock()
		p.signal()
	}
	if hold := p.s.n.cfg.holdAppend; hold != nil {
		answer := done
		done = func(res wal.AppendResult) {
			if ch := hold(b.topic); ch != nil {
				go func() { <-ch; answer(res) }()
				return
			}
			answer(res)
		}
	}
	if r := p.s.n.rep; r != nil {
		r.propose(b.topic, b.records, done) // replicated.go: through the topic's raft group
		return
	}
	p.s.n.wal.AppendAsync(wal.AppendRequest{Topic: b.topic, Records: b.records}, done)
}

func (p *publisher) enqueue(b *pendingBatch) {
	p.mu.Lock()
	p.mu.read++
	b.order = p.mu.read
	p.mu.queue = append(p.mu.queue, b)
	p.mu.Unlock()
	if b.done {
		p.signal()
	}
}

func (p *publisher) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// writeAnswers sends PUBLISH_ACK / PUBLISH_ERROR for completed batches, strictly in read
// order (or, anyOrder, every completed batch, in the order of the queue), and returns once
// reading has ended and every batch is answered. A write error (the client went away) stops
// writing but not the bookkeeping: every submitted batch is still waited for, so the
// stream's goroutines never outlive its appends.
func (p *publisher) writeAnswers() {
	a := &answers{p: p, w: wire.NewWriter(p.str), m: p.s.n.metrics}
	var ready []*pendingBatch
	for {
		clear(ready)
		ready = ready[:0]
		p.mu.Lock()
		for len(p.mu.queue) > 0 && p.mu.queue[0].done {
			ready = append(ready, p.mu.queue[0])
			p.mu.queue[0] = nil
			p.mu.queue = p.mu.queue[1:]
		}
		if p.anyOrder {
			// The rest of the queue: completed batches leave it, the others keep their
			// order (a short scan: the queue holds what the window lets the client send).
			kept := p.mu.queue[:0]
			for _, b := range p.mu.queue {
				if b.done {
					ready = append(ready, b)
				} else {
					kept = append(kept, b)
				}
			}
			clear(p.mu.queue[len(kept):])
			p.mu.queue = kept
		}
		finished := p.mu.readDone && len(p.mu.queue) == 0
		p.mu.Unlock()

		for _, b := range ready {
			a.answer(b)
		}
		if !a.failed && len(ready) > 0 && a.w.Flush() != nil {
			a.fail()
		}
		if finished {
			return
		}
		<-p.wake
	}
}

// answers is the writer goroutine's state: the stream's writer, whether a write failed (the
// answers after it are only counted), and the frames and series it reuses.
type answers struct {
	p      *publisher
	w      *wire.Writer
	m      *metrics
	failed bool

	topic     *topicSeries // of lastTopic, the topic of the last batch counted
	lastTopic string
	// One frame value of each kind, reused: Write encodes at once, and a new one per answer
	// would be a heap allocation per record.
	ack  wire.PublishAck
	acks wire.PublishAcks
	perr wire.PublishError
}

// write writes f unless a write failed already.
func (a *answers) write(f wire.Frame) {
	if !a.failed && a.w.Write(f) != nil {
		a.fail()
	}
}

// fail stops the writes: the client is gone or reset the stream.
func (a *answers) fail() {
	a.failed = true
	a.p.str.CancelRead(wire.AppCancelled)
}

// answer writes the answers of batch b, freeing a window slot per publish, and counts what
// was stored.
func (a *answers) answer(b *pendingBatch) {
	if b.err == nil && b.res.Err != nil {
		b.err = appendError(b.res.Err)
	}
	var ok int
	// A batch with a duplicate or a refused sequence (wal dedup) is answered record by
	// record: its offsets are not one run, and a duplicate's ack carries a flag.
	switch {
	case b.err == nil && b.outcomes == nil && a.p.ranges.Load() && len(b.res.Skipped) == 0:
		ok = a.answerRuns(b, b.res.First, b.res.Time)
	case b.err == nil && b.outcomes != nil && a.p.ranges.Load() && relayedRun(b):
		ok = a.answerRuns(b, b.outcomes[0].Offset, b.outcomes[0].Time)
	default:
		ok = a.answerEach(b)
	}
	if ok > 0 && b.relayTo == "" { // relayed records count on their owner
		if a.topic == nil || b.topic != a.lastTopic {
			a.topic, a.lastTopic = a.m.topic.of(b.topic), b.topic
		}
		a.m.publishRecords.Add(float64(ok))
		a.m.publishBytes.Add(float64(b.stored))
		a.topic.records.Add(float64(ok))
		a.topic.bytes.Add(float64(b.stored))
		a.m.publishLatency.Observe(time.Since(b.read).Seconds())
	}
}

// relayedRun says whether the owner stored every record of b, relayed to it, at
// consecutive offsets with one time (none a duplicate), so that b is answered as a batch
// appended here would be (answerRuns).
func relayedRun(b *pendingBatch) bool {
	if b.unknown || b.answered != len(b.seqs) {
		return false
	}
	first := b.outcomes[0]
	for i, o := range b.outcomes {
		if b.errs[i] != nil || o.Duplicate || o.Err != nil || o.Offset != first.Offset+uint64(i) || o.Time != first.Time {
			return false
		}
	}
	return true
}

// answerRuns answers a batch appended at consecutive offsets from first with one time:
// one PUBLISH_ACKS per run of consecutive seqs. It returns how many were stored.
func (a *answers) answerRuns(b *pendingBatch, first uint64, at int64) int {
	for i := 0; i < len(b.seqs); {
		j := i + 1
		for j < len(b.seqs) && b.seqs[j] == b.seqs[j-1]+1 {
			j++
		}
		a.acks = wire.PublishAcks{Seq: b.seqs[i], Count: uint64(j - i), Offset: first + uint64(i), Time: at}
		a.write(&a.acks)
		i = j
	}
	for range b.seqs {
		<-a.p.window
	}
	return len(b.seqs)
}

// answerEach answers b's publishes one by one: an ack, a duplicate's ack or an error each.
// It returns how many were stored by this batch.
func (a *answers) answerEach(b *pendingBatch) (ok int) {
	skip := 0 // walks b.res.Skipped along with i
	for i, seq := range b.seqs {
		e := b.err
		if e == nil && b.errs != nil {
			e = b.errs[i]
		}
		var o wal.RecordOutcome
		switch {
		case e != nil:
		case b.outcomes != nil:
			o = b.outcomes[i]
		default:
			if o = b.res.Outcome(i, &skip); o.Err != nil {
				e = sequenceError(o.Err)
			}
		}
		switch {
		case e != nil && b.unknown && (b.got == nil || !b.got[i]):
			// PUBLISH_ERROR would say nothing was appended, which the relay cannot know: end
			// the stream, leaving this publish and every later one unanswered (outcome
			// unknown; an idempotent retry learns it).
			if !a.failed {
				a.w.Write(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
				a.w.Flush()
				a.p.str.Close()
				a.p.str.CancelRead(wire.AppCancelled)
				a.failed = true
			}
			a.m.publishErrors.WithLabelValues(strconv.FormatUint(uint64(e.Code), 10)).Inc()
		case e != nil:
			a.perr = wire.PublishError{Seq: seq, Code: e.Code, Message: e.Message}
			a.write(&a.perr)
			a.m.publishErrors.WithLabelValues(strconv.FormatUint(uint64(e.Code), 10)).Inc()
		default:
			a.ack = wire.PublishAck{Seq: seq, Offset: o.Offset, Time: o.Time}
			if o.Duplicate {
				a.ack.Flags = wire.AckDuplicate // stored by an earlier attempt: not counted again
			} else {
				ok++
			}
			a.write(&a.ack)
		}
		<-a.p.window
	}
	return ok
}

// sequenceError tells a publisher that its sequence is older than what the log remembers of
// its producer (wal.SequenceError). The topic is left out: the log's name of it carries the
// tenant's namespace.
func sequenceError(err error) *wire.Error {
	var se *wal.SequenceError
	if !errors.As(err, &se) {
		return appendError(err)
	}
	return wire.Errorf(wire.CodeSequence,
		"sequence %d of producer %q is older than the node's de-duplication window for this topic (the last %d publishes, sequences above %d); the node cannot tell whether it was stored, so it stored nothing",
		se.Sequence, se.ProducerID, se.Window, se.Floor)
}

// appendError maps a log error to what the client is told.
func appendError(err error) *wire.Error {
	var re *replicatedError
	switch {
	case errors.As(err, &re):
		return re.e
	case errors.Is(err, wal.ErrClosed):
		return wire.Errorf(wire.CodeShuttingDown, "node shutting down: nothing was appended")
	case errors.Is(err, wal.ErrTooLarge):
		return &wire.Error{Code: wire.CodeTooLarge, Message: err.Error()}
	case errors.Is(err, wal.ErrInvalidRequest):
		return &wire.Error{Code: wire.CodeInvalidArgument, Message: err.Error()}
	}
	return &wire.Error{Code: wire.CodeInternal, Message: fmt.Sprintf("append failed: %v", err)}
}
