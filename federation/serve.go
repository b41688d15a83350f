package federation

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// ServeStream serves a stream a peer opened on a quicmq-peer/1 connection, whose first frame
// (WATCH or MIRROR) has been read. It returns when the stream ends. The node calls it on the
// stream's goroutine; the peer was authenticated by mutual TLS.
func (f *Federation) ServeStream(ctx context.Context, str *quic.Stream, r *wire.Reader, first wire.Frame) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch fr := first.(type) {
	case *wire.Watch:
		return f.serveCatalog(ctx, cancel, str, r, fr)
	case *wire.Mirror:
		return f.serveMirror(ctx, cancel, str, r, fr)
	}
	return fmt.Errorf("federation: a peer stream cannot start with %s", first.Type())
}

// IsPeerFrame reports whether a stream starting with f is served by ServeStream.
func IsPeerFrame(f wire.Frame) bool {
	switch f.(type) {
	case *wire.Watch, *wire.Mirror:
		return true
	}
	return false
}

// serveCatalog announces every local topic matching the peer's patterns, now and as topics
// are created; a later WATCH replaces the patterns.
func (f *Federation) serveCatalog(ctx context.Context, cancel context.CancelFunc, str *quic.Stream, r *wire.Reader, first *wire.Watch) error {
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

	patterns := validPatterns(first.Patterns)
	announced := make(map[string]bool)
	w := wire.NewWriter(str)
	synced := false
	for {
		for _, t := range f.cfg.Log.Topics() {
			if announced[t.Name] || !f.wanted(t.Name, patterns) {
				continue
			}
			announced[t.Name] = true
			w.Write(&wire.Topic{Name: t.Name})
		}
		if !synced {
			// Every topic held when the stream began is announced: the peer may now decide
			// that a topic it has not heard of is not held here.
			w.Write(&wire.Subscribed{})
			synced = true
		}
		if err := w.Flush(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-newTopics:
		case p := <-updates:
			patterns = validPatterns(p)
		}
	}
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
		served := false
		for _, c := range cursors {
			if !c.ready && !f.headMoved(c) {
				continue
			}
			served = true
			e, err := f.serveBatch(w, c)
			if e != nil {
				return fail(e)
			}
			if err != nil {
				return err
			}
		}
		if served {
			continue
		}
		select {
		case <-ctx.Done():
		case <-wake:
		}
	}
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
	w.Buffer(f.head(c.topic, c.next, scannedTime))
	c.ready = got > 0 // after a batch, read again at once: HEAD once more on catching up
	return nil, w.Flush()
}

// head describes how far the scan position is behind the log's head.
func (f *Federation) head(topic string, position uint64, scannedTime int64) *wire.Head {
	_, next, _ := f.cfg.Log.Bounds(topic)
	h := &wire.Head{Next: next, Position: position}
	if position < next && scannedTime > 0 {
		if last, err := f.cfg.Log.Read(topic, next-1, 1, 0); err == nil && len(last) == 1 {
			h.Lag = max(last[0].Time-scannedTime, 0)
		}
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
