package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// The frame reader keeps a partial frame across a cancelled wait and returns frames already
// buffered even with a done context.
func TestFrameReaderResumesAfterCancel(t *testing.T) {
	release := make(chan struct{})
	rec := &wire.Record{Index: 0, Offset: 9, Payload: bytes.Repeat([]byte("p"), 100<<10)}
	f := newFakeNode(t, func(s *quic.Stream, _ *wire.Reader, first wire.Frame) {
		b := wire.Append(nil, &wire.Subscribed{})
		b = wire.Append(b, &wire.Topic{Index: 0, Name: "t"})
		whole := wire.Append(nil, rec)
		s.Write(append(b, whole[:3]...)) // stop inside the record's header
		<-release
		s.Write(whole[3 : 50<<10])
		time.Sleep(20 * time.Millisecond) // so that the rest comes in another read: the split is what is under test
		s.Write(whole[50<<10:])
		small := &wire.Record{Index: 0, Offset: 10, Payload: []byte("small")}
		s.Write(wire.Append(wire.Append(nil, small), small))
		s.Close()
	})
	c := dialFake(t, f)
	sub, err := c.Subscribe(context.Background(), "t", SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := sub.Next(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next with nothing to read: %v", err)
		}
	}
	close(release)
	r, err := sub.Next(context.Background())
	if err != nil || r.Topic != "t" || r.Offset != 9 || !bytes.Equal(r.Payload, rec.Payload) {
		t.Fatalf("record after resume: %v, offset %d, %d bytes", err, r.Offset, len(r.Payload))
	}
	// The last two records arrive in one write, so one read buffers both: then even a done
	// context gets the second. Nothing the test can see says the write has arrived: give it
	// time.
	time.Sleep(100 * time.Millisecond)
	if r, err = sub.Next(context.Background()); err != nil || string(r.Payload) != "small" {
		t.Fatalf("first small record: %v %q", err, r.Payload)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if r, err = sub.Next(done); err != nil || string(r.Payload) != "small" {
		t.Fatalf("buffered record with a done context: %v %q", err, r.Payload)
	}
	_, err = sub.Next(context.Background())
	if !errors.Is(err, io.EOF) {
		t.Fatalf("after the node's FIN: %v", err)
	}
	if _, again := sub.Next(context.Background()); again != err {
		t.Fatalf("terminal error not sticky: %v then %v", err, again)
	}
	sub.Close()
}

// Next watches the context of its reads once, not once per read: reads that wait for each
// record with one context register it once; another context replaces it, and still
// interrupts a read; a read without a deadline drops the watch.
func TestFrameReaderWatchesOneContext(t *testing.T) {
	more := make(chan struct{})
	f := newFakeNode(t, func(s *quic.Stream, _ *wire.Reader, first wire.Frame) {
		s.Write(wire.Append(wire.Append(nil, &wire.Subscribed{}), &wire.Topic{Index: 0, Name: "t"}))
		for off := uint64(0); ; off++ {
			if _, ok := <-more; !ok {
				s.Close()
				return
			}
			s.Write(wire.Append(nil, &wire.Record{Index: 0, Offset: off, Payload: []byte("p")}))
		}
	})
	c := dialFake(t, f)
	sub, err := c.Subscribe(context.Background(), "t", SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(ctx context.Context, want uint64) {
		t.Helper()
		more <- struct{}{}
		if r, err := sub.Next(ctx); err != nil || r.Offset != want {
			t.Fatalf("Next: offset %d, %v; want offset %d", r.Offset, err, want)
		}
	}
	a, cancelA := context.WithCancel(context.Background())
	for off := range uint64(20) {
		next(a, off)
	}
	if w := sub.fr.watches; w != 1 {
		t.Fatalf("20 reads with one context watched %d contexts, want 1", w)
	}
	b, cancelB := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelB()
	if _, err := sub.Next(b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with another context and nothing to read: %v", err)
	}
	if w := sub.fr.watches; w != 2 {
		t.Fatalf("after a read with another context: %d contexts watched, want 2", w)
	}
	next(context.Background(), 20)
	if sub.fr.stop != nil {
		t.Fatal("a read without a deadline left a context watched")
	}
	cancelA() // no longer watched: nothing to interrupt
	next(context.Background(), 21)
	close(more)
	sub.Close()
}

// A misbehaving node's answers are protocol errors; out-of-order publish acks fail every
// pending future, and the next publish uses a new stream.
func TestPublishProtocolErrors(t *testing.T) {
	streams := make(chan *quic.Stream, 4)
	f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
		streams <- s
		// The two publishes come in one PUBLISH_BATCH or in two frames.
		seqs := readPublishSeqs(r, first, 2)
		if seqs == nil {
			return
		}
		// Answer the second publish first.
		s.Write(wire.Append(nil, &wire.PublishAck{Seq: seqs[1], Offset: 1}))
		s.Write(wire.Append(nil, &wire.PublishAck{Seq: seqs[0], Offset: 0}))
		io.Copy(io.Discard, s)
	})
	f.maxVersion.Store(3) // answers in order: an answer out of order is a protocol error
	c := dialFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f1, f2 := publishTwo(ctx, t, c)
	for _, fut := range []*Future{f1, f2} {
		_, err := fut.Wait(ctx)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeProtocol || !strings.Contains(err.Error(), "answered publish 2, expected 1") {
			t.Fatalf("out of order ack: %v", err)
		}
	}
	<-streams
	// The failed stream is replaced.
	if _, err := c.PublishAsync(ctx, Message{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-streams:
	case <-time.After(5 * time.Second):
		t.Fatal("no new publish stream")
	}
	// Limits from WELCOME are enforced before sending.
	_, err := c.PublishAsync(ctx, Message{Topic: "t", Payload: make([]byte, 200<<10+1)})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeTooLarge || !strings.Contains(err.Error(), "limit of 204800") {
		t.Fatalf("payload over WELCOME's max: %v", err)
	}
}

// PUBLISH_ACKS resolves a run of futures at consecutive offsets with one time, in order, and
// mixes with PUBLISH_ACK on the same stream.
func TestPublishAcksResolveRuns(t *testing.T) {
	f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
		seqs := publishSeqs(first)
		for len(seqs) < 5 {
			f, err := r.Read()
			if err != nil {
				return
			}
			seqs = append(seqs, publishSeqs(f)...)
		}
		var b []byte
		b = wire.Append(b, &wire.PublishAcks{Seq: seqs[0], Count: 3, Offset: 100, Time: 42})
		b = wire.Append(b, &wire.PublishAck{Seq: seqs[3], Offset: 7, Time: 43})
		b = wire.Append(b, &wire.PublishAcks{Seq: seqs[4], Count: 1, Offset: 9, Time: 44})
		s.Write(b)
		io.Copy(io.Discard, s)
	})
	c := dialFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var futures []*Future
	for i := range 5 {
		fut, err := c.PublishAsync(ctx, Message{Topic: "t", Payload: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, fut)
	}
	want := []struct {
		off uint64
		tm  int64
	}{{100, 42}, {101, 42}, {102, 42}, {7, 43}, {9, 44}}
	for i, fut := range futures {
		ack, err := fut.Wait(ctx)
		if err != nil || ack.Offset != want[i].off || ack.Time.UnixNano() != want[i].tm || ack.Topic != "t" {
			t.Fatalf("publish %d: %+v, %v; want offset %d time %d", i, ack, err, want[i].off, want[i].tm)
		}
	}
}

