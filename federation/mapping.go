package federation

import (
	"bufio"
	"context"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// streamMapping is how a link's mirrors map onto QUIC streams: the one piece in which the
// product (a stream per mirrored topic, streamPerTopic) and the shared-link ablation (one
// stream per link, ablation.go) differ. Everything else is one code path for both, so the
// ablation can skip no check: on the mirroring side mirror.go takes the (origin region,
// topic) lock, reads the cursor, checks every frame (origin region, origin order) and appends
// each batch with its cursor in one synced commit; on the serving side serve.go validates
// each request, reads the log, skips records that originated elsewhere and builds the
// RECORD, GAP and HEAD frames. Links are mutual TLS between nodes of the mesh CA before any
// mapping is chosen. A mapping only carries requests and frames.
type streamMapping interface {
	// connect prepares the mirroring side on a new connection of a link (link.serve's
	// goroutine). Goroutines it starts are counted in wg and end with ctx.
	connect(ctx context.Context, conn *quic.Conn, wg *sync.WaitGroup) mirrorOpener

	// The serving side, for a stream that began with MIRROR first:
	// opening lists the topics the first frame asks for;
	opening(first *wire.Mirror) []*wire.Mirror
	// later takes a frame sent after the first: a further request, nil to ignore it, or an
	// error that ends the stream;
	later(f wire.Frame) (*wire.Mirror, *wire.Error)
	// tag is the index that the RECORD and GAP frames of the stream's n-th topic carry, and
	// whether a TOPIC frame with it precedes each of its HEADs (HEAD has no index).
	tag(n uint64) (index uint64, topicBeforeHead bool)
}

// mirrorOpener opens mirror feeds on one connection of a link.
type mirrorOpener interface {
	// open asks the peer for the records of topic that originated in its region, from
	// origin offset from. The feed ends when ctx does.
	open(ctx context.Context, topic string, from uint64) (mirrorFeed, error)
}

// mirrorFeed is one mirror's frames from the serving node, in the order it sent them. Only
// the mirror's goroutine uses it.
type mirrorFeed interface {
	// next returns the next RECORD, GAP or HEAD; an ERROR frame is returned as its error
	// (a *wire.Error).
	next() (wire.Frame, error)
	// idle reports that no further frame is waiting: the batch is appended then.
	idle() bool
	// close abandons the feed.
	close()
}

// mapping is the stream mapping this federation's links mirror with (Config.AblationSharedLink);
// a stream per topic reads its feeds through bufs.
func (c Config) mapping(bufs *feedBuffers) streamMapping {
	if c.AblationSharedLink {
		return sharedPerLink{}
	}
	return streamPerTopic{bufs: bufs}
}

// mappingFor chooses the serving side's mapping from a stream's first MIRROR: the shared
// stream's marker asks for the ablation, refused unless this node has it on.
func (f *Federation) mappingFor(first *wire.Mirror) (streamMapping, *wire.Error) {
	if first.Topic != sharedLinkMarker {
		return streamPerTopic{bufs: f.feeds}, nil
	}
	if !f.cfg.AblationSharedLink {
		return nil, wire.Errorf(wire.CodeForbidden, "the shared-link ablation is off on this node (a measurement aid: federation.Config.AblationSharedLink, --ablation-shared-link)")
	}
	return sharedPerLink{}, nil
}

// streamPerTopic is the product's mapping: each mirror opens a stream of its own whose only
// request is its first frame, so a lost packet or a slow append holds up that topic alone.
type streamPerTopic struct {
	bufs *feedBuffers // the mirroring side's read buffers (the Federation's)
}

func (m streamPerTopic) connect(_ context.Context, conn *quic.Conn, _ *sync.WaitGroup) mirrorOpener {
	return topicStreams{conn: conn, bufs: m.bufs}
}

func (streamPerTopic) opening(first *wire.Mirror) []*wire.Mirror { return []*wire.Mirror{first} }

// later ignores what the peer sends after MIRROR (it sends nothing; its end of the stream
// ends the mirror).
func (streamPerTopic) later(wire.Frame) (*wire.Mirror, *wire.Error) { return nil, nil }

func (streamPerTopic) tag(uint64) (uint64, bool) { return 0, false }

// topicStreams opens a stream per mirror on one connection.
type topicStreams struct {
	conn *quic.Conn
	bufs *feedBuffers
}

func (o topicStreams) open(ctx context.Context, topic string, from uint64) (mirrorFeed, error) {
	str, err := o.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	br := o.bufs.get(str)
	// wire.NewReader reads through br itself (bufio returns a reader already as large as
	// asked for), so the buffer goes back to the free list with the feed.
	fd := &topicFeed{str: str, bufs: o.bufs, br: br, r: wire.NewReader(br, wire.Limits{MaxFrame: 8 << 20, MaxPayload: 8 << 20})}
	fd.stop = context.AfterFunc(ctx, func() { str.CancelRead(wire.AppCancelled) })
	// The request is the stream's only frame: written at once, with no Writer kept.
	if _, err := str.Write(wire.Append(nil, &wire.Mirror{Topic: topic, From: from})); err != nil {
		fd.close()
		return nil, err
	}
	return fd, nil
}

// feedBufferSize is a mirror feed's read buffer: wire.NewReader's own size, so that it
// reads through the pooled buffer rather than one of its own.
const feedBufferSize = 16 << 10

// feedBuffers are the read buffers of a Federation's mirror feeds: those of the feeds open
// now, and, for reuse, those of ended feeds, at most as many as are open (and
// feedBuffersFloor). A link opens a stream for every topic that moves and for every topic of
// a catch-up (100,000 of them when a region joins): a buffer each, allocated anew, made most
// of the catch-up's garbage. Not a sync.Pool: it keeps the buffers of the most streams ever
// open at once (15 MiB after 10,000 topics caught up over 1,024 streams) until the second
// collection after the catch-up, which an idle node reaches only with Go's forced
// collections, two minutes apart; that was most of what an idle node holding many mirrored
// topics kept beyond one holding as many local topics (issue 34, figure 3). Bounded by the
// feeds open, the free list empties as the catch-up's mirrors park.
type feedBuffers struct {
	mu struct {
		sync.Mutex
		open int             // feeds holding a buffer
		free []*bufio.Reader // ended feeds' buffers, for the next to open
	}
}

// feedBuffersFloor is how many ended feeds' buffers are kept also with fewer feeds open: a
// hot topic's mirror that parks and opens again reuses one.
const feedBuffersFloor = 8

// get hands out a buffer reading from str.
func (b *feedBuffers) get(str *quic.Stream) *bufio.Reader {
	b.mu.Lock()
	b.mu.open++
	var br *bufio.Reader
	if n := len(b.mu.free); n > 0 {
		br = b.mu.free[n-1]
		b.mu.free[n-1] = nil
		b.mu.free = b.mu.free[:n-1]
	}
	b.mu.Unlock()
	if br == nil {
		br = bufio.NewReaderSize(str, feedBufferSize)
	} else {
		br.Reset(str)
	}
	return br
}

// put takes back the buffer of an ended feed, keeping it only while fewer ended feeds' buffers
// are kept than feeds are open (or than feedBuffersFloor).
func (b *feedBuffers) put(br *bufio.Reader) {
	br.Reset(nil)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.open--
	keep := max(b.mu.open, feedBuffersFloor)
	if len(b.mu.free) < keep {
		b.mu.free = append(b.mu.free, br)
	}
	if len(b.mu.free) > keep {
		clear(b.mu.free[keep:])
		b.mu.free = b.mu.free[:keep]
	}
	if cap(b.mu.free) > 4*keep {
		// The array of a catch-up's buffers goes too.
		b.mu.free = append([]*bufio.Reader(nil), b.mu.free...)
	}
}

// kept reports how many ended feeds' buffers are kept (tests).
func (b *feedBuffers) kept() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mu.free)
}

// topicFeed is a mirror's stream of its own.
type topicFeed struct {
	str  *quic.Stream
	bufs *feedBuffers
	br   *bufio.Reader // r's buffer, from bufs
	r    *wire.Reader
	stop func() bool
}

func (fd *topicFeed) next() (wire.Frame, error) {
	f, err := fd.r.Read()
	if err != nil {
		return nil, err
	}
	if e, ok := f.(*wire.ErrorFrame); ok {
		return nil, e.AsError()
	}
	return f, nil
}

func (fd *topicFeed) idle() bool { return !fd.r.FrameBuffered() }

// close ends the feed. The mirror's goroutine, its only reader, reads it no more: its buffer
// goes back to the free list.
func (fd *topicFeed) close() {
	fd.stop()
	fd.str.CancelWrite(wire.AppCancelled)
	fd.str.CancelRead(wire.AppCancelled)
	if fd.br != nil {
		fd.bufs.put(fd.br)
		fd.br, fd.r = nil, nil
	}
}
