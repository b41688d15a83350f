package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// On a connection of version 4 the client opens each publish stream with PUBLISH_OPEN (any
// order) and matches answers by seq: a node that answers pipelined publishes in a shuffled
// order (seeded, printed) resolves each future with its own offset; a version-3 node is sent
// no PUBLISH_OPEN.
func TestAnyOrderAnswersResolveBySeq(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const n = 200
	f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
		seqs := readPublishSeqs(r, first, n)
		if seqs == nil {
			return
		}
		// The offset of a publish is its seq - 1: Publish k gets offset k.
		rng.Shuffle(len(seqs), func(i, j int) { seqs[i], seqs[j] = seqs[j], seqs[i] })
		w := wire.NewWriter(s)
		for _, seq := range seqs {
			w.Write(&wire.PublishAck{Seq: seq, Offset: seq - 1})
		}
		w.Flush()
		io.Copy(io.Discard, s)
	})
	c := dialFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var fs []*Future
	for i := range n {
		fut, err := c.PublishAsync(ctx, Message{Topic: fmt.Sprintf("t%d", i%7), Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, fut)
	}
	for k, fut := range fs {
		a, err := fut.Wait(ctx)
		if err != nil || a.Offset != uint64(k) {
			t.Fatalf("publish %d: %+v, %v; want offset %d", k, a, err, k)
		}
	}
	if got := f.opens.Load(); got != 1 {
		t.Fatalf("%d publish streams began with PUBLISH_OPEN, want 1", got)
	}
}

// An answer to a publish that was not sent, or a second answer to one, is a protocol error
// on a stream answered in any order too.
func TestAnyOrderBadAnswers(t *testing.T) {
	for _, bad := range []string{"unsent", "twice"} {
		t.Run(bad, func(t *testing.T) {
			f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
				seqs := readPublishSeqs(r, first, 2)
				if seqs == nil {
					return
				}
				w := wire.NewWriter(s)
				w.Write(&wire.PublishAck{Seq: seqs[1], Offset: 1})
				if bad == "twice" {
					w.Write(&wire.PublishAck{Seq: seqs[1], Offset: 1})
				} else {
					w.Write(&wire.PublishAck{Seq: seqs[1] + 5, Offset: 7})
				}
				w.Flush()
				io.Copy(io.Discard, s)
			})
			c := dialFake(t, f)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			f1, f2 := publishTwo(ctx, t, c)
			if a, err := f2.Wait(ctx); err != nil || a.Offset != 1 {
				t.Fatalf("the second publish, answered first: %+v, %v", a, err)
			}
			_, err := f1.Wait(ctx)
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeProtocol || !strings.Contains(err.Error(), "the node answered publish") {
				t.Fatalf("the first publish after a bad answer: %v, want a protocol error", err)
			}
		})
	}
}

// publishTwo publishes records "1" and "2" to topic t, pipelined, and returns their Futures.
func publishTwo(ctx context.Context, t *testing.T, c *Conn) (f1, f2 *Future) {
	t.Helper()
	var err error
	if f1, err = c.PublishAsync(ctx, Message{Topic: "t", Payload: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if f2, err = c.PublishAsync(ctx, Message{Topic: "t", Payload: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	return f1, f2
}