// A connection the node closes with an application error code surfaces as that code on every
// operation, and a Future pending at that moment fails naming the connection.
func TestConnectionLossFailsFutures(t *testing.T) {
	got := make(chan struct{}, 1)
	f := newFakeNode(t, func(s *quic.Stream, _ *wire.Reader, first wire.Frame) {
		got <- struct{}{}
		io.Copy(io.Discard, s) // never answers
	})
	c := dialFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fut, err := c.PublishAsync(ctx, Message{Topic: "t", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	<-got
	f.conn(0).CloseWithError(wire.AppShutdown, "node shutting down")
	select {
	case <-fut.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("pending future not failed after the connection was lost")
	}
	_, err = fut.Wait(ctx)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeShuttingDown || !strings.Contains(err.Error(), "connection to "+f.addr()+" lost") {
		t.Fatalf("future after connection loss: %v", err)
	}
	if _, err := c.Subscribe(ctx, "t", SubscribeOptions{}); !errors.As(err, &e) || e.Code != CodeShuttingDown {
		t.Fatalf("subscribe after connection loss: %v", err)
	}
}

// Dial fails clearly on a CA that did not sign the node's certificate and on a missing CA
// file, and a cancelled context ends a Dial that waits for WELCOME.
func TestDialErrors(t *testing.T) {
	f := newFakeNode(t, func(*quic.Stream, *wire.Reader, wire.Frame) {})
	other := newFakeNode(t, func(*quic.Stream, *wire.Reader, wire.Frame) {})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Dial(ctx, Options{CAFile: other.caFile}, f.addr())
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("wrong CA: %v", err)
	}
	_, err = Dial(ctx, Options{CAFile: "/nonexistent/ca.pem"}, f.addr())
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("missing CA file: %v", err)
	}
	_, err = Dial(ctx, Options{}, "no-port")
	if err == nil {
		t.Fatal("address without port accepted")
	}
}

