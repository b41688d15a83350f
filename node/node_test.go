package node

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

func publishN(t *testing.T, rc *rawConn, topic string, from, count int) []uint64 {
	t.Helper()
	frames := make([]wire.Frame, count)
	for i := range frames {
		frames[i] = &wire.Publish{Seq: uint64(from + i), Topic: topic, Payload: fmt.Appendf(nil, "m%d", from+i)}
	}
	s := rc.open(frames...)
	s.str.Close()
	offsets := make([]uint64, 0, count)
	for i := 0; i < count; i++ {
		switch f := s.next().(type) {
		case *wire.PublishAck:
			if f.Seq != uint64(from+i) {
				t.Fatalf("ack %d has seq %d: answers out of order", i, f.Seq)
			}
			offsets = append(offsets, f.Offset)
		default:
			t.Fatalf("publish %d: got %#v", i, f)
		}
	}
	return offsets
}

// readRecords reads count RECORDs (resolving TOPIC frames) from a subscription stream.
func readRecords(t *testing.T, s *rawStream, count int) []string {
	t.Helper()
	names := map[uint64]string{}
	var out []string
	for len(out) < count {
		switch f := s.next().(type) {
		case *wire.Topic:
			names[f.Index] = f.Name
		case *wire.Record:
			name, ok := names[f.Index]
			if !ok {
				t.Fatalf("RECORD with unbound index %d", f.Index)
			}
			out = append(out, fmt.Sprintf("%s@%d=%s", name, f.Offset, f.Payload))
		case *wire.ErrorFrame:
			t.Fatalf("subscription error: %v", f.AsError())
		}
	}
	return out
}

func subscribe(t *testing.T, rc *rawConn, req *wire.Subscribe) *rawStream {
	t.Helper()
	s := rc.open(req)
	if f := s.next(); f.Type() != wire.TypeSubscribed {
		t.Fatalf("subscribe %q: got %s %+v", req.Pattern, f.Type(), f)
	}
	return s
}

func TestPublishThenSubscribe(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	if rc.w.Node != "n1" || rc.w.Region != "test" || rc.w.MaxPayload != 1<<20 {
		t.Fatalf("welcome: %+v", rc.w)
	}
	offs := publishN(t, rc, "orders.eu", 0, 200)
	for i, o := range offs {
		if o != uint64(i) {
			t.Fatalf("offset %d for publish %d: offsets are not dense", o, i)
		}
	}
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "orders.>"})
	got := readRecords(t, s, 200)
	for i, g := range got {
		if want := fmt.Sprintf("orders.eu@%d=m%d", i, i); g != want {
			t.Fatalf("record %d: %s, want %s", i, g, want)
		}
	}
}

func TestNewTopicsReachWildcardSubscription(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "x.*", Start: wire.StartLatest})
	publishN(t, rc, "x.1", 0, 3)
	publishN(t, rc, "y.1", 0, 3) // not matching
	publishN(t, rc, "x.2", 10, 2)
	got := readRecords(t, s, 5)
	want := map[string]bool{"x.1@0=m0": true, "x.1@1=m1": true, "x.1@2=m2": true, "x.2@0=m10": true, "x.2@1=m11": true}
	for _, g := range got {
		if !want[g] {
			t.Fatalf("unexpected record %s (all: %v)", g, got)
		}
		delete(want, g)
	}
}

func TestStartPositions(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "s.t", 0, 10)
	mid := time.Now().UnixNano()
	testlog.WaitFor(t, 5*time.Second, "the clock past mid", func() bool { return time.Now().UnixNano() > mid+int64(5*time.Millisecond) })
	publishN(t, rc, "s.t", 10, 10)

	s := subscribe(t, rc, &wire.Subscribe{Pattern: "s.t", Start: wire.StartOffset, StartValue: 15})
	if got := readRecords(t, s, 1)[0]; got != "s.t@15=m15" {
		t.Fatalf("offset start: %s", got)
	}
	s = subscribe(t, rc, &wire.Subscribe{Pattern: "s.t", Start: wire.StartTime, StartValue: uint64(mid)})
	if got := readRecords(t, s, 1)[0]; got != "s.t@10=m10" {
		t.Fatalf("time start: %s", got)
	}
	s = subscribe(t, rc, &wire.Subscribe{Pattern: "s.t", Start: wire.StartLatest})
	publishN(t, rc, "s.t", 20, 1)
	if got := readRecords(t, s, 1)[0]; got != "s.t@20=m20" {
		t.Fatalf("latest start: %s", got)
	}
}

