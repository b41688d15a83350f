package federation

// The shared-link ablation: a measurement aid, off by default (Config.AblationSharedLink,
// `quicmq node --ablation-shared-link`), the federation's counterpart of the client
// shared-stream ablation (node/sharedstream, wired to the session in node/ablation.go).
//
// QuicMQ's claim is that one QUIC stream per remote subscription keeps a lossy link from
// stalling every mirrored topic behind one lost packet. To measure that claim against the
// same nodes, link, connection and code paths, this mode carries all of a link's mirrors on
// ONE stream, as a TCP link between two brokers would. It is a streamMapping (mapping.go)
// and nothing more: the serving node runs the same serveMirror (request checks, log reads
// with the same bounds, the same RECORD, GAP and HEAD frames), the mirroring node the same
// mirror.once (the (region, topic) lock, the cursor, the frame checks, each batch appended
// with its cursor in one synced commit: I7). What the mapping changes is only where the
// frames travel, so that:
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
// number (no name) before each HEAD, so both mappings carry the same frames but for those
// TOPIC frames. quicmq_link_mirror_streams still counts mirrors, not streams. A mirror that
// stops (interest gone, or an error) leaves its number: records still sent for it are
// discarded, its cursor did not move, and when it runs again it asks under a new number from
// its cursor. Either node refuses the mode unless it is configured (the serving node answers
// ERROR forbidden, which ends the stream).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
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
	conn   *quic.Conn
	ctx    context.Context // link.serve's: ends with the connection
	wg     *sync.WaitGroup // link.serve's
	opened atomic.Uint64   // streams opened: one unless a stream failed

	mu struct {
		sync.Mutex
		cur *sharedStream
	}
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

// sharedPerLink is the ablation's stream mapping: every mirror of a connection on one
// shared stream, each topic under its number.
type sharedPerLink struct{}

func (sharedPerLink) connect(ctx context.Context, conn *quic.Conn, wg *sync.WaitGroup) mirrorOpener {
	return &sharedLink{conn: conn, ctx: ctx, wg: wg}
}

// opening: the marker asks for no topic; the MIRROR frames after it do.
func (sharedPerLink) opening(*wire.Mirror) []*wire.Mirror { return nil }

func (sharedPerLink) later(f wire.Frame) (*wire.Mirror, *wire.Error) {
	if m, ok := f.(*wire.Mirror); ok {
		return m, nil
	}
	return nil, wire.Errorf(wire.CodeProtocol, "unexpected %s on a shared mirror stream: only MIRROR", f.Type())
}

func (sharedPerLink) tag(n uint64) (uint64, bool) { return n, true }

// open joins the connection's shared stream (opening one if there is none or it ended).
func (sl *sharedLink) open(ctx context.Context, topic string, from uint64) (mirrorFeed, error) {
	s, err := sl.stream(ctx)
	if err != nil {
		return nil, err
	}
	sub, leave, err := s.join(topic, from)
	if err != nil {
		return nil, err
	}
	return &sharedFeed{ctx: ctx, s: s, sub: sub, leave: leave}, nil
}

// sharedFeed is a mirror's place on a shared stream, fed by the stream's demux goroutine.
type sharedFeed struct {
	ctx   context.Context
	s     *sharedStream
	sub   *sharedSub
	leave func()
}

func (fd *sharedFeed) next() (wire.Frame, error) {
	select {
	case f := <-fd.sub.q:
		return f, nil
	case <-fd.s.done:
		return nil, fmt.Errorf("shared mirror stream: %w", fd.s.err)
	case <-fd.ctx.Done():
		return nil, fd.ctx.Err()
	}
}

func (fd *sharedFeed) idle() bool { return len(fd.sub.q) == 0 }

func (fd *sharedFeed) close() { fd.leave() }
