package node

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// A consumer group over a wildcard follows topics created one after another by looking at
// each new one, not by listing every topic of the node at each creation (issue 35): creating
// N topics under a live group costs it O(N) names looked at, where the listing cost N²/2.
// Every record still reaches the group, each once.
func TestGroupOverWildcardLooksAtNewTopicsOnly(t *testing.T) {
	const old, created = 500, 200
	n := newTestNode(t)
	var names []string
	for i := range old {
		names = append(names, fmt.Sprintf("gw.old.%d", i))
	}
	appendOne(t, n, names, func(tp string) string { return tp })
	sub := joinGroup(t, dialNode(t, n, client.Options{}), "gw.new.>", client.SubscribeOptions{Group: "g"})
	g := n.liveGroup("g")
	if g == nil {
		t.Fatal("group g is not live")
	}
	base := g.TopicsLooked() // its set-up lists the node's topics once
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range created {
		topic := fmt.Sprintf("gw.new.%d", i)
		appendOne(t, n, []string{topic}, func(string) string { return "x" })
		rec, err := sub.Next(ctx) // the group found the topic before the next is created
		if err != nil {
			t.Fatalf("record of %s: %v", topic, err)
		}
		if rec.Topic != topic || rec.Offset != 0 {
			t.Fatalf("got %s@%d, want %s@0", rec.Topic, rec.Offset, topic)
		}
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.TopicsLooked() - base; got > 2*created {
		t.Fatalf("creating %d topics one at a time beside %d others: the group looked at %d topic names, want at most %d", created, old, got, 2*created)
	}
}

// TestGroupOverWildcardCostPerTopic measures what a consumer group over a wildcard costs per
// matching topic (issue 35; QUICMQ_WILD_GROUP_TOPICS topics "gc.N" of one record each,
// default 2,000; 100,000 on demand). It asserts only that every record reaches the group
// once; it logs: the heap a group from latest adds while every topic is idle, per topic;
// for publishes to random topics one at a time, the time from the publish's return to the
// record's arrival (p50, p99) beside a group over one literal topic; and a second group's
// read from earliest of all the records (acknowledging each) beside a group reading as many
// records of one topic.
func TestGroupOverWildcardCostPerTopic(t *testing.T) {
	topics := 2000
	if v := os.Getenv("QUICMQ_WILD_GROUP_TOPICS"); v != "" {
		var err error
		if topics, err = strconv.Atoi(v); err != nil || topics < 10 {
			t.Fatalf("QUICMQ_WILD_GROUP_TOPICS=%q: want a number >= 10", v)
		}
	}
	rng := testlog.Rand(t, "the topics published to")
	n := newTestNode(t)
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("gc.%d", i)
	}
	appendOne(t, n, names, func(string) string { return "x" })
	one := make([]wal.Record, topics)
	for i := range one {
		one[i].Payload = []byte("x")
	}
	for off := 0; off < topics; off += 512 {
		if res := n.Log().Append(context.Background(), wal.AppendRequest{Topic: "gc1.one", Records: one[off:min(off+512, topics)]}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := dialNode(t, n, client.Options{})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	before := heap()
	live := joinGroup(t, c, "gc.>", client.SubscribeOptions{Group: "live", From: client.Latest})
	added := int64(heap()) - int64(before)
	lit := joinGroup(t, c, "gc1.one", client.SubscribeOptions{Group: "lit", From: client.Latest})
	latency := func(sub *client.Subscription, pick func() string) (p50, p99 time.Duration) {
		var ds []time.Duration
		for range 100 {
			tp := pick()
			if _, err := c.Publish(ctx, client.Message{Topic: tp, Payload: []byte("y")}); err != nil {
				t.Fatal(err)
			}
			at := time.Now()
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(at))
			if rec.Topic != tp {
				t.Fatalf("group got %s, want %s", rec.Topic, tp)
			}
			if err := sub.Ack(rec); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(ds)
		return ds[len(ds)/2], ds[len(ds)*99/100]
	}
	wp50, wp99 := latency(live, func() string { return names[rng.IntN(topics)] })
	lp50, lp99 := latency(lit, func() string { return "gc1.one" })

	read := func(pattern, group string, want int) time.Duration {
		sub := joinGroup(t, c, pattern, client.SubscribeOptions{Group: group})
		begin := time.Now()
		seen := map[string]bool{}
		for len(seen) < want {
			rec, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("%s after %d records: %v", group, len(seen), err)
			}
			k := fmt.Sprintf("%s@%d", rec.Topic, rec.Offset)
			if seen[k] {
				t.Fatalf("%s: %s came twice", group, k)
			}
			seen[k] = true
			if err := sub.Ack(rec); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(begin)
	}
	// Publishes above added records to the topics: the earliest reads want every record.
	wild := read("gc.>", "early", topics+100)
	single := read("gc1.one", "early1", topics+100)
	t.Logf("a group over %d topics of one record: heap added idle %.1f MiB (%.0f B a topic); publish -> member p50 %v p99 %v (one literal topic: p50 %v p99 %v); read from earliest %v (%.0f records/s) beside one topic's %v: ratio %.2f",
		topics, float64(added)/(1<<20), float64(added)/float64(topics), wp50.Round(time.Microsecond), wp99.Round(time.Microsecond),
		lp50.Round(time.Microsecond), lp99.Round(time.Microsecond), wild.Round(time.Millisecond), float64(topics+100)/wild.Seconds(),
		single.Round(time.Millisecond), single.Seconds()/wild.Seconds())
}

// A consumer group over a wildcard of many idle topics looks, for each publish, at the
// topics that advanced, not at every topic it follows (issue 35): before, a member's every
// wake asked the log for the bounds of each followed topic.
func TestGroupOverWildcardWakeLooksAtAdvancedTopicsOnly(t *testing.T) {
	const topics, publishes = 2000, 100
	rng := testlog.Rand(t, "the topics published to")
	n := newTestNode(t)
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("gv.%d", i)
	}
	appendOne(t, n, names, func(string) string { return "x" })
	c := dialNode(t, n, client.Options{})
	sub := joinGroup(t, c, "gv.>", client.SubscribeOptions{Group: "g", From: client.Latest})
	g := n.liveGroup("g")
	if g == nil {
		t.Fatal("group g is not live")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := g.TopicsVisited()
	next := map[string]uint64{}
	for range publishes {
		tp := names[rng.IntN(topics)]
		want := next[tp] + 1
		next[tp] = want
		if _, err := c.Publish(ctx, client.Message{Topic: tp, Payload: []byte("y")}); err != nil {
			t.Fatal(err)
		}
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Topic != tp || rec.Offset != want {
			t.Fatalf("got %s@%d, want %s@%d", rec.Topic, rec.Offset, tp, want)
		}
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	// Each publish: its topic is looked at when it is handed out and once more when it has
	// nothing left; a few more looks for wakes that find it again are fine, a pass over
	// the 2,000 is not.
	if got := g.TopicsVisited() - base; got > 10*publishes {
		t.Fatalf("%d publishes to %d idle topics: the group looked at %d topics, want at most %d", publishes, topics, got, 10*publishes)
	}
}

// A consumer group over a wildcard of many idle topics passes, at an ack-wait's expiry and at
// a member's leave, over the topics with outstanding records only, not over every topic it
// follows (issue 35): before, each was a pass over all of them.
func TestGroupOverWildcardExpiryAndLeaveCostWhatIsOutstanding(t *testing.T) {
	const topics, publishes = 2000, 5
	rng := testlog.Rand(t, "the topics published to")
	n := newTestNode(t)
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("ge.%d", i)
	}
	appendOne(t, n, names, func(string) string { return "x" })
	c := dialNode(t, n, client.Options{})
	sub := joinGroup(t, c, "ge.>", client.SubscribeOptions{Group: "g", From: client.Latest, AckWait: 200 * time.Millisecond})
	g := n.liveGroup("g")
	if g == nil {
		t.Fatal("group g is not live")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := map[string]int{} // topic@offset -> deliveries seen
	for range publishes {
		tp := names[rng.IntN(topics)]
		ack, err := c.Publish(ctx, client.Message{Topic: tp, Payload: []byte("y")})
		if err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("%s@%d", tp, ack.Offset)] = 0
	}
	// Nothing is acknowledged: each record comes once, then again after its ack-wait.
	for again := 0; again < len(want); {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s@%d", rec.Topic, rec.Offset)
		seen, ok := want[k]
		if !ok {
			t.Fatalf("got %s, not published", k)
		}
		if want[k] = seen + 1; seen == 1 {
			again++
		}
	}
	sub.Close()
	select {
	case <-g.Ended(): // its only member left: its records were given back
	case <-ctx.Done():
		t.Fatal("group g did not end after its member left")
	}
	if got := g.TopicsPassed(); got == 0 || got > 40*publishes {
		t.Fatalf("ack-wait expiries and a leave over %d topics, %d with outstanding records: the group looked at %d topics, want 1 to %d", topics, publishes, got, 40*publishes)
	}
	t.Logf("ack-wait expiries and the leave looked at %d topics", g.TopicsPassed())
}
