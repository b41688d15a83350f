package main

// The clients of the one-topic fan-out scenarios (truefanout, hetero): one publisher
// connection and S subscriptions of ONE topic spread evenly over C subscriber connections,
// for QuicMQ (a QUIC stream per subscription), NATS core, JetStream (an ephemeral push
// consumer per subscription, no acks, as in the fanout scenario) and the bare quic-go bound
// under QuicMQ ("quic-only", fanfloor.go).

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quicmq/quicmq/client"
)

// fanTopic is the one topic every subscription reads.
const fanTopic = "tf.one"

var fanSystemNames = []string{"quicmq", "nats", "jetstream", "quic-only"}

// fanSys is one broker seen by the one-topic scenarios.
type fanSys interface {
	// connect dials the publisher and conns subscriber connections (connection c dials
	// addr(c), the broker or a delaying relay in front of it), and makes subs subscriptions
	// of fanTopic, subscription i on connection i % conns, each starting at the head.
	// deliver is called for every record from the subscription's own goroutine.
	connect(ctx context.Context, subs, conns int, addr func(c int) string, deliver func(conn, sub int, payload []byte)) error
	// publish sends one record to fanTopic without waiting for its ack.
	publish(ctx context.Context, payload []byte) error
	// notes reports what the system did besides delivering (errors, drops). After close.
	notes() []string
	close()
}

// startFan starts the broker of sys as this process's child, with the broker command's
// arguments more (e.g. --cpuprofile) after its own, and the clients' fanSys for it; stop ends
// both.
func startFan(sys string, more ...string) (b *brokerProc, f fanSys, stop func(), err error) {
	kind, extra := brokerKind(sys)
	extra = append(extra, more...)
	if kind == "" {
		return nil, nil, nil, fmt.Errorf("unknown system %q (want one of %v)", sys, fanSystemNames)
	}
	if b, err = startBroker(kind, extra...); err != nil {
		return nil, nil, nil, err
	}
	if f, err = newFanSys(sys, b.dir); err != nil {
		b.stop()
		return nil, nil, nil, err
	}
	return b, f, func() { f.close(); b.stop() }, nil
}

func newFanSys(sys, brokerDir string) (fanSys, error) {
	switch sys {
	case "quicmq":
		return &quicmqFan{ca: filepath.Join(brokerDir, "data", "tls", "ca.pem")}, nil
	case "nats":
		return &natsFan{}, nil
	case "jetstream":
		return &natsFan{js: true}, nil
	case "quic-only":
		return &floorFan{caDir: floorCADir(brokerDir)}, nil
	}
	return nil, fmt.Errorf("unknown system %q (want one of %v)", sys, fanSystemNames)
}

type quicmqFan struct {
	ca      string
	pub     *client.Conn
	subs    []*client.Conn
	futures chan *client.Future
	pubErrs atomic.Int64
	acked   sync.WaitGroup
	wg      sync.WaitGroup
	once    sync.Once
}

func (q *quicmqFan) connect(ctx context.Context, subs, conns int, addr func(int) string, deliver func(int, int, []byte)) error {
	var err error
	if q.pub, err = client.Dial(ctx, client.Options{CAFile: q.ca, Name: "fan-pub"}, quicmqAddr); err != nil {
		return err
	}
	// Create the topic first, so that every subscription starts at its head.
	if _, err := q.pub.Publish(ctx, client.Message{Topic: fanTopic, Payload: []byte("warm-up")}); err != nil {
		return err
	}
	for c := range conns {
		sc, err := client.Dial(ctx, client.Options{CAFile: q.ca, Name: fmt.Sprintf("fan-sub-%d", c)}, addr(c))
		if err != nil {
			return fmt.Errorf("subscriber connection %d: %w", c, err)
		}
		q.subs = append(q.subs, sc)
	}
	for i := range subs {
		c := i % conns
		s, err := q.subs[c].Subscribe(ctx, fanTopic, client.SubscribeOptions{From: client.Latest})
		if err != nil {
			return fmt.Errorf("subscription %d: %w", i, err)
		}
		q.wg.Go(func() {
			for {
				// No deadline: closing the connection ends the loop.
				r, err := s.Next(context.Background())
				if err != nil {
					return
				}
				deliver(c, i, r.Payload)
			}
		})
	}
	q.futures = make(chan *client.Future, 1<<16)
	q.acked.Go(func() {
		for f := range q.futures {
			if _, err := f.Wait(context.Background()); err != nil {
				q.pubErrs.Add(1)
			}
		}
	})
	return nil
}

