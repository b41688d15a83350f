package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

// Flush waits for the publishes issued before it, and only for those: publishes issued while
// it waits do not hold it.
func TestFlushWaitsForEarlierPublishesOnly(t *testing.T) {
	answer := make(chan int) // the fake answers this many more publishes, in order
	f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
		seqs := make(chan uint64, 1000)
		go func() { // ends when the stream does
			defer close(seqs)
			for fr := first; ; {
				for _, q := range publishSeqs(fr) {
					seqs <- q
				}
				var err error
				if fr, err = r.Read(); err != nil {
					return
				}
			}
		}()
		for n := range answer {
			for range n {
				q, ok := <-seqs
				if !ok {
					return
				}
				s.Write(wire.Append(nil, &wire.PublishAck{Seq: q, Offset: q - 1}))
			}
		}
	})
	t.Cleanup(func() { close(answer) }) // runs before the fake's cleanup, which waits for handle
	c := dialFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	publish := func(n int) []*Future {
		fs := make([]*Future, n)
		for i := range fs {
			var err error
			if fs[i], err = c.PublishAsync(ctx, Message{Topic: "t", Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		return fs
	}
	done := func(fs []*Future) (n int) {
		for _, f := range fs {
			select {
			case <-f.Done():
				n++
			default:
			}
		}
		return n
	}

	before := publish(50)
	sealed := c.flush.cur.Load()
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush(ctx) }()
	testlog.WaitFor(t, 10*time.Second, "Flush to seal its epoch", func() bool { return c.flush.cur.Load() != sealed })
	after := publish(50) // issued while Flush waits: never answered until later
	answer <- 50
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("Flush: %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("Flush did not return once the 50 publishes before it were answered (%d of them done)", done(before))
	}
	if n := done(before); n != 50 {
		t.Fatalf("Flush returned with %d of the 50 earlier publishes answered", n)
	}
	if n := done(after); n != 0 {
		t.Fatalf("%d of the later publishes answered; the fake answered none", n)
	}

	// A Flush now waits for the 50 unanswered ones: its ctx ends it first.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	err := c.Flush(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "client: flush: context deadline exceeded" {
		t.Fatalf("Flush with 50 unanswered publishes and a 50 ms context: %v", err)
	}
	answer <- 50
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := done(after); n != 50 {
		t.Fatalf("Flush returned with %d of 50 publishes answered", n)
	}
	// Nothing outstanding: Flush returns at once, and after Close too.
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("Flush after Close: %v", err)
	}
}
