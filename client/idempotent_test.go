package client_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// readTopic reads every record of topic from offset 0 (count of them).
func readTopic(t *testing.T, c *client.Conn, topic string, count int) []client.Record {
	t.Helper()
	sub, err := c.Subscribe(testCtx(t), topic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	recs := nextN(t, sub, count)
	expectQuiet(t, sub, 300*time.Millisecond)
	return recs
}

// TestIdempotentResendAcrossRestart: a Conn with Idempotent and Reconnect publishes
// pipelined while its node is stopped and started again on the same data and address. No
// future fails: those in flight are resent on the new connection in order, and the node
// answers what it had stored with the original offset (Ack.Duplicate). Every record is in
// the log exactly once, in publish order, at the offset its ack names.
func TestIdempotentResendAcrossRestart(t *testing.T) {
	data := t.TempDir()
	n, stop := nodetest.Start(t, func(c *node.Config) { c.DataDir = data })
	addr := n.Addr().String()
	ctx := testCtx(t)
	c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), Reconnect: true, Idempotent: true, Name: t.Name()}, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	const total, topic = 6000, "idem.restart"
	futures := make(chan *client.Future, total)
	var acked, issued atomic.Int64
	go func() {
		defer close(futures)
		for i := range total {
			f, err := c.PublishAsync(ctx, client.Message{Topic: topic, Payload: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
			futures <- f
			issued.Add(1)
			if i%500 == 0 && !testlog.Pause(ctx, 5*time.Millisecond) { // spread the publishes over the restart
				return
			}
		}
	}()
	acks := make([]client.Ack, 0, total)
	waitDone := make(chan error, 1)
	go func() {
		for f := range futures {
			a, err := f.Wait(ctx)
			if err != nil {
				waitDone <- fmt.Errorf("future %d: %w", len(acks), err)
				return
			}
			acks = append(acks, a)
			acked.Add(1)
		}
		waitDone <- nil
	}()
	testlog.WaitFor(t, 30*time.Second, "a quarter of the acks", func() bool { return acked.Load() >= total/4 })
	stop()
	atStop := issued.Load()
	t.Logf("node stopped after %d acks", acked.Load())
	// Publishes pile up behind the outage until the Conn's window of unanswered ones is full
	// and PublishAsync blocks.
	last, since := atStop, time.Now()
	testlog.WaitFor(t, 30*time.Second, "publishes to pile up behind the outage", func() bool {
		if n := issued.Load(); n != last {
			last, since = n, time.Now()
		}
		return last >= min(atStop+500, total) || time.Since(since) > 100*time.Millisecond
	})
	n2, _ := nodetest.Start(t, func(c *node.Config) { c.DataDir, c.Listen = data, addr })
	if err := <-waitDone; err != nil {
		t.Fatal(err)
	}
	dups := 0
	for _, a := range acks {
		if a.Duplicate {
			dups++
		}
	}
	t.Logf("%d acks, %d of them duplicates of an earlier attempt", len(acks), dups)
	if d := n2.Log().Stats().Duplicates; d != uint64(dups) {
		t.Fatalf("the node answered %d duplicates, the client saw %d", d, dups)
	}

	recs := readTopic(t, c, topic, total)
	for off, r := range recs {
		if r.Offset != uint64(off) || string(r.Payload) != strconv.Itoa(off) {
			t.Fatalf("record at %d is %q (offset %d), want %d: lost, duplicated or reordered", off, r.Payload, r.Offset, off)
		}
	}
	for i, a := range acks {
		if a.Offset != uint64(i) {
			t.Fatalf("publish %d acked at offset %d (duplicate %t)", i, a.Offset, a.Duplicate)
		}
	}
}

// TestIdempotentExplicitRetry: a Message with its own ProducerID and Sequence published again
// on another connection, and again after a restart of the node, is answered as a duplicate
// with the original offset and time; duplicates inside one pipelined run (one PUBLISH_BATCH)
// are each answered with their own offset. An idempotent Conn numbers its publishes itself.
func TestIdempotentExplicitRetry(t *testing.T) {
	data := t.TempDir()
	n, stop := nodetest.Start(t, func(c *node.Config) { c.DataDir = data })
	addr := n.Addr().String()
	ctx := testCtx(t)
	a, b := dial(t, &testNode{Node: n}), dial(t, &testNode{Node: n})
	msg := func(seq uint64, payload string) client.Message {
		return client.Message{Topic: "idem.x", ProducerID: "explicit", Sequence: seq, Payload: []byte(payload)}
	}
	first, err := a.Publish(ctx, msg(7, "seven"))
	if err != nil || first.Duplicate {
		t.Fatalf("first publish: %+v %v", first, err)
	}
	again, err := b.Publish(ctx, msg(7, "seven-again"))
	if err != nil || !again.Duplicate || again.Offset != first.Offset || !again.Time.Equal(first.Time) {
		t.Fatalf("retry on another connection: %+v %v, want a duplicate of %+v", again, err, first)
	}

	// One pipelined run with a duplicate in the middle: each gets its own answer.
	var fs []*client.Future
	for _, m := range []client.Message{msg(8, "eight"), msg(7, "seven-3"), msg(9, "nine"), msg(8, "eight-again"), msg(10, "ten")} {
		f, err := b.PublishAsync(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	want := []struct {
		off uint64
		dup bool
	}{{1, false}, {0, true}, {2, false}, {1, true}, {3, false}}
	for i, f := range fs {
		ack, err := f.Wait(ctx)
		if err != nil || ack.Offset != want[i].off || ack.Duplicate != want[i].dup {
			t.Fatalf("publish %d of the run: %+v %v, want offset %d duplicate %t", i, ack, err, want[i].off, want[i].dup)
		}
	}

	// An idempotent Conn gives each publish a new sequence: nothing is a duplicate.
	idem := dial(t, &testNode{Node: n}, func(o *client.Options) { o.Idempotent = true })
	for i := range 3 {
		ack, err := idem.Publish(ctx, client.Message{Topic: "idem.x", Payload: []byte("same")})
		if err != nil || ack.Duplicate || ack.Offset != uint64(4+i) {
			t.Fatalf("idempotent publish %d: %+v %v", i, ack, err)
		}
	}

	// After a restart the node rebuilds what it remembers from the log.
	stop()
	n2, _ := nodetest.Start(t, func(c *node.Config) { c.DataDir, c.Listen = data, addr })
	cc := dial(t, &testNode{Node: n2})
	after, err := cc.Publish(ctx, msg(7, "seven-after-restart"))
	if err != nil || !after.Duplicate || after.Offset != first.Offset || !after.Time.Equal(first.Time) {
		t.Fatalf("retry after the restart: %+v %v, want a duplicate of %+v", after, err, first)
	}
	var got []string
	for _, r := range readTopic(t, cc, "idem.x", 7) {
		got = append(got, string(r.Payload))
	}
	if fmt.Sprint(got) != "[seven eight nine ten same same same]" {
		t.Fatalf("log holds %q", got)
	}
}

// TestIdempotentOutcomeUnknown: without Reconnect, an idempotent Conn's publishes cut off
// while in flight (here by Close) fail with an *OutcomeUnknownError that names their producer
// and sequence; publishing them again with those on a new connection stores each exactly
// once, whether the first attempt was stored or not.
func TestIdempotentOutcomeUnknown(t *testing.T) {
	n := newTestNode(t)
	ctx := testCtx(t)
	c := dial(t, n, func(o *client.Options) { o.Idempotent = true })
	const total, topic = 2000, "idem.unknown"
	type pub struct {
		f   *client.Future
		msg client.Message
	}
	var pubs []pub
	for i := range total {
		m := client.Message{Topic: topic, Payload: []byte(strconv.Itoa(i))}
		f, err := c.PublishAsync(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, pub{f, m})
		if i == total/2 {
			if _, err := pubs[0].f.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Close() // with about a window of publishes unanswered
	retry := dial(t, n)
	unknown, other := 0, 0
	for _, p := range pubs {
		_, err := p.f.Wait(ctx)
		var ou *client.OutcomeUnknownError
		switch {
		case err == nil:
		case errors.As(err, &ou):
			if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, client.ErrClosed) || ou.ProducerID == "" || ou.Sequence == 0 {
				t.Fatalf("outcome unknown: %v", err)
			}
			if unknown++; unknown == 1 {
				t.Logf("first unknown outcome: %v", err)
			}
			m := p.msg
			m.ProducerID, m.Sequence = ou.ProducerID, ou.Sequence
			if _, err := retry.Publish(ctx, m); err != nil {
				t.Fatal(err)
			}
		case errors.Is(err, client.ErrClosed): // never sent: publish it as new
			other++
			if _, err := retry.Publish(ctx, p.msg); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("publish %s: %v", p.msg.Payload, err)
		}
	}
	t.Logf("%d publishes cut off by Close: %d with an unknown outcome, %d never sent", unknown+other, unknown, other)
	if unknown == 0 {
		t.Fatal("no publish was in flight at Close: the retry path was not exercised")
	}
	seen := map[string]int{}
	for _, r := range readTopic(t, retry, topic, total) {
		seen[string(r.Payload)]++
	}
	for i := range total {
		if k := seen[strconv.Itoa(i)]; k != 1 {
			t.Fatalf("record %d stored %d times", i, k)
		}
	}
	if d := n.Log().Stats().Duplicates; d == 0 {
		t.Log("no retried publish had been stored before Close")
	} else {
		t.Logf("%d retried publishes had been stored before Close (answered as duplicates)", d)
	}
}

// TestIdempotentSequenceTooOld: once the node's window of a producer's sequences on a topic
// (4096 by default) has moved past a sequence it no longer remembers, a publish of it is
// refused with CodeSequence: nothing is stored, and the error says why.
func TestIdempotentSequenceTooOld(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	const window = 4096
	var fs []*client.Future
	for seq := uint64(2); seq <= window+2; seq++ {
		f, err := c.PublishAsync(ctx, client.Message{Topic: "idem.old", ProducerID: "p", Sequence: seq, Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []uint64{1, 2} { // never stored; stored but forgotten
		_, err := c.Publish(ctx, client.Message{Topic: "idem.old", ProducerID: "p", Sequence: seq, Payload: []byte("late")})
		var e *client.Error
		if !errors.As(err, &e) || e.Code != client.CodeSequence {
			t.Fatalf("sequence %d after the window moved on: %v, want CodeSequence", seq, err)
		}
		t.Logf("sequence %d: %v", seq, err)
	}
	if ack, err := c.Publish(ctx, client.Message{Topic: "idem.old", ProducerID: "p", Sequence: 3, Payload: []byte("dup")}); err != nil || !ack.Duplicate || ack.Offset != 1 {
		t.Fatalf("sequence 3, still remembered: %+v %v", ack, err)
	}
	if _, next, _ := n.Log().Bounds("idem.old"); next != window+1 {
		t.Fatalf("%d records stored, want %d", next, window+1)
	}
}

// TestIdempotentResendGivesUp: when the node does not come back within ReconnectTimeout, the
// publishes in flight at its stop (large ones, so that some are unread when it stops reading)
// fail with an *OutcomeUnknownError once the resend gives up, and Close waits for nothing.
func TestIdempotentResendGivesUp(t *testing.T) {
	n, stop := nodetest.Start(t)
	c := dial(t, &testNode{Node: n}, func(o *client.Options) {
		o.Idempotent, o.Reconnect, o.ReconnectTimeout = true, true, time.Second
	})
	ctx := testCtx(t)
	payload := make([]byte, 32<<10)
	futures := make(chan *client.Future, 1<<16)
	pubCtx, stopPublishing := context.WithCancel(ctx)
	defer stopPublishing()
	go func() {
		defer close(futures)
		for pubCtx.Err() == nil {
			f, err := c.PublishAsync(pubCtx, client.Message{Topic: "idem.gone", Payload: payload})
			if err != nil {
				return // no resend under way, and the dial of the stopped node failed or was stopped
			}
			futures <- f
		}
	}()
	first := <-futures
	if _, err := first.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	stopped := time.Now()
	// A publish made once the resend gave up dials within its ctx (QUIC waits 5 s for an
	// answer): end the publishing loop well after the give-up instead.
	time.AfterFunc(2*time.Second, stopPublishing)
	ok, failed := 0, 0
	for f := range futures {
		_, err := f.Wait(ctx)
		switch {
		case err == nil:
			ok++
		case errors.Is(err, client.ErrOutcomeUnknown):
			if failed++; failed == 1 {
				t.Logf("first failure, %v after the stop: %v", time.Since(stopped), err)
				if el := time.Since(stopped); el > 5*time.Second {
					t.Fatalf("the resend gave up %v after the stop, want about ReconnectTimeout (1 s)", el)
				}
			}
		default:
			t.Fatalf("a publish cut off by the node's stop: %v, want an unknown outcome", err)
		}
	}
	t.Logf("%d acked, %d failed after the resend gave up", ok, failed)
	if failed == 0 {
		t.Fatal("no publish was in flight at the stop: the give-up path was not exercised")
	}
	closed := time.Now()
	c.Close()
	if el := time.Since(closed); el > 2*time.Second {
		t.Fatalf("Close took %v", el)
	}
}

// BenchmarkPublishIdempotent: durable publishes of 1 KiB records from one pipelined Conn to a
// node on loopback, as plain records and as idempotent ones (a producer ID and sequence each,
// checked by the node's log), to measure what the de-duplication check costs end to end.
func BenchmarkPublishIdempotent(b *testing.B) {
	payload := make([]byte, 1024)
	for _, idem := range []bool{false, true} {
		b.Run(fmt.Sprintf("idempotent=%t", idem), func(b *testing.B) {
			n := newTestNode(b)
			c := dial(b, n, func(o *client.Options) { o.Idempotent = idem })
			ctx := testCtx(b)
			if err := nodetest.PublishPipelined(ctx, c, "bench.idem", payload, 1); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			start := time.Now()
			if err := nodetest.PublishPipelined(ctx, c, "bench.idem", payload, b.N); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
		})
	}
}
