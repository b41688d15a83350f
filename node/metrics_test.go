package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

func publishAll(t *testing.T, c *client.Conn, msgs ...client.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range msgs {
		if _, err := c.Publish(ctx, m); err != nil {
			t.Fatalf("publish to %s: %v", m.Topic, err)
		}
	}
}

func dialClient(t *testing.T, n *node.Node) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), Name: "metrics"}, n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Per-topic publish counters count acknowledged records and their payload bytes by topic;
// a duplicate (an idempotent retry) and a refused publish are not counted; past the series
// cap further topics are counted under "_other".
func TestTopicPublishCounters(t *testing.T) {
	n, _ := nodetest.Start(t, func(c *node.Config) { c.MaxSeriesPerMetric = 2 })
	c := dialClient(t, n)
	msg := func(topic, payload string) client.Message {
		return client.Message{Topic: topic, Payload: []byte(payload)}
	}
	publishAll(t, c, msg("m.a", "1"), msg("m.a", "22"), msg("m.b", "333"))
	// An idempotent publish and its retry: stored and counted once.
	idem := client.Message{Topic: "m.a", Payload: []byte("4444"), ProducerID: "p", Sequence: 1}
	publishAll(t, c, idem, idem)
	// Topics past the cap of 2.
	publishAll(t, c, msg("m.c", "55555"), msg("m.d", "6"))
	// A refused publish counts nowhere.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, client.Message{Topic: "m.a", Payload: make([]byte, 2<<20)}); err == nil {
		t.Fatal("a 2 MiB payload was accepted")
	}
	want := `
# HELP quicmq_topic_published_bytes_total Payload bytes of the records counted by quicmq_topic_published_records_total.
# TYPE quicmq_topic_published_bytes_total counter
quicmq_topic_published_bytes_total{topic="_other"} 6
quicmq_topic_published_bytes_total{topic="m.a"} 7
quicmq_topic_published_bytes_total{topic="m.b"} 3
# HELP quicmq_topic_published_records_total Records published to the topic and acknowledged (durable), counted on the topic's owner; duplicates are not counted.
# TYPE quicmq_topic_published_records_total counter
quicmq_topic_published_records_total{topic="_other"} 2
quicmq_topic_published_records_total{topic="m.a"} 3
quicmq_topic_published_records_total{topic="m.b"} 1
`
	if err := testutil.GatherAndCompare(n.Gatherer(), strings.NewReader(want),
		"quicmq_topic_published_records_total", "quicmq_topic_published_bytes_total"); err != nil {
		t.Fatal(err)
	}
}

// A publish relayed to the topic's owner is counted once, on the owner: the relaying node
// has no series for it.
func TestTopicPublishCountersRelayedCountOnce(t *testing.T) {
	n1, _, n2 := nodetest.StartTwo(t)
	topic := nodetest.OwnedBy("relayed", "n2", "n1", "n2")
	c := dialClient(t, n1)
	publishAll(t, c, client.Message{Topic: topic, Payload: []byte("abc")}, client.Message{Topic: topic, Payload: []byte("de")})
	want := `
# HELP quicmq_topic_published_records_total Records published to the topic and acknowledged (durable), counted on the topic's owner; duplicates are not counted.
# TYPE quicmq_topic_published_records_total counter
quicmq_topic_published_records_total{topic="` + topic + `"} 2
`
	if err := testutil.GatherAndCompare(n2.Gatherer(), strings.NewReader(want), "quicmq_topic_published_records_total"); err != nil {
		t.Fatalf("owner n2: %v", err)
	}
	if got, err := testutil.GatherAndCount(n1.Gatherer(), "quicmq_topic_published_records_total"); err != nil || got != 0 {
		t.Fatalf("relaying node n1 has %d series (%v), want none", got, err)
	}
}
