package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node"
)

func TestPublishAndReadBack(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	if name, region := c.Node(); name != "n1" || region != "eu" {
		t.Fatalf("Node() = %q, %q; want n1, eu", name, region)
	}

	before := time.Now()
	a, err := c.Publish(ctx, client.Message{
		Topic:      "orders.eu.created",
		Payload:    []byte("first"),
		Headers:    []client.Header{{Key: "content-type", Value: []byte("text/plain")}},
		ProducerID: "p1",
		Sequence:   7,
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Topic != "orders.eu.created" || a.Offset != 0 || a.Time.Before(before.Add(-time.Second)) {
		t.Fatalf("sync ack %+v", a)
	}
	f, err := c.PublishAsync(ctx, client.Message{Topic: "orders.eu.created", Payload: []byte("second")})
	if err != nil {
		t.Fatal(err)
	}
	<-f.Done()
	if a2, err := f.Wait(ctx); err != nil || a2.Offset != 1 || a2.Time.Before(a.Time) {
		t.Fatalf("async ack %+v, %v", a2, err)
	}

	sub, err := c.Subscribe(ctx, "orders.eu.created", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	recs := nextN(t, sub, 2)
	r := recs[0]
	if r.Topic != "orders.eu.created" || r.Offset != 0 || string(r.Payload) != "first" ||
		r.ProducerID != "p1" || r.Sequence != 7 || !r.Time.Equal(a.Time) ||
		len(r.Headers) != 1 || r.Headers[0].Key != "content-type" || string(r.Headers[0].Value) != "text/plain" {
		t.Fatalf("record 0 = %+v", r)
	}
	// The node leaves the origin empty for records published in its own region (or names it).
	if r.OriginRegion != "" && (r.OriginRegion != "eu" || r.OriginOffset != 0) {
		t.Fatalf("origin of a local record: %q@%d", r.OriginRegion, r.OriginOffset)
	}
	if recs[1].Offset != 1 || string(recs[1].Payload) != "second" {
		t.Fatalf("record 1 = %+v", recs[1])
	}
}

// Pipelined publishes to one topic are appended, acknowledged and delivered in send order.
func TestPipelinedOrder(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n, func(o *client.Options) { o.MaxPendingPublishes = 256 })
	const total = 3000
	acks := publishN(t, c, "seq.a", "m", total)
	for i, a := range acks {
		if a.Offset != uint64(i) {
			t.Fatalf("ack %d has offset %d", i, a.Offset)
		}
	}
	sub, err := c.Subscribe(testCtx(t), "seq.a", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i, r := range nextN(t, sub, total) {
		if r.Offset != uint64(i) || string(r.Payload) != fmt.Sprintf("m-%d", i) {
			t.Fatalf("record %d: offset %d payload %q", i, r.Offset, r.Payload)
		}
	}
}

// Many goroutines publish concurrently on one Conn; each one's records keep their order.
func TestConcurrentPublishers(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n, func(o *client.Options) { o.MaxPendingPublishes = 64 })
	ctx := testCtx(t)
	const writers, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			var futs []*client.Future
			for i := range each {
				f, err := c.PublishAsync(ctx, client.Message{Topic: "conc.t", Payload: fmt.Appendf(nil, "%d-%d", w, i)})
				if err != nil {
					errs <- err
					return
				}
				futs = append(futs, f)
			}
			last := int64(-1)
			for _, f := range futs {
				a, err := f.Wait(ctx)
				if err != nil {
					errs <- err
					return
				}
				if int64(a.Offset) <= last {
					errs <- fmt.Errorf("writer %d: offset %d after %d", w, a.Offset, last)
					return
				}
				last = int64(a.Offset)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	topics, err := c.Topics(ctx, "conc.>")
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) != 1 || topics[0].Next != writers*each {
		t.Fatalf("topics = %+v", topics)
	}
}

func TestSubscribeStarts(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	acks := publishN(t, c, "starts.t", "a", 5)
	testlog.WaitFor(t, 5*time.Second, "the clock past the first records' time", func() bool {
		return time.Since(acks[4].Time) > 2*time.Millisecond // records 5.. get strictly later timestamps
	})
	acks = append(acks, publishN(t, c, "starts.t", "b", 5)...)
	if !acks[5].Time.After(acks[4].Time) {
		t.Fatalf("timestamps %v, %v not increasing", acks[4].Time, acks[5].Time)
	}

	first := func(start client.Start) *client.Subscription {
		t.Helper()
		s, err := c.Subscribe(ctx, "starts.t", client.SubscribeOptions{From: start})
		if err != nil {
			t.Fatalf("%v: %v", start, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, tc := range []struct {
		start client.Start
		want  uint64
	}{
		{client.Earliest, 0},
		{client.AtOffset(7), 7},
		{client.AtTime(acks[5].Time), 5},
		{client.AtTime(time.Time{}), 0},
	} {
		s := first(tc.start)
		rs := nextN(t, s, 1)
		if rs[0].Offset != tc.want {
			t.Errorf("%v: first offset %d, want %d", tc.start, rs[0].Offset, tc.want)
		}
	}

	latest := first(client.Latest)
	expectQuiet(t, latest, 100*time.Millisecond)
	publishN(t, c, "starts.t", "c", 2)
	rs := nextN(t, latest, 2)
	if rs[0].Offset != 10 || string(rs[0].Payload) != "c-0" || rs[1].Offset != 11 {
		t.Fatalf("latest got %+v", rs)
	}
	if got := client.AtOffset(3).String(); got != "offset 3" {
		t.Fatalf("Start.String() = %q", got)
	}
}

// A durable consumer resumes after the last offset it acked, also on a new connection.
func TestDurableResume(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	publishN(t, c, "dur.a", "x", 10)
	publishN(t, c, "dur.b", "y", 3)

	s, err := c.Subscribe(ctx, "dur.*", client.SubscribeOptions{Durable: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for seen["dur.a"] < 4 || seen["dur.b"] < 3 {
		r := nextN(t, s, 1)[0]
		if seen[r.Topic] >= 4 {
			continue // read but not acked: must come again
		}
		seen[r.Topic]++
		if err := s.Ack(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := s.Next(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	c.Close()

	c2 := dial(t, n)
	s2, err := c2.Subscribe(ctx, "dur.*", client.SubscribeOptions{Durable: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	r := nextN(t, s2, 1)[0]
	if r.Topic != "dur.a" || r.Offset != 4 {
		t.Fatalf("resumed at %s@%d, want dur.a@4", r.Topic, r.Offset)
	}
	// A different consumer name starts from its own position (Earliest).
	s3, err := c2.Subscribe(ctx, "dur.b", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if r := nextN(t, s3, 1)[0]; r.Offset != 0 {
		t.Fatalf("audit starts at %d", r.Offset)
	}
}

func TestWildcardSubscription(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	for _, topic := range []string{"wc.x.c", "wc.y.c", "wc.y.d", "other.x.c"} {
		publishN(t, c, topic, topic, 3)
	}
	star, err := c.Subscribe(ctx, "wc.*.c", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer star.Close()
	tail, err := c.Subscribe(ctx, "wc.>", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()

	check := func(s *client.Subscription, want map[string]int) {
		t.Helper()
		total := 0
		for _, k := range want {
			total += k
		}
		next := map[string]uint64{}
		for _, r := range nextN(t, s, total) {
			if _, ok := want[r.Topic]; !ok {
				t.Fatalf("record of %s does not match", r.Topic)
			}
			if r.Offset != next[r.Topic] || string(r.Payload) != fmt.Sprintf("%s-%d", r.Topic, r.Offset) {
				t.Fatalf("%s: offset %d (want %d) payload %q", r.Topic, r.Offset, next[r.Topic], r.Payload)
			}
			next[r.Topic]++
		}
		for topic, k := range want {
			if next[topic] != uint64(k) {
				t.Fatalf("%s: %d records, want %d", topic, next[topic], k)
			}
		}
	}
	check(star, map[string]int{"wc.x.c": 3, "wc.y.c": 3})
	check(tail, map[string]int{"wc.x.c": 3, "wc.y.c": 3, "wc.y.d": 3})

	// A topic created after the subscription is picked up from offset 0.
	publishN(t, c, "wc.z.c", "wc.z.c", 2)
	check(star, map[string]int{"wc.z.c": 2})
	check(tail, map[string]int{"wc.z.c": 2})
	expectQuiet(t, star, 50*time.Millisecond)
}

// Every subscription has its own stream: many on one Conn all work, and one that is not read
// (its stream blocked by flow control) does not hold back the others.
func TestManySubscriptionsOneConn(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	const subs = 40
	ss := make([]*client.Subscription, subs)
	for i := range ss {
		s, err := c.Subscribe(ctx, fmt.Sprintf("many.%d", i%4), client.SubscribeOptions{})
		if err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
		defer s.Close()
		ss[i] = s
	}
	// The slow subscriber reads nothing while far more than a stream window is published.
	slow, err := c.Subscribe(ctx, "bulk", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	big := bytes.Repeat([]byte("b"), 256<<10)
	var futs []*client.Future
	for range 32 { // 8 MiB
		f, err := c.PublishAsync(ctx, client.Message{Topic: "bulk", Payload: big})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		publishN(t, c, fmt.Sprintf("many.%d", i), fmt.Sprintf("many.%d", i), 5)
	}
	for i, s := range ss {
		for j, r := range nextN(t, s, 5) {
			if r.Topic != fmt.Sprintf("many.%d", i%4) || r.Offset != uint64(j) {
				t.Fatalf("subscription %d record %d: %s@%d", i, j, r.Topic, r.Offset)
			}
		}
	}
	// The slow subscription still has everything, in order.
	for j, r := range nextN(t, slow, 32) {
		if r.Offset != uint64(j) || len(r.Payload) != len(big) {
			t.Fatalf("bulk record %d: offset %d, %d bytes", j, r.Offset, len(r.Payload))
		}
	}
}

func TestErrorsAreTyped(t *testing.T) {
	const token = "0123456789abcdef-secret"
	n := newTestNode(t, func(c *node.Config) { c.Tokens = []string{token} })
	ctx := testCtx(t)

	codeOf := func(err error) client.Code {
		t.Helper()
		var e *client.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v (%T) is not a *client.Error", err, err)
		}
		return e.Code
	}
	_, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), Token: "wrong-token-wrong-token"}, n.Addr().String())
	if code := codeOf(err); code != client.CodeUnauthorized {
		t.Fatalf("bad token: code %v (%v)", code, err)
	}
	_, err = client.Dial(ctx, client.Options{CAFile: n.CAFile()}, n.Addr().String())
	if code := codeOf(err); code != client.CodeUnauthorized {
		t.Fatalf("no token: code %v (%v)", code, err)
	}

	c := dial(t, n, func(o *client.Options) { o.Token = token })
	_, err = c.Publish(ctx, client.Message{Topic: "a..b", Payload: []byte("x")})
	if code := codeOf(err); code != client.CodeInvalidTopic {
		t.Fatalf("invalid topic: code %v (%v)", code, err)
	}
	if !strings.Contains(err.Error(), `"a..b"`) {
		t.Errorf("error does not name the topic: %v", err)
	}
	_, err = c.Publish(ctx, client.Message{Topic: "a.>", Payload: []byte("x")})
	if code := codeOf(err); code != client.CodeInvalidTopic {
		t.Fatalf("wildcard publish: code %v (%v)", code, err)
	}
	_, err = c.Subscribe(ctx, "a.>.b", client.SubscribeOptions{})
	if code := codeOf(err); code != client.CodeInvalidTopic {
		t.Fatalf("invalid pattern: code %v (%v)", code, err)
	}
	_, err = c.Publish(ctx, client.Message{Topic: "big", Payload: make([]byte, 1<<20+1)})
	if code := codeOf(err); code != client.CodeTooLarge || !strings.Contains(err.Error(), "1048577") {
		t.Fatalf("too large: code %v (%v)", code, err)
	}
	// The errors above ended nothing: the same Conn goes on publishing and subscribing.
	a, err := c.Publish(ctx, client.Message{Topic: "ok.t", Payload: []byte("fine")})
	if err != nil || a.Offset != 0 {
		t.Fatalf("publish after errors: %+v, %v", a, err)
	}
	s, err := c.Subscribe(ctx, "ok.t", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := nextN(t, s, 1)[0]; string(r.Payload) != "fine" {
		t.Fatalf("got %q", r.Payload)
	}
	if err := s.Ack(client.Record{Topic: "not.here"}); err == nil {
		t.Fatal("ack of a topic the subscription never saw succeeded")
	}
}

func TestCloseFailsPendingFutures(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	payload := make([]byte, 4<<10)
	var futs []*client.Future
	for range 500 {
		f, err := c.PublishAsync(ctx, client.Message{Topic: "close.t", Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	c.Close()
	failed := 0
	for i, f := range futs {
		select {
		case <-f.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("future %d still pending after Close", i)
		}
		if _, err := f.Wait(ctx); err != nil {
			if !errors.Is(err, client.ErrClosed) {
				t.Fatalf("future %d: %v, want ErrClosed", i, err)
			}
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("every publish was acked before Close returned; the test proves nothing")
	}
	if _, err := c.PublishAsync(ctx, client.Message{Topic: "close.t"}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("publish after Close: %v", err)
	}
	if _, err := c.Subscribe(ctx, "close.t", client.SubscribeOptions{}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("subscribe after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// When the node goes away, a blocked Next and later publishes fail, naming why.
func TestNodeShutdownEndsOperations(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	publishN(t, c, "down.t", "x", 1)
	s, err := c.Subscribe(ctx, "down.t", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nextN(t, s, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Next(ctx)
		errc <- err
	}()
	n.stop()
	select {
	case err := <-errc:
		var e *client.Error
		if !errors.As(err, &e) || e.Code != client.CodeShuttingDown {
			t.Fatalf("Next after node shutdown: %v, want code shutting down", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next still blocked 10 s after the node stopped")
	}
	_, err = c.Publish(ctx, client.Message{Topic: "down.t", Payload: []byte("y")})
	if err == nil {
		t.Fatal("publish after shutdown succeeded")
	}
	t.Logf("publish after shutdown: %v", err)
}

func TestTopics(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	publishN(t, c, "list.b", "x", 3)
	publishN(t, c, "list.a", "y", 2)
	publishN(t, c, "zzz", "z", 1)
	all, err := c.Topics(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].Name != "list.a" || all[1].Name != "list.b" || all[2].Name != "zzz" {
		t.Fatalf("topics = %+v", all)
	}
	if all[1].First != 0 || all[1].Next != 3 || all[1].Records() != 3 || all[1].Bytes == 0 {
		t.Fatalf("list.b = %+v", all[1])
	}
	some, err := c.Topics(ctx, "list.*")
	if err != nil || len(some) != 2 {
		t.Fatalf("list.* = %+v, %v", some, err)
	}
	none, err := c.Topics(ctx, "nothing.>")
	if err != nil || len(none) != 0 {
		t.Fatalf("nothing.> = %+v, %v", none, err)
	}
	if _, err := c.Topics(ctx, "bad..pattern"); err == nil {
		t.Fatal("invalid pattern listed")
	}
}

// A context that ends while Next waits leaves the subscription usable, and Close from
// another goroutine ends a blocked Next with ErrClosed.
func TestNextContextAndClose(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	s, err := c.Subscribe(ctx, "ctx.t", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		expectQuiet(t, s, 20*time.Millisecond)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Next(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context: %v", err)
	}
	publishN(t, c, "ctx.t", "p", 3)
	got := 0
	for r, err := range s.Records(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != uint64(got) {
			t.Fatalf("record %d has offset %d", got, r.Offset)
		}
		if got++; got == 3 {
			break
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.Next(ctx)
		errc <- err
	}()
	testlog.WaitFor(t, 5*time.Second, "Next to block", func() bool {
		for _, g := range clientGoroutines() {
			if strings.Contains(g, "client.(*Subscription).Next") {
				return true
			}
		}
		return false
	})
	s.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, client.ErrClosed) {
			t.Fatalf("blocked Next after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next still blocked after Close")
	}
}

// After Close, no goroutine of the package is left and the process is back to where it was.
func TestNoGoroutineLeak(t *testing.T) {
	n := newTestNode(t)
	// Warm up the node's side once so that its lazily started goroutines are in the baseline.
	warm := dial(t, n)
	publishN(t, warm, "leak.t", "w", 1)
	warm.Close()
	testlog.WaitFor(t, 5*time.Second, "the warm-up connection's goroutines to end", func() bool { return len(clientGoroutines()) == 0 })
	base := runtimeGoroutines()

	ctx := testCtx(t)
	for range 3 {
		c := dial(t, n)
		publishN(t, c, "leak.t", "x", 50)
		s, err := c.Subscribe(ctx, "leak.>", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nextN(t, s, 10)
		if _, err := c.Topics(ctx, ">"); err != nil {
			t.Fatal(err)
		}
		// One subscription closed, one left open: Conn.Close must end both.
		s2, err := c.Subscribe(ctx, "leak.t", client.SubscribeOptions{From: client.Latest})
		if err != nil {
			t.Fatal(err)
		}
		s2.Close()
		c.Close()
	}
	testlog.WaitForErr(t, 5*time.Second, "every goroutine of the Conns to end", func() error {
		left := clientGoroutines()
		now := runtimeGoroutines()
		if len(left) == 0 && now <= base {
			return nil
		}
		return fmt.Errorf("%d goroutines now, %d before; of package client:\n%s", now, base, strings.Join(left, "\n\n"))
	})
}

// Acking every record while a large backlog streams in: every ack is of a record the node
// sent, so none may be refused.
func TestAckEveryRecordOfBacklog(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	const total = 5000
	publishN(t, c, "backlog.t", "record-with-some-padding-to-fill-frames", total)
	for _, durable := range []string{"", "acker"} {
		s, err := c.Subscribe(ctx, "backlog.t", client.SubscribeOptions{Durable: durable})
		if err != nil {
			t.Fatal(err)
		}
		for i := range total {
			r, err := s.Next(ctx)
			if err != nil {
				t.Fatalf("durable %q: record %d: %v", durable, i, err)
			}
			if err := s.Ack(r); err != nil {
				var why error
				for why == nil { // the node's reason follows the records it sent before it
					_, why = s.Next(ctx)
				}
				t.Fatalf("durable %q: ack %d: %v\nNext: %v", durable, i, err, why)
			}
		}
		s.Close()
	}
}
