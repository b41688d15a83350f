package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// TestCreateTopicWithItsReplicaCount: `quicmq topics create T --replicas N` in a replicated
// region places T on N of its nodes (through any node: a follower of the metadata group asks
// its leader with the count), and T works like any replicated topic; a count above the
// region's nodes, one other than an existing topic's, and more than one in a region that does
// not replicate are refused, each saying why.
func TestCreateTopicWithItsReplicaCount(t *testing.T) {
	m := newReplicatedRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refused := func(err error, want string) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != client.CodeInvalidArgument || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want CodeInvalidArgument saying %q", err, want)
		}
	}
	for i, name := range []string{"eu-1", "eu-2", "eu-3"} {
		c := m.dial(name)
		topic := []string{"scratch.a", "scratch.b", "scratch.c"}[i]
		ti, err := c.CreateTopic(ctx, topic, client.TopicOptions{Replicas: 1})
		if err != nil || len(ti.Replicas) != 1 {
			t.Fatalf("create %s --replicas 1 through %s: %+v, %v", topic, name, ti, err)
		}
		publishRetrying(ctx, t, c, topic, 0, 5)
		list, err := c.Topics(ctx, topic)
		if err != nil || len(list) != 1 || list[0].Next != 5 || len(list[0].Replicas) != 1 {
			t.Fatalf("%s listed through %s: %+v, %v", topic, name, list, err)
		}
		// Through a node that holds no replica of it: relayed, every record once, in order.
		for _, via := range []string{"eu-1", "eu-2", "eu-3"} {
			if via == list[0].Replicas[0] {
				continue
			}
			vc := m.dial(via)
			sub, err := vc.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
			if err != nil {
				t.Fatalf("subscribe %s through %s: %v", topic, via, err)
			}
			for i, d := range readAll(t, sub, 5, 15*time.Second) {
				if d.offset != uint64(i) {
					t.Fatalf("%s through %s: offset %d at %d", topic, via, d.offset, i)
				}
			}
			sub.Close()
			vc.Close()
		}
		_, err = c.CreateTopic(ctx, topic, client.TopicOptions{Replicas: 3})
		refused(err, "exists with 1 replicas")
		_, err = c.CreateTopic(ctx, "scratch.big", client.TopicOptions{Replicas: 5})
		refused(err, "5 replicas asked, but region \"eu\" has 3 nodes")
		c.Close()
	}
	// The region's count, asked explicitly, is what a topic made without it gets.
	c := m.dial("eu-2")
	defer c.Close()
	if ti, err := c.CreateTopic(ctx, "scratch.three", client.TopicOptions{Replicas: 3}); err != nil || len(ti.Replicas) != 3 {
		t.Fatalf("create --replicas 3: %+v, %v", ti, err)
	}
	if _, err := c.CreateTopic(ctx, "scratch.neg", client.TopicOptions{Replicas: -1}); err == nil {
		t.Fatal("replicas -1 accepted")
	}

	single := newTestNode(t)
	sc := dialNode(t, single, client.Options{})
	_, err := sc.CreateTopic(ctx, "solo", client.TopicOptions{Replicas: 3})
	refused(err, "does not replicate topics")
	if _, err := sc.CreateTopic(ctx, "solo", client.TopicOptions{Replicas: 1}); err != nil {
		t.Fatalf("--replicas 1 on a single node: %v", err)
	}
}
