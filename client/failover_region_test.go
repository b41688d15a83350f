package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// With Options.Failover, a Conn whose home region (eu) has no node left moves to a node of
// another region (us): publishes go on there as us's records, a subscription resumes there
// after its position (here: us holds none of eu's records, so it reads us's own from the
// start), and Stats names the region and counts the move. A failover node also serves Dial
// when no home node answers.
func TestFailoverToAnotherRegion(t *testing.T) {
	eu, stopEU, us := twoRegions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: eu.CAFile(), Reconnect: true, Idempotent: true, Failover: []string{us.Addr().String()}}, eu.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "fo.x", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int, region string) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := c.Publish(ctx, client.Message{Topic: "fo.x", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		for i := from; i < to; i++ {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(rec.Payload) != fmt.Sprint(i) || rec.OriginRegion != region {
				t.Fatalf("record %q from %s, want %d from %s", rec.Payload, rec.OriginRegion, i, region)
			}
		}
	}
	publish(0, 10, "eu")
	stopEU()
	publish(10, 20, "us")
	st := c.Stats()
	if st.Region != "us" || st.Failovers != 1 {
		t.Fatalf("after eu stopped: region %q, %d failovers; want us, 1", st.Region, st.Failovers)
	}
	if got, want := sub.Position().String(), "fo.x=eu:9,us:9"; got != want {
		t.Errorf("position %q, want %q", got, want)
	}

	// eu is down: a new Conn is served by the failover node from the start.
	c2, err := client.Dial(ctx, client.Options{CAFile: eu.CAFile(), Failover: []string{us.Addr().String()}}, eu.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, region := c2.Node(); region != "us" {
		t.Fatalf("Dial with eu down: region %q, want us", region)
	}
	// A failover address is checked like a home one.
	_, err = client.Dial(ctx, client.Options{Failover: []string{"a,b"}}, us.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "failover address") {
		t.Errorf("a failover address holding a comma: %v", err)
	}
}

// twoRegions starts node n1 of region eu and node u1 of region us, with one CA, not linked.
func twoRegions(t *testing.T) (eu *node.Node, stopEU func(), us *node.Node) {
	t.Helper()
	caDir := t.TempDir()
	eu, stopEU = nodetest.Start(t, func(c *node.Config) { c.CADir = caDir })
	us, _ = nodetest.Start(t, func(c *node.Config) { c.Name, c.Region, c.CADir = "u1", "us", caDir })
	return eu, stopEU, us
}

// A Conn on a failover node goes back to its home node as soon as it answers again (within
// Options.FailbackCheck, 500 ms by default): publishes go to the home region again, and the
// subscription resumes there after its position.
func TestFailbackWhenHomeReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, stopEU, restartEU := homeAndFailover(ctx, t, client.Options{})
	sub, err := c.Subscribe(ctx, "fb.x", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	step := func(i int, region string) {
		t.Helper()
		if _, err := c.Publish(ctx, client.Message{Topic: "fb.x", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(rec.Payload) != fmt.Sprint(i) || rec.OriginRegion != region {
			t.Fatalf("record %q from %s, want %d from %s", rec.Payload, rec.OriginRegion, i, region)
		}
	}
	step(0, "eu")
	stopEU()
	step(1, "us")
	restartEU()
	back := time.Now()
	for c.Stats().Region != "eu" {
		select {
		case <-ctx.Done():
			t.Fatalf("still on %s after eu returned", c.Stats().Region)
		case <-time.After(10 * time.Millisecond):
		}
	}
	took := time.Since(back)
	if took > 1500*time.Millisecond {
		t.Errorf("back home %v after eu returned, want within about 500 ms", took)
	}
	step(2, "eu")
	if st := c.Stats(); st.Failovers != 2 {
		t.Errorf("Failovers = %d, want 2 (away and back)", st.Failovers)
	}
	t.Logf("back home %v after eu returned", took.Round(time.Millisecond))
}

// TestFailbackLosesNoPublish: publishing goes on, pipelined, while the Conn moves home. A
// publish that took the failover node's stream just before the move is answered there, and
// the ones after it go home: none ends with its outcome unknown.
func TestFailbackLosesNoPublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, stopEU, restartEU := homeAndFailover(ctx, t, client.Options{FailbackCheck: 50 * time.Millisecond})
	stopEU()
	// A publish sent before the Conn read eu's shutdown fails with the lost connection (its
	// outcome unknown, no Idempotent here): this one only takes the Conn to us, so it is
	// sent again, a few times at most.
	for attempt := 1; ; attempt++ {
		_, err := c.Publish(ctx, client.Message{Topic: "fb.y", Payload: []byte("away")})
		if err == nil {
			break
		}
		if attempt == 5 || ctx.Err() != nil {
			t.Fatal(err)
		}
		t.Logf("the first publish away: %v; again", err)
	}
	if c.Stats().Region != "us" {
		t.Fatalf("on %s with eu down", c.Stats().Region)
	}
	restartEU()
	// Keep 64 publishes in flight until the Conn is home, then 64 more.
	var futures []*client.Future
	home := -1
	for i := 0; home < 0 || i < home+64; i++ {
		f, err := c.PublishAsync(ctx, client.Message{Topic: "fb.y", Payload: fmt.Appendf(nil, "%d", i)})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futures = append(futures, f)
		if len(futures) > 64 {
			if _, err := futures[len(futures)-65].Wait(ctx); err != nil {
				t.Fatalf("publish %d (of %d) as the Conn moved home: %v", len(futures)-65, i, err)
			}
		}
		if home < 0 && c.Stats().Region == "eu" {
			home = i
		}
	}
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("publish %d (the Conn was home from %d): %v", i, home, err)
		}
	}
	t.Logf("%d publishes, the Conn home from publish %d", len(futures), home)
}

// homeAndFailover starts node n1 of region eu (home) and u1 of region us (the failover), not
// linked, and dials eu with Reconnect and us as the failover (opts adds to that). stopEU
// stops eu; restartEU starts it again on its address and data.
func homeAndFailover(ctx context.Context, t *testing.T, opts client.Options) (c *client.Conn, stopEU, restartEU func()) {
	t.Helper()
	caDir, euData := t.TempDir(), t.TempDir()
	euCfg := func(c *node.Config) { c.CADir, c.DataDir = caDir, euData }
	eu, stopEU := nodetest.Start(t, euCfg)
	euAddr := eu.Addr().String()
	us, _ := nodetest.Start(t, func(c *node.Config) { c.Name, c.Region, c.CADir = "u1", "us", caDir })
	opts.CAFile, opts.Reconnect, opts.Failover = eu.CAFile(), true, []string{us.Addr().String()}
	c, err := client.Dial(ctx, opts, euAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, stopEU, func() { nodetest.Start(t, euCfg, func(c *node.Config) { c.Listen = euAddr }) }
}