func TestDurableConsumerResumes(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "d.t", 0, 10)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "d.t", Durable: "billing"})
	readRecords(t, s, 5)
	s.send(&wire.Ack{Index: 0, Offset: 4})
	s.str.Close()

	// The node's FIN (after the records still in flight) ends the subscription: by then the
	// ACK is stored and the durable is free, so the next SUBSCRIBE, at once on the same
	// connection, takes it and resumes after the ACK.
	for {
		if _, err := s.read(10 * time.Second); err != nil {
			if err != io.EOF {
				t.Fatalf("first subscription: %v, want the node's FIN", err)
			}
			break
		}
	}
	if pos, ok, err := n.Log().Position("billing", "d.t"); err != nil || !ok || pos != 4 {
		t.Fatalf("position at the node's FIN: %d %v %v, want 4", pos, ok, err)
	}
	s2 := subscribe(t, rc, &wire.Subscribe{Pattern: "d.t", Durable: "billing"})
	if got := readRecords(t, s2, 1)[0]; got != "d.t@5=m5" {
		t.Fatalf("durable resume: %s, want offset 5", got)
	}
}

func TestPublishErrorsKeepStreamOpen(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxPayload = 100 })
	rc := mustDial(t, n)
	s := rc.open(
		&wire.Publish{Seq: 1, Topic: "ok.t", Payload: []byte("a")},
		&wire.Publish{Seq: 2, Topic: "bad..topic", Payload: []byte("b")},
		&wire.Publish{Seq: 3, Topic: "ok.t", Payload: make([]byte, 101)},
		&wire.Publish{Seq: 4, Topic: "ok.t", Payload: []byte("d")},
	)
	s.str.Close()
	want := []string{"ack 1 @0", "error 2 code 4", "error 3 code 5", "ack 4 @1"}
	for i, w := range want {
		var got string
		switch f := s.next().(type) {
		case *wire.PublishAck:
			got = fmt.Sprintf("ack %d @%d", f.Seq, f.Offset)
		case *wire.PublishError:
			got = fmt.Sprintf("error %d code %d", f.Seq, f.Code)
			if f.Message == "" {
				t.Errorf("publish error %d has no message", f.Seq)
			}
		default:
			t.Fatalf("answer %d: %#v", i, f)
		}
		if got != w {
			t.Fatalf("answer %d: %s, want %s", i, got, w)
		}
	}
}

func TestMalformedFrameGetsErrorAndConnectionLives(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	str, err := rc.conn.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	str.Write([]byte{byte(wire.TypePublish), 0, 0, 0, 3, 0xff, 0xff, 0xff}) // truncated varint
	s := &rawStream{t: t, str: str, r: wire.NewReader(str, wire.Limits{})}
	if e := s.expectError(); e.Code != wire.CodeProtocol {
		t.Fatalf("got %v", e)
	}
	big := rc.open()
	big.str.Write([]byte{byte(wire.TypePublish), 0x7f, 0xff, 0xff, 0xff})
	if e := big.expectError(); e.Code != wire.CodeTooLarge || !strings.Contains(e.Message, "limit") {
		t.Fatalf("got %v", e)
	}
	// The same connection still works.
	if offs := publishN(t, rc, "after.bad", 0, 1); offs[0] != 0 {
		t.Fatal(offs)
	}
}

func TestTokenRequired(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.Tokens = []string{"0123456789abcdef-good"} })
	if _, err := dialRaw(t, n, "wrong-token-wrong-token"); !isCode(err, wire.CodeUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := dialRaw(t, n, ""); !isCode(err, wire.CodeUnauthorized) {
		t.Fatalf("no token: %v", err)
	}
	if _, err := dialRaw(t, n, "0123456789abcdef-good"); err != nil {
		t.Fatalf("good token: %v", err)
	}
}

func TestSubscriptionLimitAndBadPattern(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxSubscriptionsPerConn = 2 })
	rc := mustDial(t, n)
	subscribe(t, rc, &wire.Subscribe{Pattern: "a"})
	subscribe(t, rc, &wire.Subscribe{Pattern: "b"})
	if e := rc.open(&wire.Subscribe{Pattern: "c"}).expectError(); e.Code != wire.CodeLimit {
		t.Fatalf("third subscription: %v", e)
	}
	if e := rc.open(&wire.Subscribe{Pattern: "a.>.b"}).expectError(); e.Code != wire.CodeInvalidTopic || !strings.Contains(e.Message, "a.>.b") {
		t.Fatalf("bad pattern: %v", e)
	}
	if e := rc.open(&wire.Subscribe{Pattern: "a", Durable: "no spaces"}).expectError(); e.Code != wire.CodeInvalidArgument {
		t.Fatalf("bad durable: %v", e)
	}
}

