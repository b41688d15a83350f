package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestWideRegionWildcardAfterKill: in a replicated region wider than its replicas (four node
// processes, --replicas 3), a node is killed with SIGKILL. A wildcard subscription through
// each survivor is served whole, every topic from one of its two other replicas: the region's
// nodes keep no catalog of each other (NoLocalCatalog), so the failed node is skipped, not
// waited for, and a topic it held is not left out. Until gossip marks the node failed a
// subscribe may be refused as unavailable (its upstream cannot be opened); it is made again.
func TestWideRegionWildcardAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	t.Parallel()
	r := newReplicaRegion(t, quicmqBinary(t), 4)
	r.Flags = func(*nodeproc.Node) []string { return []string{"--replicas", "3"} } // the last --replicas wins
	r.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	topics := make([]string, 16)
	for i := range topics {
		topics[i] = fmt.Sprintf("wk.t%02d", i)
	}
	c := dialRetrying(ctx, t, r, 0)
	for _, topic := range topics {
		for k := range 3 {
			testlog.WaitFor(t, 30*time.Second, fmt.Sprintf("record %d of %s stored", k, topic), func() bool {
				_, err := c.Publish(ctx, client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%s-%d", topic, k)})
				return err == nil
			})
		}
	}
	c.Close()

	// The victim: a node other than rc1 holding a replica of some of the topics (each node
	// holds about three quarters of them).
	rows, err := r.Topics(ctx, 0, "wk.>")
	if err != nil || len(rows) != len(topics) {
		t.Fatalf("listing wk.>: %d rows, %v", len(rows), err)
	}
	victim := r.Nodes[1].Name
	held := 0
	for _, row := range rows {
		if slices.Contains(row.Replicas, victim) {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("%s holds none of %d topics: %+v", victim, len(topics), rows)
	}
	t.Logf("killing %s, which holds %d of %d topics", victim, held, len(topics))
	r.Nodes[1].Proc().Kill()

	for _, i := range []int{0, 2, 3} {
		via := r.Nodes[i].Name
		seen := map[string][]uint64{}
		testlog.WaitForErr(t, 60*time.Second, "wk.> served whole via "+via, func() error {
			clear(seen)
			wc, err := dialNode(ctx, r, i)
			if err != nil {
				return err
			}
			defer wc.Close()
			sub, err := wc.Subscribe(ctx, "wk.>", client.SubscribeOptions{From: client.Earliest})
			if err != nil {
				return err // unavailable until gossip marks the victim failed
			}
			defer sub.Close()
			rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
			defer rcancel()
			for n := range 3 * len(topics) {
				rec, err := sub.Next(rctx)
				if err != nil {
					return fmt.Errorf("after %d records: %w", n, err)
				}
				seen[rec.Topic] = append(seen[rec.Topic], rec.Offset)
			}
			return nil
		})
		for _, topic := range topics {
			if !slices.Equal(seen[topic], []uint64{0, 1, 2}) {
				t.Fatalf("wk.> via %s with %s killed: %s delivered at %v, want 0 1 2 (all: %v)", via, victim, topic, seen[topic], seen)
			}
		}
	}
}

// dialRetrying dials node i of r until it answers.
func dialRetrying(ctx context.Context, t *testing.T, r *nodeproc.Region, i int) *client.Conn {
	t.Helper()
	var c *client.Conn
	testlog.WaitFor(t, 30*time.Second, "a connection to "+r.Nodes[i].Name, func() bool {
		var err error
		c, err = dialNode(ctx, r, i)
		return err == nil
	})
	return c
}