func TestStartString(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for s, want := range map[Start]string{
		Earliest:                  "earliest",
		Latest:                    "latest",
		AtOffset(42):              "offset 42",
		AtTime(at):                "time 2025-01-02T03:04:05Z",
		AtTime(time.Unix(-10, 0)): "time 1970-01-01T00:00:00Z",
	} {
		if got := s.String(); got != want {
			t.Errorf("%#v: %q, want %q", s, got, want)
		}
	}
}

// Records are decoded in place from the frame reader's buffer, which the next frames
// overwrite: every delivered record must keep its own payload and header values, however
// many frames came after it and whatever the caller appends to them.
func TestDeliveredRecordsOwnTheirBytes(t *testing.T) {
	const n = 3000
	payload := func(i int) []byte {
		switch {
		case i%1000 == 7:
			return bytes.Repeat([]byte{byte(i)}, slabMax+1+i) // its own allocation
		case i%500 == 3:
			return nil
		}
		return []byte(strings.Repeat(string(rune('a'+i%26)), 1+i%200))
	}
	f := newFakeNode(t, func(s *quic.Stream, _ *wire.Reader, first wire.Frame) {
		b := wire.Append(nil, &wire.Subscribed{})
		b = wire.Append(b, &wire.Topic{Index: 0, Name: "t"})
		for i := range n {
			b = wire.Append(b, &wire.Record{
				Index: 0, Offset: uint64(i), OriginRegion: "eu", ProducerID: "p",
				Headers: []wire.Header{{Key: "h", Value: []byte{byte(i), byte(i >> 8)}}},
				Payload: payload(i),
			})
		}
		s.Write(b)
		s.Close()
	})
	c := dialFake(t, f)
	sub, err := c.Subscribe(context.Background(), "t", SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	recs := make([]Record, 0, n)
	for range n {
		r, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
		_ = append(r.Payload, "overwrite?"...) // must not reach the next record's bytes
	}
	for i, r := range recs {
		want := payload(i)
		if r.Offset != uint64(i) || !bytes.Equal(r.Payload, want) || r.Payload == nil ||
			r.OriginRegion != "eu" || r.ProducerID != "p" ||
			len(r.Headers) != 1 || !bytes.Equal(r.Headers[0].Value, []byte{byte(i), byte(i >> 8)}) {
			t.Fatalf("record %d changed after later reads: %+v", i, r)
		}
	}
}

// publishSeqs returns the seqs of the publishes a PUBLISH or PUBLISH_BATCH frame carries.
// readPublishSeqs reads the publishes of a stream from its first frame until it has n seqs
// (PUBLISH or PUBLISH_BATCH frames); nil if the stream ends first.
func readPublishSeqs(r *wire.Reader, first wire.Frame, n int) []uint64 {
	seqs := publishSeqs(first)
	for len(seqs) < n {
		f, err := r.Read()
		if err != nil {
			return nil
		}
		seqs = append(seqs, publishSeqs(f)...)
	}
	return seqs
}

func publishSeqs(f wire.Frame) []uint64 {
	switch f := f.(type) {
	case *wire.Publish:
		return []uint64{f.Seq}
	case *wire.PublishBatch:
		var seqs []uint64
		for _, p := range f.Publishes {
			seqs = append(seqs, p.Seq)
		}
		return seqs
	case *wire.PublishMulti:
		var seqs []uint64
		for _, p := range f.Publishes {
			seqs = append(seqs, p.Seq)
		}
		return seqs
	}
	return nil
}