func TestAckOfUndeliveredRecordIsRefused(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "k", 0, 2)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "k"})
	readRecords(t, s, 2)
	s.send(&wire.Ack{Index: 0, Offset: 7})
	if e := s.expectError(); e.Code != wire.CodeInvalidArgument {
		t.Fatalf("got %v", e)
	}
}

func TestTopicsListing(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "l.a", 0, 3)
	publishN(t, rc, "l.b", 0, 1)
	publishN(t, rc, "m", 0, 1)
	s := rc.open(&wire.Topics{Pattern: "l.*"})
	s.str.Close()
	var got []string
	for {
		f, err := s.read(5 * time.Second)
		if err != nil {
			break
		}
		ti := f.(*wire.TopicInfo)
		got = append(got, fmt.Sprintf("%s %d-%d", ti.Name, ti.First, ti.Next))
	}
	if strings.Join(got, ",") != "l.a 0-3,l.b 0-1" {
		t.Fatalf("listing: %v", got)
	}
}

// Subscription series are deleted when the last stream with their labels ends.
func TestSubscriptionMetricsDeletedOnClose(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "met", 0, 3)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "met", Durable: "m1"})
	readRecords(t, s, 3)
	if v := metricValue(t, n, "quicmq_subscription_records_total", "m1"); v != 3 {
		t.Fatalf("records delivered: %v", v)
	}
	s.str.CancelRead(wire.AppCancelled)
	s.str.Close()
	testlog.WaitFor(t, 5*time.Second, "the series to go with the stream", func() bool {
		return metricValue(t, n, "quicmq_subscription_records_total", "m1") == -1
	})
}

// A client that stops reading mid-replay (STOP_SENDING, with its side of the stream left
// open) ends its subscription: the node's write fails, and the subscription goes with no
// ERROR frame and no retry.
func TestSubscriptionEndsWhenClientStopsReadingMidReplay(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	const records = 3000 // about 3 MiB: far beyond one read-ahead batch and the stream's window
	frames := make([]wire.Frame, records)
	payload := make([]byte, 1000)
	for i := range frames {
		frames[i] = &wire.Publish{Seq: uint64(i), Topic: "replay", Payload: payload}
	}
	p := rc.open(frames...)
	p.str.Close()
	for range records {
		if f := p.next(); f.Type() != wire.TypePublishAck {
			t.Fatalf("publish: got %s %+v", f.Type(), f)
		}
	}
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "replay", Durable: "r1"})
	readRecords(t, s, 10)
	s.str.CancelRead(wire.AppCancelled)
	testlog.WaitFor(t, 10*time.Second, "the subscription to end after its client stopped reading", func() bool { // replicated_test.go
		return metricValue(t, n, "quicmq_subscription_records_total", "r1") == -1
	})
}

// metricValue returns the value of the series of name whose subscription label is sub, or -1.
func metricValue(t *testing.T, n *Node, name, sub string) float64 {
	t.Helper()
	return metricWith(t, n, name, map[string]string{"subscription": sub}) // manage_test.go
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Close while publishes are in flight: every ack the client received is durable after reopen.
func TestShutdownLosesNoAckedRecord(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", Name: "n1", Logger: testLogger(t)}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Run(context.Background()) }()
	rc := mustDial(t, n)
	s := rc.open()
	go func() {
		for i := 0; ; i++ {
			if _, err := s.str.Write(wire.Append(nil, &wire.Publish{Seq: uint64(i), Topic: "sd", Payload: fmt.Appendf(nil, "%d", i)})); err != nil {
				return
			}
		}
	}()
	acked := map[uint64]uint64{} // offset -> seq
	for len(acked) < 500 {
		if a, ok := s.next().(*wire.PublishAck); ok {
			acked[a.Offset] = a.Seq
		}
	}
	go n.Close()
	for {
		f, err := s.read(10 * time.Second)
		if err != nil {
			break
		}
		if a, ok := f.(*wire.PublishAck); ok {
			acked[a.Offset] = a.Seq
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	for off, seq := range acked {
		recs, err := n2.Log().Read("sd", off, 1, 1<<20)
		if err != nil || len(recs) != 1 || string(recs[0].Payload) != fmt.Sprint(seq) {
			t.Fatalf("acked offset %d (seq %d) after restart: %v %v", off, seq, recs, err)
		}
	}
	t.Logf("%d acked records all present after graceful shutdown", len(acked))
}
