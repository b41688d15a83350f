package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node/nodetest"
)

// noticeBound is how soon, with the default options, a Conn must notice a node that went
// silent: the default IdleTimeout (2 s), a tick of the watch, and room for a loaded machine.
// QUIC's old default of 30 s fails it.
const noticeBound = 3500 * time.Millisecond

// subscribeThroughCutter starts a node, dials it with the default options through a path
// the test can cut, and subscribes to topic; the Conn is closed by t.Cleanup.
func subscribeThroughCutter(t *testing.T, topic string) (*client.Conn, *nodetest.Cutter, *client.Subscription) {
	t.Helper()
	n := newTestNode(t)
	path := nodetest.NewCutter(t, n.Addr().String())
	c, err := client.Dial(testCtx(t), client.Options{CAFile: n.CAFile()}, path.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.Subscribe(testCtx(t), topic, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c, path, s
}

// With the default options, an idle connection (a subscription waiting for records, nothing
// sent) to a node that went silent without a word, as after a SIGKILL or a pulled cable, is
// noticed within about 2 s: the subscription ends with a lost connection.
func TestDefaultsNoticeSilentNodeOnIdleConnection(t *testing.T) {
	c, path, s := subscribeThroughCutter(t, "quiet")
	path.Cut()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.Next(ctx)
	took := time.Since(began)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on a silent node's connection: %v after %v", err, took)
	}
	if took > noticeBound {
		t.Fatalf("the silent node was noticed after %v, want within %v", took, noticeBound)
	}
	for c.Stats().SilentNodes != 1 { // counted as the watcher exits, just after the close
		select {
		case <-ctx.Done():
			t.Fatalf("Stats().SilentNodes = %d, want 1", c.Stats().SilentNodes)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Logf("silent node noticed after %v: %v", took.Round(time.Millisecond), err)
}

// The same with records in flight both ways: a pipelined publisher and a subscriber reading
// its records when the path is cut; both fail within about 2 s.
func TestDefaultsNoticeSilentNodeWithRecordsInFlight(t *testing.T) {
	c, path, s := subscribeThroughCutter(t, "busy")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pubErr := make(chan error, 1)
	cutAt := make(chan time.Time, 1)
	go func() {
		payload := make([]byte, 1024)
		for i := 0; ; i++ {
			f, err := c.PublishAsync(ctx, client.Message{Topic: "busy", Payload: payload})
			if err == nil {
				_, err = f.Wait(ctx)
			}
			if err != nil {
				pubErr <- err
				return
			}
			if i == 200 { // records flowing: cut the path now
				path.Cut()
				cutAt <- time.Now()
			}
		}
	}()
	var subErr error
	for subErr == nil {
		_, subErr = s.Next(ctx)
	}
	var began time.Time
	select {
	case began = <-cutAt:
	default:
		t.Fatalf("the subscription ended before the cut: %v", subErr)
	}
	subTook := time.Since(began)
	err := <-pubErr
	pubTook := time.Since(began)
	if errors.Is(subErr, context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a silent node was not noticed within 20 s: subscriber %v, publisher %v", subErr, err)
	}
	if subTook > noticeBound || pubTook > noticeBound {
		t.Fatalf("the silent node was noticed after %v (subscriber), %v (publisher), want within %v", subTook, pubTook, noticeBound)
	}
	t.Logf("silent node noticed after %v (subscriber), %v (publisher): %v", subTook.Round(time.Millisecond), pubTook.Round(time.Millisecond), err)
}

// A short idle timeout does not end a healthy connection that carries nothing for many idle
// timeouts, nor one whose subscription the application leaves unread under flow control:
// keep-alives are answered by the node's QUIC stack, whatever its application does.
func TestShortIdleTimeoutKeepsSlowSubscriber(t *testing.T) {
	n := newTestNode(t)
	const idle = 400 * time.Millisecond
	c := dial(t, n, func(o *client.Options) { o.IdleTimeout = idle })
	s, err := c.Subscribe(testCtx(t), "slow", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const count = 3000 // 3 MiB: more than the stream's window, so the node stops on flow control
	payload := make([]byte, 1024)
	ctx := testCtx(t)
	for i := range count {
		if _, err := c.PublishAsync(ctx, client.Message{Topic: "slow", Payload: fmt.Appendf(payload[:0:0], "%d-%01000d", i, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Ten idle timeouts with the subscription unread, then the whole topic, in order.
	expectQuietConn(t, c, 10*idle)
	for i, r := range nextN(t, s, count) {
		if r.Offset != uint64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
	if st := c.Stats(); st.Handshakes != 1 || st.SilentNodes != 0 {
		t.Fatalf("the healthy connection was taken as lost: %+v", st)
	}
}

// expectQuietConn waits d and fails if c's connection was taken as lost meanwhile.
func expectQuietConn(t *testing.T, c *client.Conn, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
	if st := c.Stats(); st.SilentNodes != 0 {
		t.Fatalf("a healthy node was taken as silent: %+v", st)
	}
}
