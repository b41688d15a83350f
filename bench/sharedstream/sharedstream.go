// Package sharedstream is the client side of the shared-stream ablation, a measurement aid
// (node/sharedstream; docs/protocol.md, appendix "Shared-stream ablation"): all subscriptions
// of a Stream travel on ONE QUIC stream of a client.Conn, so that benchmarks (bench/) can
// compare stream-per-subscription against the one-socket mapping of a TCP broker with the
// node, SDK connection and transport unchanged. It lives in the bench module so that it never
// becomes part of the SDK's API (it reaches the Conn through internal/clienthook); the node
// accepts it only with node.Config.AblationSharedStream.
package sharedstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/clienthook"
	"github.com/quicmq/quicmq/internal/wire"
)

// region marks the SUBSCRIBE frames of a shared stream (the node's constant).
const region = "~shared-stream"

// queueLen is how many records one subscription of a shared stream holds before the
// stream's reader waits for the application: the equivalent of a socket buffer. While it
// waits, the whole stream stops, and so does every other subscription on it.
const queueLen = 256

// Stream is one QUIC stream carrying many subscriptions: the ablation of QuicMQ's
// stream-per-subscription design. Its demux goroutine is the only reader of the stream and
// hands each record to its subscription's bounded queue, blocking while that queue is full
// (head-of-line blocking, on purpose). Writes (SUBSCRIBE, ACK) are serialised by wmu.
type Stream struct {
	c    *client.Conn
	s    *quic.Stream
	done chan struct{} // closed when the demux goroutine ended; err is then set

	wmu     sync.Mutex // guards the sending side and the fields below
	subs    []*Subscription
	waiting []chan error // Subscribe calls waiting for SUBSCRIBED, in order
	sent    bool         // FIN sent
	ackBuf  []byte

	err error // terminal; written by the demux goroutine before done is closed
}

// Subscription is one subscription of a Stream. Next must be called by one goroutine at a
// time; Ack and Close from any.
type Subscription struct {
	sh      *Stream
	pattern string
	q       chan item
	closed  chan struct{}
	once    sync.Once

	mu    sync.Mutex
	names map[string]uint64 // topic -> stream index, for Ack
}

type item struct {
	rec client.Record
	gap *client.GapError
}

// Open opens a shared stream on c. Its subscriptions end together when it is closed.
func Open(ctx context.Context, c *client.Conn) (*Stream, error) {
	s, err := clienthook.OpenStream(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("sharedstream: open: %w", err)
	}
	sh := &Stream{c: c, s: s, done: make(chan struct{})}
	go sh.demux()
	return sh, nil
}

// Subscribe adds a subscription to the shared stream and waits until the node confirmed it.
// The node authorizes it exactly as a subscription on a stream of its own and answers a
// refusal with the same error, which ends the shared stream. Region replays are not carried.
func (sh *Stream) Subscribe(ctx context.Context, pattern string, opts client.SubscribeOptions) (*Subscription, error) {
	if opts.Region != "" {
		return nil, fmt.Errorf("sharedstream: subscribe %q: %w", pattern, &client.Error{Code: client.CodeInvalidArgument, Message: "a shared stream carries no region replays"})
	}
	kind, value := clienthook.Start(opts.From)
	answer := make(chan error, 1)
	sh.wmu.Lock()
	if sh.sent {
		sh.wmu.Unlock()
		return nil, client.ErrClosed
	}
	sub := &Subscription{
		sh: sh, pattern: pattern,
		q: make(chan item, queueLen), closed: make(chan struct{}),
		names: make(map[string]uint64),
	}
	// RECORDS frames, as a subscription's own stream gets them from the SDK: the two modes
	// differ only in the stream mapping.
	req := &wire.Subscribe{Pattern: pattern, Start: kind, StartValue: value, Durable: opts.Durable, Region: region, Flags: wire.SubscribeRecords}
	_, err := sh.s.Write(wire.Append(nil, req))
	if err == nil {
		sh.subs = append(sh.subs, sub)
		sh.waiting = append(sh.waiting, answer)
	}
	sh.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("sharedstream: subscribe %q: %w", pattern, clienthook.StreamErr(sh.c, err))
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
		return nil, fmt.Errorf("sharedstream: subscribe %q: %w", pattern, err)
	}
	return sub, nil
}

// closeWait bounds how long Close waits for the node's FIN.
const closeWait = 2 * time.Second

// Close ends the shared stream and all its subscriptions. Like client.Subscription.Close it
// sends FIN and waits (at most two seconds) for the node's FIN, which follows the storing of
// every ACK sent before. Safe to call more than once.
func (sh *Stream) Close() error {
	sh.wmu.Lock()
	if !sh.sent {
		sh.sent = true
		sh.s.Close()
	}
	subs := sh.subs
	sh.wmu.Unlock()
	for _, s := range subs {
		s.Close() // records still arriving are dropped
	}
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-sh.done:
	case <-t.C:
	}
	sh.s.CancelRead(wire.AppCancelled)
	<-sh.done
	return nil
}

