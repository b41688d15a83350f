// Package nodetest starts real nodes for the tests and benchmarks of other packages (the SDK,
// the CLI): on 127.0.0.1 port 0, data in t.TempDir(), stopped by t.Cleanup. It also holds the
// pipelined publisher those benchmarks share.
package nodetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/routing"
)

// Start starts a node named n1 in region eu; mod may change its configuration. stop stops it
// gracefully and waits for Run; t.Cleanup stops it abruptly (node.StopAbruptly) unless stop
// ran first (calling stop twice is fine).
func Start(t testing.TB, mod ...func(*node.Config)) (n *node.Node, stop func()) {
	t.Helper()
	cfg := node.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "n1", Region: "eu", Logger: testlog.New(t)}
	for _, m := range mod {
		m(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("node Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("node did not stop within 20 s")
			}
		})
	}
	// At the test's end every node stops: none needs the others to see it leave gracefully
	// (node.StopAbruptly). stop, called by the test, stays graceful.
	t.Cleanup(func() { n.StopAbruptly(); stop() })
	return n, stop
}

// PublishPipelined publishes count records of payload to topic with PublishAsync; a second
// goroutine waits for the acks in order, so the window of unanswered publishes stays full.
// It returns the first failure.
func PublishPipelined(ctx context.Context, c *client.Conn, topic string, payload []byte, count int) error {
	futures := make(chan *client.Future, 4096)
	errc := make(chan error, 1)
	go func() {
		var first error
		for f := range futures {
			if _, err := f.Wait(ctx); err != nil && first == nil {
				first = err
			}
		}
		errc <- first
	}()
	var err error
	for range count {
		var f *client.Future
		if f, err = c.PublishAsync(ctx, client.Message{Topic: topic, Payload: payload}); err != nil {
			break
		}
		futures <- f
	}
	close(futures)
	return errors.Join(err, <-errc)
}

// StartTwo starts nodes n1 and n2 of region eu, joined by gossip and sharing one CA (n1's
// CAFile is the clients' CA), and waits until n1 knows n2. stop1 stops n1.
func StartTwo(t testing.TB) (n1 *node.Node, stop1 func(), n2 *node.Node) {
	t.Helper()
	caDir := t.TempDir()
	n1, stop1 = Start(t, func(c *node.Config) {
		c.CADir, c.GossipLAN, c.GossipProfile = caDir, "127.0.0.1:0", gossip.ProfileTest
	})
	n2, _ = Start(t, func(c *node.Config) {
		c.Name, c.CADir, c.GossipLAN, c.GossipProfile = "n2", caDir, "127.0.0.1:0", gossip.ProfileTest
		c.Join = []string{n1.Gossip().LANAddr()}
	})
	testlog.WaitFor(t, 20*time.Second, "nodes n1 and n2 to meet", func() bool { return len(n1.Gossip().RegionMembers("eu")) >= 2 })
	return n1, stop1, n2
}

// OwnedBy returns the first topic prefix.0, prefix.1, ... that routing places on owner among
// the region's members.
func OwnedBy(prefix, owner string, members ...string) string {
	for i := 0; ; i++ {
		if topic := fmt.Sprintf("%s.%d", prefix, i); routing.Owner(topic, members) == owner {
			return topic
		}
	}
}
