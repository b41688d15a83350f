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

// mapping is the stream mapping this federation's links mirror with (Config.AblationSharedLink).
func (c Config) mapping() streamMapping {
	if c.AblationSharedLink {
		return sharedPerLink{}
	}
	return streamPerTopic{}
}

// mappingFor chooses the serving side's mapping from a stream's first MIRROR: the shared
// stream's marker asks for the ablation, refused unless this node has it on.
func (f *Federation) mappingFor(first *wire.Mirror) (streamMapping, *wire.Error) {
	if first.Topic != sharedLinkMarker {
		return streamPerTopic{}, nil
	}
	if !f.cfg.AblationSharedLink {
		return nil, wire.Errorf(wire.CodeForbidden, "the shared-link ablation is off on this node (a measurement aid: federation.Config.AblationSharedLink, --ablation-shared-link)")
	}
	return sharedPerLink{}, nil
}

// streamPerTopic is the product's mapping: each mirror opens a stream of its own whose only
// request is its first frame, so a lost packet or a slow append holds up that topic alone.
type streamPerTopic struct{}

func (streamPerTopic) connect(_ context.Context, conn *quic.Conn, _ *sync.WaitGroup) mirrorOpener {
	return topicStreams{conn: conn}
}

func (streamPerTopic) opening(first *wire.Mirror) []*wire.Mirror { return []*wire.Mirror{first} }

// later ignores what the peer sends after MIRROR (it sends nothing; its end of the stream
// ends the mirror).
func (streamPerTopic) later(wire.Frame) (*wire.Mirror, *wire.Error) { return nil, nil }

func (streamPerTopic) tag(uint64) (uint64, bool) { return 0, false }

// topicStreams opens a stream per mirror on one connection.
type topicStreams struct{ conn *quic.Conn }

func (o topicStreams) open(ctx context.Context, topic string, from uint64) (mirrorFeed, error) {
	str, err := o.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	br := feedBuffers.Get().(*bufio.Reader)
	br.Reset(str)
	// wire.NewReader reads through br itself (bufio returns a reader already as large as
	// asked for), so the buffer goes back to the pool with the feed.
	fd := &topicFeed{str: str, br: br, r: wire.NewReader(br, wire.Limits{MaxFrame: 8 << 20, MaxPayload: 8 << 20})}
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

// feedBuffers holds the read buffers of ended mirror feeds. A link opens a stream for every
// topic that moves and for every topic of a catch-up (100,000 of them when a region joins):
// a buffer each, allocated anew, made most of the catch-up's garbage, and the heap it left
// behind was what an idle node holding many mirrored topics cost beyond one holding as
// many local topics (issue 34, figure 3).
var feedBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, feedBufferSize) }}

// topicFeed is a mirror's stream of its own.
type topicFeed struct {
	str  *quic.Stream
	br   *bufio.Reader // r's buffer, from feedBuffers
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
// goes back to the pool.
func (fd *topicFeed) close() {
	fd.stop()
	fd.str.CancelWrite(wire.AppCancelled)
	fd.str.CancelRead(wire.AppCancelled)
	if fd.br != nil {
		fd.br.Reset(nil)
		feedBuffers.Put(fd.br)
		fd.br, fd.r = nil, nil
	}
}
