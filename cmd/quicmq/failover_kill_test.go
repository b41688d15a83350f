package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// Three real node processes, regions eu, us and ap, each mirroring "events" from the others,
// and a real `quicmq sub --durable audit --failover` process at home in eu, reading the topic
// published in all three regions. eu is killed with SIGKILL mid-stream, right after its last
// records were acknowledged (before its mirrors could carry them all); the subscriber moves
// to us with its vector position and goes on while us and ap publish more; eu is restarted on
// its data and its mirrors catch up. The subscriber prints every acknowledged record of every
// region exactly once, each region's records in order.
func TestKill9HomeRegionSubscriberFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	t.Parallel()
	m := newGroupMesh(t) // the same mesh as the group failover tests
	regions, pub := m.regions, m.pub
	sub := m.startSub("--durable", "audit", "--server", m.listen("eu"), "--failover", m.listen("us")+","+m.listen("ap"))
	defer func() { t.Logf("quicmq sub's standard error:\n%s", stopSub(sub)) }()
	c := newGroupCheck(t)
	c.within = 60 * time.Second
	next := c.next
	// readUntil takes the subscriber's lines until each region of want has printed that many
	// records, failing on a duplicate, a gap or a reorder of any region.
	readUntil := func(want map[string]int) {
		t.Helper()
		c.readUntil(sub, want, nil)
	}
	publish := func(r string, from, count int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var fs []*client.Future
		for i := from; i < from+count; i++ {
			f, err := pub[r].PublishAsync(ctx, client.Message{Topic: "events", Payload: fmt.Appendf(nil, "%s-%d", r, i)})
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		for _, f := range fs {
			if _, err := f.Wait(ctx); err != nil {
				t.Fatalf("publish in %s: %v", r, err)
			}
		}
	}

	done := make(chan struct{})
	for _, r := range regions {
		go func() { defer func() { done <- struct{}{} }(); publishNoFatal(t, pub[r], r, 0, 300) }()
	}
	for range regions {
		<-done
	}
	readUntil(map[string]int{"eu": 150, "us": 150, "ap": 150})
	publish("eu", 300, 200)
	m.Kill("eu") // SIGKILL, with records on their way to the subscriber and to the mirrors
	t.Logf("eu killed; the subscriber had printed %v", next)
	for _, r := range []string{"us", "ap"} {
		publish(r, 300, 300)
	}
	readUntil(map[string]int{"us": 600, "ap": 600})
	m.Start("eu")
	readUntil(map[string]int{"eu": 500, "us": 600, "ap": 600})
	// One more record of each region: a duplicate of anything earlier would come before it.
	pub["eu"] = dialCA(t, m.listen("eu"), m.caDir())
	for _, r := range regions {
		publish(r, next[r], 1)
	}
	readUntil(map[string]int{"eu": 501, "us": 601, "ap": 601})
	t.Logf("printed %v, every record once, each region in order", next)
}

// publishNoFatal publishes REGION-i for i in [from, from+count) one at a time (from a
// goroutine: a failure is reported with t.Error).
func publishNoFatal(t *testing.T, c *client.Conn, region string, from, count int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := from; i < from+count; i++ {
		if _, err := c.Publish(ctx, client.Message{Topic: "events", Payload: fmt.Appendf(nil, "%s-%d", region, i)}); err != nil {
			t.Errorf("publish %s-%d: %v", region, i, err)
			return
		}
	}
}
