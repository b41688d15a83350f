package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/subscriptions"
)

// The lag of a wildcard read by sweep, whose cursors hold their topics' logs, is what it was
// when every cursor's head was looked up by name: records of matching topics not yet handed
// to the stream, here while a client that reads nothing holds the stream (flow control).
func TestWildcardLagReadsHeadsFromCursors(t *testing.T) {
	n := newTestNode(t)
	const topics = 2*512 + 100 // several holds of the log's lock (node/subscriptions' lagChunk)
	c := dialNode(t, n, client.Options{})
	payload := make([]byte, 4<<10)
	for i := range topics {
		if _, err := c.Publish(context.Background(), client.Message{Topic: fmt.Sprintf("lg.%d", i), Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	rc := mustDial(t, n)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "lg.>", Durable: "lagged"}) // read no further
	defer s.str.Close()
	testlog.WaitFor(t, 20*time.Second, "the stalled wildcard's lag to settle above 0 and equal its heads by name", func() bool {
		var sub *subscriptions.Subscription
		for _, s := range n.liveSubscriptions() {
			if s.Request().Durable == "lagged" {
				sub = s
			}
		}
		if sub != nil {
			got, want := sub.Lag(), sub.LagByName()
			again := sub.LagByName() // the run goroutine is blocked on the stream: no change
			// The metric, read last, is the same sum (unless the stream moved meanwhile:
			// then again).
			if got == want && want == again && got > 0 && got < topics &&
				metricValue(t, n, "quicmq_subscription_lag_records", "lagged") == float64(got) {
				t.Logf("lag %d of %d topics' records", got, topics)
				return true
			}
		}
		return false
	})
}
