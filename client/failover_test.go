package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
	"github.com/quicmq/quicmq/routing"
)

// A Conn given two nodes of one region outlives the one it is connected to: after that node
// stops, publishes go on through the other, a subscription resumes there with no record
// missing or repeated, and Node names the new node.
func TestFailoverWithinRegion(t *testing.T) {
	n1, stop1, n2, topic := twoNodeRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n1.Addr().String()+", "+n2.Addr().String(),
		client.Options{CAFile: n1.CAFile(), Reconnect: true, Idempotent: true, Name: "failover"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if name, region := c.Node(); name != "n1" || region != "eu" {
		t.Fatalf("connected to %s in %s, want n1 in eu (the first address)", name, region)
	}
	waitRelay(t, c, n1, topic)
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(0)
	read := func(upTo uint64) {
		t.Helper()
		for ; next < upTo; next++ {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("record %d: %v", next, err)
			}
			if rec.Offset != next || string(rec.Payload) != fmt.Sprint(next) {
				t.Fatalf("got offset %d %q, want %d", rec.Offset, rec.Payload, next)
			}
		}
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			ack, err := c.Publish(ctx, client.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))})
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
			if ack.Offset != uint64(i) {
				t.Fatalf("publish %d stored at %d", i, ack.Offset)
			}
		}
	}
	publish(1, 50)
	read(50)

	// Pipelined publishes with n1 stopped under them: those in flight, or queued, when its
	// connection ends are sent again through n2 and stored once, in order.
	const total = 2050
	futures := make([]*client.Future, 0, total)
	for i := 50; i < total; i++ {
		f, err := c.PublishAsync(ctx, client.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futures = append(futures, f)
		if i == 1000 {
			go stop1()
		}
	}
	for i, f := range futures {
		ack, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v", 50+i, err)
		}
		if ack.Offset != uint64(50+i) {
			t.Fatalf("publish %d stored at %d", 50+i, ack.Offset)
		}
	}
	publish(total, total+10)
	read(total + 10)
	if name, region := c.Node(); name != "n2" || region != "eu" {
		t.Fatalf("after n1 stopped: connected to %s in %s, want n2 in eu", name, region)
	}
}

// A Conn never moves to a node of another region (offsets and de-duplication are per
// region): it says so, naming both regions, and keeps trying its own region's nodes.
func TestFailoverRefusesAnotherRegion(t *testing.T) {
	caDir := t.TempDir()
	eu, stopEU := nodetest.Start(t, func(c *node.Config) { c.CADir = caDir })
	us, _ := nodetest.Start(t, func(c *node.Config) { c.Name, c.Region, c.CADir = "u1", "us", caDir })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, eu.Addr().String()+","+us.Addr().String(),
		client.Options{CAFile: eu.CAFile(), Reconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stopEU()
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	_, err = c.Publish(pctx, client.Message{Topic: "fo.x", Payload: []byte("x")})
	if err == nil {
		t.Fatal("published with the region's only node stopped")
	}
	if !strings.Contains(err.Error(), `node "u1" is in region "us", this connection's region is "eu"`) {
		t.Fatalf("the error does not say why the us node was not used: %v", err)
	}
}

// Fail-over after a cut (the node neither closes nor answers, as in a crash): publishes in
// flight through the silent node have an unknown outcome, since it may have relayed them to
// their owner before the cut. They are sent again through the other node, and the owner's
// de-duplication answers those it stored as duplicates: every record is in the log once, at
// the offset its ack gave.
func TestFailoverAfterCutStoresOnce(t *testing.T) {
	n1, _, n2, topic := twoNodeRegion(t)
	path := newCutter(t, n1.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, path.ln.LocalAddr().String()+","+n2.Addr().String(),
		client.Options{CAFile: n1.CAFile(), Reconnect: true, Idempotent: true, IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitRelay(t, c, n1, topic)

	const total = 3000
	futures := make([]*client.Future, 0, total)
	for i := range total {
		f, err := c.PublishAsync(ctx, client.Message{Topic: topic, Payload: []byte(fmt.Sprint(i + 1))})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futures = append(futures, f)
		if i == total/3 {
			// Once this one is answered, in the middle of the stream, n1's answers stop
			// reaching the client while its publishes still reach n1, which relays them to n2,
			// which stores them: their acks are lost. Then the path is cut both ways.
			go func() {
				f.Wait(ctx)
				path.mute.Store(true)
				time.Sleep(200 * time.Millisecond)
				path.cut.Store(true)
			}()
		}
	}
	offsets := map[uint64]int{}
	dups := 0
	for i, f := range futures {
		ack, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if other, ok := offsets[ack.Offset]; ok {
			t.Fatalf("publishes %d and %d both acknowledged at offset %d", other, i, ack.Offset)
		}
		offsets[ack.Offset] = i
		if ack.Duplicate {
			dups++
		}
	}
	if name, _ := c.Node(); name != "n2" {
		t.Fatalf("after the cut: connected to %s, want n2", name)
	}
	// The log holds waitRelay's record ("0") and then each publish once ("1".."3000"), at the
	// offset its ack gave.
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for off := uint64(0); off < total+1; off++ {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		p := string(rec.Payload)
		if seen[p] {
			t.Fatalf("payload %q stored twice (again at %d)", p, rec.Offset)
		}
		seen[p] = true
		if i, ok := offsets[rec.Offset]; ok && fmt.Sprint(i+1) != p {
			t.Fatalf("offset %d holds %q, acknowledged for publish %d", rec.Offset, p, i)
		}
	}
	if _, ok := offsets[0]; ok || len(offsets) != total {
		t.Fatalf("%d distinct acked offsets (warm-up at 0: %v), want %d", len(offsets), ok, total)
	}
	t.Logf("%d of %d publishes were answered as duplicates of a copy stored before the cut", dups, total)
	if dups == 0 {
		t.Fatal("no publish was stored unanswered before the cut: the resend through n2 was not tested")
	}
	// Nothing after them.
	nctx, ncancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer ncancel()
	if rec, err := sub.Next(nctx); err == nil {
		t.Fatalf("a record past the last publish: offset %d %q", rec.Offset, rec.Payload)
	}
}

// twoNodeRegion starts nodes n1 and n2 of region eu, joined, and returns a topic n2 owns (so
// that it stays available when n1 stops or is cut off).
func twoNodeRegion(t *testing.T) (n1 *node.Node, stop1 func(), n2 *node.Node, topic string) {
	t.Helper()
	caDir := t.TempDir()
	n1, stop1 = nodetest.Start(t, func(c *node.Config) {
		c.CADir, c.GossipLAN, c.GossipProfile = caDir, "127.0.0.1:0", gossip.ProfileTest
	})
	n2, _ = nodetest.Start(t, func(c *node.Config) {
		c.Name, c.CADir, c.GossipLAN, c.GossipProfile = "n2", caDir, "127.0.0.1:0", gossip.ProfileTest
		c.Join = []string{n1.Gossip().LANAddr()}
	})
	for i := 0; topic == ""; i++ {
		if cand := fmt.Sprintf("fo.t%d", i); routing.Owner(cand, []string{"n1", "n2"}) == "n2" {
			topic = cand
		}
	}
	return n1, stop1, n2, topic
}

// waitRelay publishes one record (payload "0") to topic through c, connected to n1, once n1
// knows n2 and relays to it.
func waitRelay(t *testing.T, c *client.Conn, n1 *node.Node, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		var err error
		if len(n1.Gossip().RegionMembers("eu")) == 2 {
			if _, err = c.Publish(ctx, client.Message{Topic: topic, Payload: []byte("0")}); err == nil {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("n1 did not relay to n2: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
