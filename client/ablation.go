package client

// The shared-stream ablation (a measurement aid; see node/ablation.go and docs/protocol.md,
// "Shared-stream ablation"): all subscriptions of a SharedStream travel on one QUIC stream,
// so that benchmarks can compare stream-per-subscription against the one-socket mapping of
// a TCP broker with everything else equal.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// ablationSharedRegion marks the SUBSCRIBE frames of a shared stream (the node's constant).
const ablationSharedRegion = "~shared-stream"

// sharedQueue is how many records one subscription of a shared stream holds before the
// stream's reader waits for the application: the equivalent of a socket buffer. While it
// waits, the whole stream stops, and so does every other subscription on it.
const sharedQueue = 256

// ErrAblationOff is returned by OpenSharedStream when Options.AblationSharedStream is false.
var ErrAblationOff = errors.New("client: the shared-stream ablation is off (Options.AblationSharedStream)")

// SharedStream is one QUIC stream carrying many subscriptions: the ablation of QuicMQ's
// stream-per-subscription design. Its demux goroutine is the only reader of the stream and
// hands each record to its subscription's bounded queue, blocking while that queue is full
// (head-of-line blocking, on purpose). Writes (SUBSCRIBE, ACK) are serialised by wmu.
type SharedStream struct {
	c    *Conn
	s    *quic.Stream
	done chan struct{} // closed when the demux goroutine ended; err is then set

	wmu     sync.Mutex // guards the sending side and the fields below
	subs    []*SharedSubscription
	waiting []chan error // Subscribe calls waiting for SUBSCRIBED, in order
	sent    bool         // FIN sent
	ackBuf  []byte

	err error // terminal; written by the demux goroutine before done is closed
}

// SharedSubscription is one subscription of a SharedStream. Next must be called by one
// goroutine at a time; Ack and Close from any.
type SharedSubscription struct {
	sh      *SharedStream
	no      uint64
	pattern string
	q       chan sharedItem
	closed  chan struct{}
	once    sync.Once

	mu    sync.Mutex
	names map[string]uint64 // topic -> stream index, for Ack
}

type sharedItem struct {
	rec Record
	gap *GapError
}

// OpenSharedStream opens the shared stream of the ablation. Its subscriptions end together
// when it is closed.
func (c *Conn) OpenSharedStream(ctx context.Context) (*SharedStream, error) {
	if !c.opts.AblationSharedStream {
		return nil, ErrAblationOff
	}
	s, err := c.openStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: open shared stream: %w", err)
	}
	sh := &SharedStream{c: c, s: s, done: make(chan struct{})}
	go sh.demux()
	return sh, nil
}

// Subscribe adds a subscription to the shared stream and waits until the node confirmed it.
// Durable consumers, region replays and AtTime are not supported here.
func (sh *SharedStream) Subscribe(ctx context.Context, pattern string, opts SubscribeOptions) (*SharedSubscription, error) {
	if opts.Durable != "" || opts.Region != "" || opts.From.kind == wire.StartTime {
		return nil, fmt.Errorf("client: shared subscribe %q: %w", pattern, errorf(CodeInvalidArgument, "a shared stream takes no durable name, region or start time"))
	}
	if err := checkSubscribe(pattern, opts); err != nil {
		return nil, fmt.Errorf("client: shared subscribe %q: %w", pattern, err)
	}
	answer := make(chan error, 1)
	sh.wmu.Lock()
	if sh.sent {
		sh.wmu.Unlock()
		return nil, ErrClosed
	}
	sub := &SharedSubscription{
		sh: sh, no: uint64(len(sh.subs)), pattern: pattern,
		q: make(chan sharedItem, sharedQueue), closed: make(chan struct{}),
		names: make(map[string]uint64),
	}
	// RECORDS frames, as a subscription's own stream gets them: the two modes differ only in
	// the stream mapping.
	req := &wire.Subscribe{Pattern: pattern, Start: opts.From.kind, StartValue: opts.From.value, Region: ablationSharedRegion, Flags: wire.SubscribeRecords}
	_, err := sh.s.Write(wire.Append(nil, req))
	if err == nil {
		sh.subs = append(sh.subs, sub)
		sh.waiting = append(sh.waiting, answer)
	}
	sh.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("client: shared subscribe %q: %w", pattern, sh.c.ctxOr(ctx, err))
	}
	select {
	case err = <-answer:
	case <-sh.done:
		err = sh.err
	case <-ctx.Done():
		err = ctx.Err() // the subscription may still be set up; it is closed at once
		sub.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("client: shared subscribe %q: %w", pattern, err)
	}
	return sub, nil
}

// Close ends the shared stream and all its subscriptions. Safe to call more than once.
func (sh *SharedStream) Close() error {
	sh.wmu.Lock()
	if !sh.sent {
		sh.sent = true
		sh.s.Close()
	}
	sh.wmu.Unlock()
	sh.s.CancelRead(wire.AppCancelled)
	<-sh.done
	return nil
}

