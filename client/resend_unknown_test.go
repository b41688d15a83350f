package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// A publish stream the node ends with ERROR 9 (the leader it relayed to went away: the
// outcome of every publish it did not answer is unknown) is, with Idempotent and Reconnect,
// published again on a new stream, in order, with the same producer and sequences, and every
// publish ends acknowledged; without them the unanswered ones fail with the outcome unknown.
func TestIdempotentResendAfterStreamEndedUnknown(t *testing.T) {
	var streams atomic.Int32
	type seen struct {
		producer string
		seq      uint64
	}
	var mu sync.Mutex
	stored := map[seen]uint64{} // what the fake node "appended", at which offset
	// publishes flattens a PUBLISH, PUBLISH_BATCH or PUBLISH_MULTI (whose publishes take Seq, Seq+1, ...).
	publishes := func(fr wire.Frame) []wire.Publish {
		switch f := fr.(type) {
		case *wire.Publish:
			return []wire.Publish{*f}
		case *wire.PublishBatch:
			out := make([]wire.Publish, len(f.Publishes))
			for i, p := range f.Publishes {
				p.Seq = f.Seq + uint64(i)
				out[i] = p
			}
			return out
		case *wire.PublishMulti:
			return f.Publishes // decoding numbered them
		}
		return nil
	}
	f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
		if publishes(first) == nil {
			s.Close()
			return
		}
		n := streams.Add(1)
		w := wire.NewWriter(s)
		store := func(p wire.Publish) (off uint64, dup bool) {
			mu.Lock()
			defer mu.Unlock()
			k := seen{p.ProducerID, p.Sequence}
			off, dup = stored[k]
			if !dup {
				off = uint64(len(stored))
				stored[k] = off
			}
			return off, dup
		}
		if n == 1 {
			// The first stream holds all five publishes before the leader goes away, however
			// the SDK framed them: each is stored, the first answered, the rest not. (A
			// publish the SDK had not yet written when the stream ended would rightly go on
			// a new stream, outcome known, so the test must not leave that to timing.)
			ps := publishes(first)
			for len(ps) < 5 {
				fr, err := r.Read()
				if err != nil {
					return
				}
				ps = append(ps, publishes(fr)...)
			}
			for _, p := range ps {
				store(p)
			}
			w.Write(&wire.PublishAck{Seq: ps[0].Seq, Offset: 0, Time: 1})
			w.Write(&wire.ErrorFrame{Code: wire.CodeUnavailable, Message: "the owner went away before answering: the outcome of every publish not yet answered on this stream is unknown"})
			w.Flush()
			s.Close()
			return
		}
		for fr := first; ; {
			ps := publishes(fr)
			if ps == nil {
				return
			}
			for _, p := range ps {
				off, dup := store(p)
				var flags uint64
				if dup {
					flags = wire.AckDuplicate
				}
				w.Write(&wire.PublishAck{Seq: p.Seq, Offset: off, Time: 1, Flags: flags})
				w.Flush()
			}
			var err error
			if fr, err = r.Read(); err != nil {
				return
			}
		}
	})
	for _, resend := range []bool{true, false} {
		streams.Store(0)
		mu.Lock()
		clear(stored)
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := Dial(ctx, Options{CAFile: f.caFile, Reconnect: resend, Idempotent: true}, f.addr())
		if err != nil {
			t.Fatal(err)
		}
		var fs []*Future
		for i := range 5 {
			fu, err := c.PublishAsync(ctx, Message{Topic: "t", Payload: []byte(fmt.Sprint(i))})
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, fu)
		}
		for i, fu := range fs {
			ack, err := fu.Wait(ctx)
			switch {
			case resend && (err != nil || ack.Offset != uint64(i)):
				t.Errorf("with Reconnect: publish %d: %+v, %v; want offset %d", i, ack, err, i)
			case !resend && i >= 1 && err == nil:
				t.Errorf("without Reconnect: publish %d acknowledged %+v after the stream ended", i, ack)
			}
		}
		if resend && streams.Load() < 2 {
			t.Errorf("with Reconnect: %d publish streams, want the publishes sent again on a second", streams.Load())
		}
		c.Close()
		cancel()
	}
}
