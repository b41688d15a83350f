package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quicmq/quicmq/bench/sharedstream"
	"github.com/quicmq/quicmq/client"
)

// system is one broker under test, seen from the worker: a publisher connection and ONE
// subscriber connection carrying every subscription.
type system interface {
	// setup connects, creates the topics and makes one subscription per pattern (on
	// topicName(i), or "fan.>" for every topic). deliver is called for every record from one
	// goroutine per subscription; while it blocks, that subscription reads nothing more
	// (what a stalled application does).
	setup(ctx context.Context, patterns []string, deliver func(sub int, payload []byte)) error
	// publish sends one record to topic i without waiting for its ack.
	publish(ctx context.Context, i int, payload []byte) error
	// flush waits for the acks of every publish so far (where there are acks).
	flush(ctx context.Context) error
	// notes reports what the system did besides delivering (errors, drops).
	notes() []string
	close()
}

// Systems by name. "quicmq" is stream-per-subscription, "ablation" the same node and
// SDK connection with all subscriptions on one shared stream: the stream mapping of
// node/sharedstream, driven by bench/sharedstream (a measurement aid outside the SDK's API).
var systemNames = []string{"quicmq", "ablation", "nats", "jetstream"}

func brokerKind(sys string) (string, []string) {
	switch sys {
	case "quicmq", "ablation":
		return "quicmq", nil
	case "nats":
		return "nats", nil
	case "jetstream":
		return "nats", []string{"--jetstream"}
	case "jetstream-sync":
		return "nats", []string{"--jetstream", "--sync-always"}
	case "quic-only":
		return "quic-only", nil
	}
	return "", nil
}

func newSystem(sys, brokerDir string) (system, error) {
	switch sys {
	case "quicmq":
		return &quicmqSys{ca: filepath.Join(brokerDir, "data", "tls", "ca.pem")}, nil
	case "ablation":
		return &quicmqSys{ca: filepath.Join(brokerDir, "data", "tls", "ca.pem"), shared: true}, nil
	case "nats":
		return &natsSys{}, nil
	case "jetstream", "jetstream-sync":
		return &natsSys{js: true}, nil
	}
	return nil, fmt.Errorf("unknown system %q (want one of %v)", sys, systemNames)
}

func topicName(i int) string { return fmt.Sprintf("fan.%03d", i) }

// quicmqSys drives a QuicMQ node through the Go SDK.
type quicmqSys struct {
	ca      string
	shared  bool
	subAddr string // where the subscriber dials: the node, or a delaying relay in front of it

	pub, sub *client.Conn
	sh       *sharedstream.Stream
	futures  chan pending
	ackLat   []float64 // publish to ack, ms: owned by the ack goroutine until acked.Wait
	pubErrs  atomic.Int64
	acked    sync.WaitGroup
	wg       sync.WaitGroup
	once     sync.Once
}

func (q *quicmqSys) setup(ctx context.Context, patterns []string, deliver func(int, []byte)) error {
	n := len(patterns)
	var err error
	if q.pub, err = client.Dial(ctx, client.Options{CAFile: q.ca, Name: "bench-pub"}, quicmqAddr); err != nil {
		return err
	}
	subAddr := quicmqAddr
	if q.subAddr != "" {
		subAddr = q.subAddr
	}
	if q.sub, err = client.Dial(ctx, client.Options{CAFile: q.ca, Name: "bench-sub"}, subAddr); err != nil {
		return err
	}
	// Create the topics first, so that every subscription starts at their head.
	for i := range n {
		if _, err := q.pub.Publish(ctx, client.Message{Topic: topicName(i), Payload: []byte("warm-up")}); err != nil {
			return err
		}
	}
	if q.shared {
		if q.sh, err = sharedstream.Open(ctx, q.sub); err != nil {
			return err
		}
	}
	for i := range n {
		var next func(context.Context) (client.Record, error)
		if q.shared {
			s, err := q.sh.Subscribe(ctx, patterns[i], client.SubscribeOptions{From: client.Latest})
			if err != nil {
				return err
			}
			next = s.Next
		} else {
			s, err := q.sub.Subscribe(ctx, patterns[i], client.SubscribeOptions{From: client.Latest})
			if err != nil {
				return err
			}
			next = s.Next
		}
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			for {
				// No deadline: a cancellable context would cost a timer per blocking read;
				// closing the connection ends the loop.
				r, err := next(context.Background())
				if err != nil {
					return
				}
				deliver(i, r.Payload)
			}
		}()
	}
	q.futures = make(chan pending, 1<<16)
	q.acked.Add(1)
	go func() {
		defer q.acked.Done()
		for p := range q.futures {
			if _, err := p.f.Wait(context.Background()); err != nil {
				q.pubErrs.Add(1)
			}
			q.ackLat = append(q.ackLat, float64(time.Since(p.t))/1e6)
		}
	}()
	return nil
}

func (q *quicmqSys) publish(ctx context.Context, i int, payload []byte) error {
	t := time.Now()
	f, err := q.pub.PublishAsync(ctx, client.Message{Topic: topicName(i), Payload: payload})
	if err != nil {
		return err
	}
	q.futures <- pending{f, t}
	return nil
}

