package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// A subscription the node ends as unavailable ("subscribe again": a durable's leader moved,
// a group moved with its topic) is made again by Next with Reconnect, and goes on; without
// Reconnect the error ends it.
func TestReconnectResubscribesWhenTheNodeSaysUnavailable(t *testing.T) {
	var subscribes atomic.Int32
	f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
		if _, ok := first.(*wire.Subscribe); !ok {
			s.Close()
			return
		}
		n := uint64(subscribes.Add(1))
		b := wire.Append(nil, &wire.Subscribed{})
		b = wire.Append(b, &wire.Topic{Index: 0, Name: "t"})
		b = wire.Append(b, &wire.Record{Index: 0, Offset: n - 1, Payload: []byte("r")})
		if n == 1 {
			b = wire.Append(b, &wire.ErrorFrame{Code: wire.CodeUnavailable, Message: `topic "t" is now led by node "b", no longer by "a": subscribe again`})
		}
		s.Write(b)
		if n == 1 {
			s.Close()
			return
		}
		r.Read() // until the client ends the stream
	})
	for _, reconnect := range []bool{true, false} {
		subscribes.Store(0)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := Dial(ctx, Options{CAFile: f.caFile, Reconnect: reconnect}, f.addr())
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Subscribe(ctx, "t", SubscribeOptions{Durable: "d"})
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := sub.Next(ctx); err != nil || rec.Offset != 0 {
			t.Fatalf("reconnect %v: first record %+v, %v", reconnect, rec, err)
		}
		rec, err := sub.Next(ctx)
		switch {
		case reconnect && (err != nil || rec.Offset != 1 || subscribes.Load() != 2):
			t.Fatalf("with Reconnect: %+v, %v after %d SUBSCRIBEs; want offset 1 from the second", rec, err, subscribes.Load())
		case !reconnect && !isCodeErr(err, CodeUnavailable):
			t.Fatalf("without Reconnect: %+v, %v; want the node's unavailable error", rec, err)
		}
		sub.Close()
		c.Close()
		cancel()
	}
}

// A Next whose context ends while it makes a subscription the node ended (shutting down)
// again returns the context's error, and the next Next goes on making it again: it does not
// read the FIN that followed the node's ERROR on the old stream as the node ending the
// subscription (seen in the rolling-upgrade campaign: a reader with 2 s Nexts lost its
// subscription to a node that took longer than that to stop).
func TestNextTimesOutWhileResubscribing(t *testing.T) {
	var subscribes atomic.Int32
	release := make(chan struct{})
	f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
		if _, ok := first.(*wire.Subscribe); !ok {
			s.Close()
			return
		}
		n := uint64(subscribes.Add(1))
		if n > 1 {
			<-release // a node still stopping: no answer
		}
		b := wire.Append(nil, &wire.Subscribed{})
		b = wire.Append(b, &wire.Topic{Index: 0, Name: "t"})
		if n == 1 {
			b = wire.Append(b, &wire.Record{Index: 0, Offset: 0, Payload: []byte("r")})
			b = wire.Append(b, &wire.ErrorFrame{Code: wire.CodeShuttingDown, Message: "node shutting down"})
			s.Write(b)
			s.Close()
			return
		}
		b = wire.Append(b, &wire.Record{Index: 0, Offset: 1, Payload: []byte("r")})
		s.Write(b)
		r.Read() // until the client ends the stream
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the fake node's, which waits for its handlers
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, Options{CAFile: f.caFile, Reconnect: true}, f.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "t", SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if rec, err := sub.Next(ctx); err != nil || rec.Offset != 0 {
		t.Fatalf("first record %+v, %v", rec, err)
	}
	for i := range 2 {
		short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := sub.Next(short)
		cancelShort()
		if short.Err() == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next %d while the node does not answer: %v, want its context's deadline", i, err)
		}
	}
	unblock()
	if rec, err := sub.Next(ctx); err != nil || rec.Offset != 1 {
		t.Fatalf("Next once the node answers: %+v, %v; want offset 1", rec, err)
	}
}