func (q *quicmqFan) publish(ctx context.Context, payload []byte) error {
	f, err := q.pub.PublishAsync(ctx, client.Message{Topic: fanTopic, Payload: payload})
	if err != nil {
		return err
	}
	q.futures <- f
	return nil
}

func (q *quicmqFan) notes() []string {
	if n := q.pubErrs.Load(); n > 0 {
		return []string{fmt.Sprintf("%d publishes failed", n)}
	}
	return nil
}

func (q *quicmqFan) close() {
	q.once.Do(func() {
		if q.futures != nil {
			close(q.futures)
			q.acked.Wait()
		}
		for _, c := range q.subs {
			c.Close()
		}
		if q.pub != nil {
			q.pub.Close()
		}
		q.wg.Wait()
	})
}

type natsFan struct {
	js   bool
	pub  *nats.Conn
	jctx nats.JetStreamContext
	subs []*nats.Conn
	all  []*nats.Subscription

	mu      sync.Mutex
	errs    map[string]int
	dropped []string
	cbMu    sync.RWMutex // held (read) by handlers while they deliver
	closed  bool         // under cbMu
	once    sync.Once
}

func (s *natsFan) onErr(_ *nats.Conn, _ *nats.Subscription, err error) {
	s.mu.Lock()
	s.errs[err.Error()]++
	s.mu.Unlock()
}

func (s *natsFan) connect(ctx context.Context, subs, conns int, addr func(int) string, deliver func(int, int, []byte)) error {
	s.errs = make(map[string]int)
	var err error
	if s.pub, err = nats.Connect("nats://"+natsAddr, nats.Name("fan-pub"), nats.ErrorHandler(s.onErr)); err != nil {
		return err
	}
	if s.js {
		if s.jctx, err = s.pub.JetStream(nats.PublishAsyncMaxPending(1024)); err != nil {
			return err
		}
		if _, err = s.jctx.AddStream(&nats.StreamConfig{Name: "TF", Subjects: []string{"tf.>"}, Storage: nats.FileStorage}); err != nil {
			return err
		}
	}
	jss := make([]nats.JetStreamContext, conns)
	for c := range conns {
		nc, err := nats.Connect("nats://"+addr(c), nats.Name(fmt.Sprintf("fan-sub-%d", c)), nats.ErrorHandler(s.onErr))
		if err != nil {
			return fmt.Errorf("subscriber connection %d: %w", c, err)
		}
		s.subs = append(s.subs, nc)
		if s.js {
			if jss[c], err = nc.JetStream(); err != nil {
				return err
			}
		}
	}
	for i := range subs {
		c := i % conns
		cb := func(m *nats.Msg) {
			s.cbMu.RLock()
			defer s.cbMu.RUnlock()
			if !s.closed {
				deliver(c, i, m.Data)
			}
		}
		var sub *nats.Subscription
		if s.js {
			sub, err = jss[c].Subscribe(fanTopic, cb, nats.DeliverNew(), nats.AckNone())
		} else {
			sub, err = s.subs[c].Subscribe(fanTopic, cb)
		}
		if err != nil {
			return fmt.Errorf("subscription %d: %w", i, err)
		}
		s.all = append(s.all, sub)
	}
	for _, nc := range s.subs {
		if err := nc.FlushWithContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (s *natsFan) publish(ctx context.Context, payload []byte) error {
	if s.js {
		_, err := s.jctx.PublishAsync(fanTopic, payload, nats.StallWait(time.Minute))
		return err
	}
	return s.pub.Publish(fanTopic, payload)
}

func (s *natsFan) notes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for e, n := range s.errs {
		out = append(out, fmt.Sprintf("%d x client error: %s", n, e))
	}
	return append(out, s.dropped...)
}

func (s *natsFan) close() {
	s.once.Do(func() {
		var dropped int
		for _, sub := range s.all {
			if d, err := sub.Dropped(); err == nil {
				dropped += d
			}
			sub.Unsubscribe()
		}
		s.mu.Lock()
		if dropped > 0 {
			s.dropped = append(s.dropped, fmt.Sprintf("%d messages dropped by the client library (slow consumer)", dropped))
		}
		s.mu.Unlock()
		s.cbMu.Lock()
		s.closed = true
		s.cbMu.Unlock()
		for _, nc := range s.subs {
			nc.Close()
		}
		if s.pub != nil {
			s.pub.Close()
		}
	})
}
