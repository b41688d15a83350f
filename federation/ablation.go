package federation

// The shared-link ablation: a measurement aid, off by default (Config.AblationSharedLink,
// `quicmq node --ablation-shared-link`), the federation's counterpart of the client
// shared-stream ablation (node/ablation.go).
//
// QuicMQ's claim is that one QUIC stream per remote subscription keeps a lossy link from
// stalling every mirrored topic behind one lost packet. To measure that claim against the
// same nodes, link, connection and code paths, this mode carries all of a link's mirrors on
// ONE stream, as a TCP link between two brokers would. What stays: the serving node reads
// each topic's log with the same ReadFunc bounds (1,024 records, 256 KiB per topic per
// round) and encodes the same RECORD and GAP frames; the mirroring node runs one goroutine
// per mirrored topic, which holds the same (region, topic) lock, batches the same way and
// appends each batch with its cursor in one synced commit (I7). What changes is only the
// stream mapping, so that:
//   - a lost packet holds up every later byte of the stream, whichever topic those bytes
//     belong to (transport head-of-line blocking), and
//   - the stream's one demultiplexing reader hands each record to its topic's bounded queue
//     (sharedQueue records, the equivalent of a socket buffer) and waits while that queue is
//     full, so a topic whose appends fall behind stops every other topic on the link.
//
// Protocol (peer streams only, never on the client ALPN): the mirroring node opens one
// stream per connection whose first frame is MIRROR with topic "~shared-link" (never a valid
// topic). Each later MIRROR frame on it asks for one topic from an origin offset; they are
// numbered 0, 1, 2, ... in the order sent, and the serving node's RECORD and GAP frames carry
// that number as their Index. HEAD has no index: the serving node sends a TOPIC frame with the
// number (no name) before each HEAD, which it sends when serveMirror would (after each batch,
// and once more on catching up), so both mappings carry the same frames but for those TOPIC
// frames. quicmq_link_mirror_streams still counts mirrors, not streams. A mirror that stops (interest gone, or an error) leaves its number: records
// still sent for it are discarded, its cursor did not move, and when it runs again it asks
// under a new number from its cursor. Either node refuses the mode unless it is configured
// (the serving node answers ERROR forbidden, which ends the stream).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// sharedLinkMarker is the topic of the MIRROR frame that opens a shared stream.
const sharedLinkMarker = "~shared-link"

// sharedQueue is how many frames one topic of a shared stream holds before the stream's
// reader waits for that topic's mirror: while it waits, the whole stream stops.
const sharedQueue = 256

// sharedLink is a link's shared mirror stream over one connection. A stream is opened by the
// first mirror that needs one and reopened by the next after it ended; each stream's demux
// goroutine is counted in the serving goroutine's WaitGroup (link.serve), so it has ended
// before the connection's serve returns.
type sharedLink struct {
	l      *link
	conn   *quic.Conn
	ctx    context.Context // link.serve's: ends with the connection
	wg     *sync.WaitGroup // link.serve's
	opened atomic.Uint64   // streams opened: one unless a stream failed

	mu struct {
		sync.Mutex
		cur *sharedStream
	}
}

// startShared makes the ablation's shared stream available to the mirrors of conn (the
// AblationSharedLink hook of link.serve).
func (l *link) startShared(ctx context.Context, conn *quic.Conn, wg *sync.WaitGroup) {
	l.shared.Store(&sharedLink{l: l, conn: conn, ctx: ctx, wg: wg})
}

// sharedStream is one open shared stream. Its demux goroutine is the only reader; the
// mirrors' goroutines write MIRROR frames under wmu.
type sharedStream struct {
	str  *quic.Stream
	done chan struct{} // closed when the demux goroutine ended; err is then set
	err  error

	wmu  sync.Mutex // guards w and next
	w    *wire.Writer
	next uint64 // number of the next MIRROR frame

	mu   sync.Mutex
	subs map[uint64]*sharedSub
}

// sharedSub is one mirror's place on a shared stream.
type sharedSub struct {
	q    chan wire.Frame // RECORD, GAP and HEAD frames, in stream order
	gone chan struct{}   // closed when the mirror left: the demux stops waiting for it
}