func protocolErr(format string, args ...any) error {
	return &client.Error{Code: client.CodeProtocol, Message: fmt.Sprintf(format, args...)}
}

// demux is the stream's only reader. It ends at the stream's end or failure, recording why.
func (sh *Stream) demux() {
	r := wire.NewReader(sh.s, clienthook.Limits(sh.c))
	topics := make(map[uint64]string)
	err := func() error {
		for {
			f, err := r.Read()
			if err != nil {
				return err
			}
			switch f := f.(type) {
			case *wire.Subscribed:
				sh.wmu.Lock()
				if len(sh.waiting) == 0 {
					sh.wmu.Unlock()
					return protocolErr("SUBSCRIBED with no SUBSCRIBE waiting on the shared stream")
				}
				w := sh.waiting[0]
				sh.waiting = sh.waiting[1:]
				sh.wmu.Unlock()
				w <- nil
			case *wire.Topic:
				sub := sh.sub(f.Index)
				if sub == nil {
					return protocolErr("TOPIC of unknown shared subscription %d", f.Index>>32)
				}
				topics[f.Index] = f.Name
				sub.mu.Lock()
				sub.names[f.Name] = f.Index
				sub.mu.Unlock()
			case *wire.Record:
				name, ok := topics[f.Index]
				if !ok {
					return protocolErr("RECORD for topic index %d before its TOPIC", f.Index)
				}
				sh.sub(f.Index).put(item{rec: record(name, f)})
			case *wire.Records:
				name, ok := topics[f.Index]
				if !ok {
					return protocolErr("RECORDS for topic index %d before its TOPIC", f.Index)
				}
				sub := sh.sub(f.Index)
				for i := range f.Records {
					sub.put(item{rec: record(name, &f.Records[i])})
				}
			case *wire.Gap:
				name, ok := topics[f.Index]
				if !ok {
					return protocolErr("GAP for topic index %d before its TOPIC", f.Index)
				}
				sh.sub(f.Index).put(item{gap: &client.GapError{Topic: name, From: f.From, To: f.To}})
			case *wire.ErrorFrame:
				return fmt.Errorf("sharedstream: ended by the node: %w", &client.Error{Code: client.Code(f.Code), Message: f.Message})
			default:
				return protocolErr("the node sent %s on a shared stream", f.Type())
			}
		}
	}()
	sh.wmu.Lock()
	if sh.sent {
		err = client.ErrClosed
	} else if !errors.As(err, new(*client.Error)) {
		err = clienthook.StreamErr(sh.c, err)
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

// record copies f (whose bytes the reader reuses) into a client.Record of topic name.
func record(name string, f *wire.Record) client.Record {
	var hs []client.Header
	for _, h := range f.Headers {
		hs = append(hs, client.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
	}
	return client.Record{
		Topic: name, Offset: f.Offset, Time: time.Unix(0, f.Time),
		OriginRegion: f.OriginRegion, OriginOffset: f.OriginOffset,
		ProducerID: f.ProducerID, Sequence: f.Sequence,
		Headers: hs, Payload: append([]byte{}, f.Payload...),
	}
}

func (sh *Stream) sub(index uint64) *Subscription {
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
func (s *Subscription) put(it item) {
	select {
	case s.q <- it:
	case <-s.closed:
	}
}

// Next returns the next record of the subscription. A *client.GapError reports records
// lost to retention once; other errors end the subscription (client.ErrClosed after Close).
func (s *Subscription) Next(ctx context.Context) (client.Record, error) {
	select {
	case it := <-s.q:
		return it.result()
	default:
	}
	select {
	case it := <-s.q:
		return it.result()
	case <-s.closed:
		return client.Record{}, client.ErrClosed
	case <-s.sh.done:
		return client.Record{}, s.sh.err
	case <-ctx.Done():
		return client.Record{}, ctx.Err()
	}
}

func (it item) result() (client.Record, error) {
	if it.gap != nil {
		return client.Record{}, it.gap
	}
	return it.rec, nil
}

// Ack acknowledges, cumulatively, r and every earlier record of r.Topic on this
// subscription; for a durable consumer the node stores the position, as on a stream of its
// own.
func (s *Subscription) Ack(r client.Record) error {
	s.mu.Lock()
	idx, ok := s.names[r.Topic]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("sharedstream: ack: topic %q has no record on shared subscription %q", r.Topic, s.pattern)
	}
	sh := s.sh
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	if sh.sent {
		return client.ErrClosed
	}
	sh.ackBuf = wire.Append(sh.ackBuf[:0], &wire.Ack{Index: idx, Offset: r.Offset})
	if _, err := sh.s.Write(sh.ackBuf); err != nil {
		return fmt.Errorf("sharedstream: ack %s@%d: %w", r.Topic, r.Offset, clienthook.StreamErr(sh.c, err))
	}
	return nil
}

// Close stops delivering this subscription's records to the application; the node keeps
// sending them until the shared stream closes (the protocol has no per-subscription end on
// a shared stream), and they are dropped on arrival. Safe to call more than once.
func (s *Subscription) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}
