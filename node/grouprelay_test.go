package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/routing"
)

// TestGroupAcrossRegionNodes: in a region of two nodes, members of one group connected to
// both nodes (the topic is owned by eu-2) split its records: each record is delivered to
// exactly one member, and the members on both nodes get some. The group lives on eu-2 only.
func TestGroupAcrossRegionNodes(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	topic := ""
	for i := 0; topic == ""; i++ {
		if c := fmt.Sprintf("jobs.%d", i); routing.Owner(c, []string{"eu-1", "eu-2"}) == "eu-2" {
			topic = c
		}
	}
	pub := m.dial("eu-1")
	const total = 400
	groupPublish(t, pub, topic, 0, 1, nil) // the topic exists; the rest comes once every member is in
	d := newDeliveries(total)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	members := 0
	for _, node := range []string{"eu-1", "eu-1", "eu-2", "eu-2"} {
		sub := joinGroup(t, m.dial(node), topic, client.SubscribeOptions{Group: "g", AckWait: time.Minute})
		members++
		go func(i int) {
			defer func() { done <- struct{}{} }()
			consume(ctx, t, sub, i, d)
		}(members)
	}
	groupPublish(t, pub, topic, 1, total-1, nil)
	waitAll(t, d, 30*time.Second)
	cancel()
	for range members {
		<-done
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.dup) > 0 {
		t.Fatalf("records delivered to two members: %v", d.dup)
	}
	if d.count[1]+d.count[2] == 0 || d.count[3]+d.count[4] == 0 {
		t.Fatalf("records per member %v: the members on eu-1 (1, 2) and eu-2 (3, 4) should all share", d.count)
	}
	if g := m.nodes["eu-1"].liveGroup("g"); g != nil {
		t.Fatal("eu-1 runs the group too: it should relay its members to eu-2")
	}
}