// stream returns the open shared stream, opening one if there is none or it ended.
func (sl *sharedLink) stream(ctx context.Context) (*sharedStream, error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if s := sl.mu.cur; s != nil {
		select {
		case <-s.done:
		default:
			return s, nil
		}
	}
	str, err := sl.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	s := &sharedStream{str: str, done: make(chan struct{}), w: wire.NewWriter(str), subs: make(map[uint64]*sharedSub)}
	s.w.Write(&wire.Mirror{Topic: sharedLinkMarker})
	if err := s.w.Flush(); err != nil {
		str.CancelRead(wire.AppCancelled)
		str.CancelWrite(wire.AppCancelled)
		return nil, err
	}
	sl.opened.Add(1)
	sl.mu.cur = s
	sl.wg.Add(1) // the caller, a mirror goroutine, is counted: the counter is above zero
	go func() {
		defer sl.wg.Done()
		s.demux(sl.ctx)
	}()
	return s, nil
}

// demux reads the stream and hands each frame to its topic's queue, waiting while that
// queue is full (head-of-line blocking, on purpose).
func (s *sharedStream) demux(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		s.str.CancelRead(wire.AppCancelled)
		s.str.CancelWrite(wire.AppCancelled)
	})
	defer stop()
	r := wire.NewReader(s.str, wire.Limits{MaxFrame: 8 << 20, MaxPayload: 8 << 20})
	err := func() error {
		var headIndex uint64 // from the TOPIC frame before a HEAD
		for {
			f, err := r.Read()
			if err != nil {
				return err
			}
			var index uint64
			switch f := f.(type) {
			case *wire.Record:
				index = f.Index
			case *wire.Gap:
				index = f.Index
			case *wire.Topic:
				headIndex = f.Index
				continue
			case *wire.Head:
				index = headIndex
			case *wire.ErrorFrame:
				return f.AsError()
			default:
				return fmt.Errorf("unexpected %s on a shared mirror stream", f.Type())
			}
			s.mu.Lock()
			sub := s.subs[index]
			s.mu.Unlock()
			if sub == nil {
				continue // its mirror left: the cursor did not move past these records
			}
			select {
			case sub.q <- f:
			case <-sub.gone:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}()
	s.str.CancelRead(wire.AppCancelled)
	s.str.CancelWrite(wire.AppCancelled)
	s.err = err
	close(s.done)
}

// join asks for topic's records from origin offset from. The queue is in place before the
// request is sent, so no frame of it arrives unrouted.
func (s *sharedStream) join(topic string, from uint64) (*sharedSub, func(), error) {
	sub := &sharedSub{q: make(chan wire.Frame, sharedQueue), gone: make(chan struct{})}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	index := s.next
	s.next++
	s.mu.Lock()
	s.subs[index] = sub
	s.mu.Unlock()
	leave := func() {
		s.mu.Lock()
		delete(s.subs, index)
		s.mu.Unlock()
		close(sub.gone)
	}
	s.w.Write(&wire.Mirror{Topic: topic, From: from})
	if err := s.w.Flush(); err != nil {
		leave()
		return nil, nil, err
	}
	return sub, leave, nil
}

// onceOn runs one mirror stream: the topic's own, or its place on the link's shared stream
// when the ablation is on (the hook of mirror.run).
func (m *mirror) onceOn(ctx context.Context, conn *quic.Conn) error {
	if sl := m.l.shared.Load(); sl != nil && sl.conn == conn {
		return m.onceShared(ctx, sl)
	}
	return m.once(ctx, conn)
}

// onceShared is mirror.once on the shared stream: the same lock, cursor, checks, batches and
// synced appends, fed by the stream's demux instead of a stream of the topic's own.
func (m *mirror) onceShared(ctx context.Context, sl *sharedLink) error {
	from, unlock, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := sl.stream(ctx)
	if err != nil {
		return err
	}
	sub, leave, err := s.join(m.topic, from)
	if err != nil {
		return err
	}
	defer leave()

	b := mirrorBatch{next: from}
	for {
		var f wire.Frame
		select {
		case f = <-sub.q:
		case <-s.done:
			return fmt.Errorf("shared mirror stream: %w", s.err)
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := m.apply(ctx, &b, f); err != nil {
			return err
		}
		// As on a stream of its own: append when nothing more is queued, or the batch is full.
		if b.due(len(sub.q) == 0) {
			if err := m.flush(&b); err != nil {
				return err
			}
		}
	}
}

// sharedCursor is one topic served on a shared stream, owned by serveShared's goroutine.
type sharedCursor struct {
	index  uint64
	topic  string
	next   uint64
	cancel func() // stops the log's notifications
	behind bool   // a batch was sent since the last HEAD that found the cursor caught up
}

// serveShared serves a shared mirror stream (the serving side of the ablation): every topic
// asked for on it, in turns of at most one ReadFunc batch per topic, each flushed before the
// next is read, as serveMirror does for its one topic. This goroutine is the only writer;
// the reader goroutine takes the MIRROR frames and hands them over under mu.
func (f *Federation) serveShared(ctx context.Context, cancel context.CancelFunc, str *quic.Stream, r *wire.Reader) error {
	w := wire.NewWriter(str)
	fail := func(e *wire.Error) error {
		str.SetWriteDeadline(time.Now().Add(time.Second))
		w.Write(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
		w.Flush()
		str.Close()
		str.CancelRead(wire.AppCancelled)
		return e
	}
	if !f.cfg.AblationSharedLink {
		return fail(wire.Errorf(wire.CodeForbidden, "the shared-link ablation is off on this node (a measurement aid: federation.Config.AblationSharedLink, --ablation-shared-link)"))
	}
	wake := make(chan struct{}, 1)
	var mu struct {
		sync.Mutex
		pending []*wire.Mirror
		err     *wire.Error
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer cancel()
		for {
			fr, err := r.Read()
			if err != nil {
				return // the peer closed or reset its side
			}
			req, ok := fr.(*wire.Mirror)
			var e *wire.Error
			switch {
			case !ok:
				e = wire.Errorf(wire.CodeProtocol, "unexpected %s on a shared mirror stream: only MIRROR", fr.Type())
			case routing.ValidateTopic(req.Topic) != nil:
				e = &wire.Error{Code: wire.CodeInvalidTopic, Message: routing.ValidateTopic(req.Topic).Error()}
			}
			mu.Lock()
			if e != nil {
				mu.err = e
			} else {
				mu.pending = append(mu.pending, req)
			}
			mu.Unlock()
			if e != nil {
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	defer func() { <-readDone }()
	defer str.CancelRead(wire.AppCancelled)
	stopWrites := context.AfterFunc(ctx, func() { str.CancelWrite(wire.AppCancelled) })
	defer stopWrites()

	var cursors []*sharedCursor
	defer func() {
		for _, c := range cursors {
			c.cancel()
		}
	}()
	log := f.cfg.Log
	for {
		mu.Lock()
		reqs, e := mu.pending, mu.err
		mu.pending = nil
		mu.Unlock()
		if e != nil {
			return fail(e)
		}
		for _, req := range reqs {
			c := &sharedCursor{index: uint64(len(cursors)), topic: req.Topic, next: req.From}
			c.cancel = log.Notify(c.topic, wake)
			cursors = append(cursors, c)
		}
		if ctx.Err() != nil {
			str.Close()
			return nil
		}
		sent := 0
		for _, c := range cursors {
			got, after, scannedTime, err := f.bufferRecords(w, c.topic, c.index, c.next)
			c.next = after
			var oor *wal.OffsetOutOfRangeError
			switch {
			case err == nil, errors.Is(err, wal.ErrUnknownTopic):
			case errors.As(err, &oor):
				w.Buffer(&wire.Gap{Index: c.index, From: c.next, To: oor.First})
				c.next = oor.First
				got++
			case errors.Is(err, wal.ErrClosed):
				return fail(wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
			default:
				w.Flush() // the records before the failed one are good
				return fail(wire.Errorf(wire.CodeInternal, "read %q at %d: %v", c.topic, c.next, err))
			}
			// HEAD after each batch and once on catching up, as serveMirror sends it.
			if got > 0 || c.behind {
				c.behind = got > 0
				w.Buffer(&wire.Topic{Index: c.index})
				w.Buffer(f.head(c.topic, c.next, scannedTime))
				sent += got
				if err := w.Flush(); err != nil {
					return err
				}
			}
		}
		if sent > 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-wake:
		}
	}
}
