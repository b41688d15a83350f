package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestReplicatedRegionWatchesNoSiblingCatalog: the nodes of a replicated region (eu) watch
// no catalog of each other (federation.Config.NoLocalCatalog), so no node learns from its
// siblings which topics they hold, and still every listing and mirror works: each eu node
// lists every eu topic once, a single-copy region (us) mirrors eu's topics and eu mirrors
// us's, exactly once, and a wildcard subscription in eu, which waits for its siblings'
// catalogs to be synced (openUpstreams), is served. Fails on a build where eu's links
// still watch `>` (the sibling holders check).
func TestReplicatedRegionWatchesNoSiblingCatalog(t *testing.T) {
	m := newMixedMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	const topics = 2
	name := func(region string, i int) string { return fmt.Sprintf("cat.%s.t%02d", region, i) }
	conns := map[string]*client.Conn{}
	for _, node := range []string{"eu-1", "eu-2", "eu-3", "us-1"} {
		conns[node] = m.dial(node)
		defer conns[node].Close()
	}
	// A subscriber in each region to the other's topics makes each mirror them.
	for i := range topics {
		for _, sub := range []struct{ node, region string }{{"us-1", "eu"}, {"eu-1", "us"}} {
			untilAvailable(ctx, t, "subscribe "+name(sub.region, i)+" at "+sub.node, func() error {
				_, err := conns[sub.node].Subscribe(ctx, name(sub.region, i), client.SubscribeOptions{From: client.Earliest})
				return err
			})
		}
	}
	eu, us := conns["eu-2"], conns["us-1"]
	// A publish the region refused as unavailable is sent again: it may then be stored
	// twice in its own region, but a mirror must still copy each stored record once.
	for i := range topics {
		for k := range 3 {
			untilAvailable(ctx, t, fmt.Sprintf("publish %s #%d", name("eu", i), k), func() error {
				_, err := eu.Publish(ctx, client.Message{Topic: name("eu", i), Payload: []byte("eu")})
				return err
			})
		}
		publishNumbered(ctx, t, us, name("us", i), 0, 2)
	}
	once := func(n, region string, i int) bool {
		_, want, _ := m.nodes[map[string]string{"eu": "eu-1", "us": "us-1"}[region]].Log().Bounds(name(region, i))
		counts := originCounts(t, m.nodes[n], name(region, i))[region]
		for off, k := range counts {
			if k != 1 {
				t.Fatalf("%s: %s's record %d of %s stored %d times", n, region, off, name(region, i), k)
			}
		}
		return uint64(len(counts)) == want
	}
	for i := range topics {
		testlog.WaitFor(t, 60*time.Second, name("eu", i)+" mirrored into us", func() bool { return once("us-1", "eu", i) })
		for _, n := range []string{"eu-1", "eu-2", "eu-3"} {
			testlog.WaitFor(t, 60*time.Second, name("us", i)+" mirrored into "+n, func() bool { return once(n, "us", i) })
		}
	}
	for _, n := range []string{"eu-1", "eu-2", "eu-3"} {
		list, err := conns[n].Topics(ctx, "cat.>")
		if err != nil {
			t.Fatalf("topics at %s: %v", n, err)
		}
		seen := map[string]int{}
		for _, ti := range list {
			seen[ti.Name]++
		}
		for i := range topics {
			for _, region := range []string{"eu", "us"} {
				if seen[name(region, i)] != 1 {
					t.Errorf("topics at %s lists %s %d times, want once", n, name(region, i), seen[name(region, i)])
				}
			}
		}
		// What the setting takes away: no sibling's catalog told this node what it holds.
		for i := range topics {
			if h := m.nodes[n].place.Holders(name("eu", i)); !slices.Equal(h, []string{n}) {
				t.Errorf("%s: holders of %s known from catalogs %v, want this node alone (no sibling catalog watched)", n, name("eu", i), h)
			}
		}
	}
	// A wildcard subscription in eu waits for its siblings' catalogs to be synced before it
	// is served: the empty watch still ends with its SUBSCRIBED.
	c := conns["eu-3"]
	var sub *client.Subscription
	untilAvailable(ctx, t, "wildcard subscribe at eu-3", func() (err error) {
		sub, err = c.Subscribe(ctx, "cat.eu.>", client.SubscribeOptions{From: client.Earliest})
		return err
	})
	defer sub.Close()
	want := uint64(0)
	for i := range topics {
		_, next, _ := m.nodes["eu-3"].Log().Bounds(name("eu", i))
		want += next
	}
	for got := uint64(0); got < want; {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatalf("wildcard subscription at eu-3 after %d records: %v", got, err)
		}
		got++
	}
}

// untilAvailable runs op again while the region answers Unavailable (its metadata leader
// moved or was being elected: common on a loaded machine), for up to a minute, as a client
// would; any other error fails the test.
func untilAvailable(ctx context.Context, t *testing.T, what string, op func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := op()
		if err == nil {
			return
		}
		if codeOf(err) != client.CodeUnavailable || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %v; asked again", what, err)
		testlog.Pause(ctx, 100*time.Millisecond) // a back-off between asks, not a wait for an event
	}
}