func (q *quicmqSys) flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		// A marker publish: acks come in order per stream, so its ack follows all others.
		f, err := q.pub.PublishAsync(ctx, client.Message{Topic: topicName(0) + ".flush", Payload: []byte{0}})
		if err == nil {
			f.Wait(ctx)
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notes reports failed publishes and the publish-to-ack latency (the durable commit path:
// a record is delivered only after it), which tells the node's commit stalls from the
// network's. Called after close.
func (q *quicmqSys) notes() []string {
	var out []string
	if n := q.pubErrs.Load(); n > 0 {
		out = append(out, fmt.Sprintf("%d publishes failed", n))
	}
	if l := q.ackLat; len(l) > 0 {
		slices.Sort(l)
		at := func(f float64) float64 { return l[int(f*float64(len(l)-1))] }
		out = append(out, fmt.Sprintf("publish-to-ack ms: p50 %.2f p99 %.1f max %.1f", at(0.5), at(0.99), l[len(l)-1]))
	}
	return out
}

type pending struct {
	f *client.Future
	t time.Time
}

func (q *quicmqSys) close() { q.once.Do(q.closeOnce) }

func (q *quicmqSys) closeOnce() {
	if q.futures != nil {
		close(q.futures)
		q.acked.Wait()
	}
	if q.sh != nil {
		q.sh.Close()
	}
	if q.sub != nil {
		q.sub.Close()
	}
	if q.pub != nil {
		q.pub.Close()
	}
	q.wg.Wait()
}

// natsSys drives NATS core (plain TCP) or JetStream push consumers through nats.go.
type natsSys struct {
	js bool

	pub, sub *nats.Conn
	jctx     nats.JetStreamContext
	subs     []*nats.Subscription
	mu       sync.Mutex
	errs     map[string]int
	dropped  []string     // per-subscription drops, read before the subscriptions close
	cbMu     sync.RWMutex // held (read) by handlers while they deliver
	closed   bool         // under cbMu: handlers deliver nothing more
	once     sync.Once
}

func (s *natsSys) onErr(_ *nats.Conn, _ *nats.Subscription, err error) {
	s.mu.Lock()
	s.errs[err.Error()]++
	s.mu.Unlock()
}

func (s *natsSys) setup(ctx context.Context, patterns []string, deliver func(int, []byte)) error {
	n := len(patterns)
	s.errs = make(map[string]int)
	var err error
	if s.pub, err = nats.Connect("nats://"+natsAddr, nats.Name("bench-pub"), nats.ErrorHandler(s.onErr)); err != nil {
		return err
	}
	if s.sub, err = nats.Connect("nats://"+natsAddr, nats.Name("bench-sub"), nats.ErrorHandler(s.onErr)); err != nil {
		return err
	}
	var sjs nats.JetStreamContext
	if s.js {
		if s.jctx, err = s.pub.JetStream(nats.PublishAsyncMaxPending(1024)); err != nil {
			return err
		}
		if _, err = s.jctx.AddStream(&nats.StreamConfig{Name: "FAN", Subjects: []string{"fan.>"}, Storage: nats.FileStorage}); err != nil {
			return err
		}
		if sjs, err = s.sub.JetStream(); err != nil {
			return err
		}
	}
	for i := range n {
		cb := func(m *nats.Msg) {
			// nats.go may still run a handler after Unsubscribe: closeOnce waits for it.
			s.cbMu.RLock()
			defer s.cbMu.RUnlock()
			if !s.closed {
				deliver(i, m.Data)
			}
		}
		var sub *nats.Subscription
		if s.js {
			sub, err = sjs.Subscribe(patterns[i], cb, nats.DeliverNew(), nats.AckNone())
		} else {
			sub, err = s.sub.Subscribe(patterns[i], cb)
		}
		if err != nil {
			return err
		}
		s.subs = append(s.subs, sub)
	}
	return s.sub.FlushWithContext(ctx)
}

func (s *natsSys) publish(ctx context.Context, i int, payload []byte) error {
	if s.js {
		// Wait for room in the window of 1024 unanswered publishes (QuicMQ's client
		// blocks the same way) instead of failing after nats.go's default 200 ms.
		_, err := s.jctx.PublishAsync(topicName(i), payload, nats.StallWait(time.Minute))
		return err
	}
	return s.pub.Publish(topicName(i), payload)
}

func (s *natsSys) flush(ctx context.Context) error {
	if s.js {
		select {
		case <-s.jctx.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.pub.FlushWithContext(ctx)
}

func (s *natsSys) notes() []string {
	var out []string
	s.mu.Lock()
	for e, n := range s.errs {
		out = append(out, fmt.Sprintf("%d x client error: %s", n, e))
	}
	s.mu.Unlock()
	return append(out, s.dropped...)
}

func (s *natsSys) close() { s.once.Do(s.closeOnce) }

func (s *natsSys) closeOnce() {
	for i, sub := range s.subs {
		if d, err := sub.Dropped(); err == nil && d > 0 {
			s.dropped = append(s.dropped, fmt.Sprintf("subscription %d: %d messages dropped by the client library (slow consumer)", i, d))
		}
		if n, b, err := sub.Pending(); err == nil && n > 1000 {
			s.dropped = append(s.dropped, fmt.Sprintf("subscription %d: %d messages (%d MiB) still queued in the client library", i, n, b>>20))
		}
	}
	for _, sub := range s.subs {
		sub.Unsubscribe()
	}
	s.cbMu.Lock() // waits for handlers inside deliver (the caller released stalled ones)
	s.closed = true
	s.cbMu.Unlock()
	if s.sub != nil {
		s.sub.Close()
	}
	if s.pub != nil {
		s.pub.Close()
	}
}