// demux is the stream's only reader. It ends at the stream's end or failure, recording why.
func (sh *SharedStream) demux() {
	fr := newFrameReader(sh.s, sh.c.lim)
	var sl slab
	topics := make(map[uint64]string)
	err := func() error {
		for {
			f, err := fr.next(context.Background())
			if err != nil {
				return err
			}
			switch f := f.(type) {
			case *wire.Subscribed:
				sh.wmu.Lock()
				if len(sh.waiting) == 0 {
					sh.wmu.Unlock()
					return errorf(CodeProtocol, "SUBSCRIBED with no SUBSCRIBE waiting on the shared stream")
				}
				w := sh.waiting[0]
				sh.waiting = sh.waiting[1:]
				sh.wmu.Unlock()
				w <- nil
			case *wire.Topic:
				sub := sh.sub(f.Index)
				if sub == nil {
					return errorf(CodeProtocol, "TOPIC of unknown shared subscription %d", f.Index>>32)
				}
				topics[f.Index] = f.Name
				sub.mu.Lock()
				sub.names[f.Name] = f.Index
				sub.mu.Unlock()
			case *wire.Record:
				name, ok := topics[f.Index]
				if !ok {
					return errorf(CodeProtocol, "RECORD for topic index %d before its TOPIC", f.Index)
				}
				sh.sub(f.Index).put(sharedItem{rec: Record{
					Topic: name, Offset: f.Offset, Time: time.Unix(0, f.Time),
					OriginRegion: f.OriginRegion, OriginOffset: f.OriginOffset,
					ProducerID: f.ProducerID, Sequence: f.Sequence,
					Headers: sl.headers(f.Headers), Payload: sl.copy(f.Payload),
				}})
			case *wire.Gap:
				name, ok := topics[f.Index]
				if !ok {
					return errorf(CodeProtocol, "GAP for topic index %d before its TOPIC", f.Index)
				}
				sh.sub(f.Index).put(sharedItem{gap: &GapError{Topic: name, From: f.From, To: f.To}})
			case *wire.ErrorFrame:
				return fmt.Errorf("client: shared stream ended by the node: %w", fromWire(f.Code, f.Message))
			default:
				return errorf(CodeProtocol, "the node sent %s on a shared stream", f.Type())
			}
		}
	}()
	sh.wmu.Lock()
	if sh.sent {
		err = ErrClosed
	} else if !errors.As(err, new(*Error)) {
		err = sh.c.streamErr(err)
	}
	sh.err = err
	for _, w := range sh.waiting {
		w <- err
	}
	sh.waiting = nil
	sh.wmu.Unlock()
	sh.s.CancelRead(wire.AppCancelled)
	close(sh.done)
}

func (sh *SharedStream) sub(index uint64) *SharedSubscription {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	if no := index >> 32; no < uint64(len(sh.subs)) {
		return sh.subs[no]
	}
	return nil
}

// put queues it for the application, waiting while the queue is full: this is the
// head-of-line blocking the ablation exists to show. A closed subscription's records are
// dropped.
func (s *SharedSubscription) put(it sharedItem) {
	select {
	case s.q <- it:
	case <-s.closed:
	}
}

// Next returns the next record of the subscription. A *GapError reports records lost to
// retention once; other errors end the subscription (ErrClosed after Close).
func (s *SharedSubscription) Next(ctx context.Context) (Record, error) {
	select {
	case it := <-s.q:
		if it.gap != nil {
			return Record{}, it.gap
		}
		return it.rec, nil
	default:
	}
	select {
	case it := <-s.q:
		if it.gap != nil {
			return Record{}, it.gap
		}
		return it.rec, nil
	case <-s.closed:
		return Record{}, ErrClosed
	case <-s.sh.done:
		return Record{}, s.sh.err
	case <-ctx.Done():
		return Record{}, ctx.Err()
	}
}

// Ack acknowledges, cumulatively, r and every earlier record of r.Topic on this
// subscription (the node only counts it: a shared stream has no durable consumers).
func (s *SharedSubscription) Ack(r Record) error {
	s.mu.Lock()
	idx, ok := s.names[r.Topic]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("client: ack: topic %q has no record on shared subscription %q", r.Topic, s.pattern)
	}
	sh := s.sh
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	if sh.sent {
		return ErrClosed
	}
	sh.ackBuf = wire.Append(sh.ackBuf[:0], &wire.Ack{Index: idx, Offset: r.Offset})
	if _, err := sh.s.Write(sh.ackBuf); err != nil {
		return fmt.Errorf("client: ack %s@%d: %w", r.Topic, r.Offset, sh.c.streamErr(err))
	}
	return nil
}

// Close stops delivering this subscription's records to the application; the node keeps
// sending them until the shared stream closes (the protocol has no per-subscription end on
// a shared stream), and they are dropped on arrival. Safe to call more than once.
func (s *SharedSubscription) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}
