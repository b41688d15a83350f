package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// TestGroupFromLatestReadsNewTopicFromItsFirstRecord: a group from "latest" reads a topic
// created after it, by its first publish, from that first record, as a plain subscription
// does (it used to start such a topic at its head when it noticed it, after that record).
func TestGroupFromLatestReadsNewTopicFromItsFirstRecord(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	groupPublish(t, c, "fresh.old", 0, 3, nil) // before the group: not for it
	sub := joinGroup(t, c, "fresh.>", client.SubscribeOptions{Group: "g", From: client.Latest})
	groupPublish(t, c, "fresh.new", 0, 2, nil) // creates the topic
	groupPublish(t, c, "fresh.old", 3, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := map[string]bool{}
	for len(got) < 3 {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		k := fmt.Sprintf("%s@%d", r.Topic, r.Offset)
		if r.Topic == "fresh.old" && r.Offset < 3 {
			t.Fatalf("%s was published before the group started", k)
		}
		got[k] = true
		sub.Ack(r)
	}
	for _, k := range []string{"fresh.new@0", "fresh.new@1", "fresh.old@3"} {
		if !got[k] {
			t.Fatalf("got %v, want fresh.new@0, fresh.new@1 and fresh.old@3", got)
		}
	}
}

// TestGroupOverWildcardRestartsExactly: a group over many topics, from earliest and from
// latest, stops mid-replay with some topics never read (a group stores no state of those:
// they restart from the start stored with its settings); after the node restarts, with more
// records in old, never-read and new topics, every record from the group's start is
// delivered, none acknowledged before the stop comes again, none twice after it. The
// schedule is seeded (printed).
func TestGroupOverWildcardRestartsExactly(t *testing.T) {
	for _, from := range []client.Start{client.Earliest, client.Latest} {
		t.Run(fmt.Sprint(from), func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			restartExactly(t, from, rand.New(rand.NewPCG(uint64(seed), 1)))
		})
	}
}

func restartExactly(t *testing.T, from client.Start, rng *rand.Rand) {
	const topics = 120
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "n1", Region: "test", Logger: testLogger(t)}
	// A window below the records: some topics with records are never handed out before the
	// stop (no unacknowledged records fill it: at most a quarter of half the records).
	cfg.Groups.Window, cfg.Groups.MemberPending, cfg.Groups.MemberBatch = 64, 64, 16
	n, stop := startStoppable(t, cfg)
	c := dialNode(t, n, client.Options{})
	counts := make([]int, topics) // records published to each topic
	publish := func(c *client.Conn, i, k int) {
		groupPublish(t, c, fmt.Sprintf("rs.t%03d", i), counts[i], k, nil)
		counts[i] += k
	}
	for i := range topics / 2 { // half the topics exist before the group
		publish(c, i, 1+rng.IntN(3))
	}
	before := append([]int(nil), counts...) // latest: these are not the group's
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, "rs.>", client.SubscribeOptions{Group: "g", From: from})
	if err != nil {
		t.Fatal(err)
	}
	for i := range topics / 4 { // records after the group started, in a quarter of them
		publish(c, i*2, 1+rng.IntN(2))
	}
	want := map[string]bool{}
	wantAll := func() {
		for i, k := range counts {
			lo := 0
			if from == client.Latest {
				lo = before[i]
			}
			for off := lo; off < k; off++ {
				want[fmt.Sprintf("rs.t%03d@%d", i, off)] = true
			}
		}
	}
	wantAll()
	read := rng.IntN(len(want)/2) + 1
	acked := map[string]bool{}
	for range read {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s@%d", r.Topic, r.Offset)
		if !want[k] {
			t.Fatalf("%s delivered: not the group's", k)
		}
		if rng.IntN(4) > 0 {
			acked[k] = true
			sub.Ack(r)
		}
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("from %v: %d records of %d read before the stop, %d acknowledged", from, read, len(want), len(acked))
	c.Close()
	stop()

	n2, _ := startStoppable(t, cfg)
	c2 := dialNode(t, n2, client.Options{})
	for i := range topics / 4 { // old and never-read topics, and new ones
		publish(c2, topics/2+i, 1)
		publish(c2, rng.IntN(topics/2), 1)
	}
	wantAll()
	sub2, err := c2.Subscribe(ctx, "rs.>", client.SubscribeOptions{Group: "g", From: from})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	got := map[string]bool{}
	for len(got)+len(acked) < len(want) {
		r, err := sub2.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records: %v; missing %v", len(got), len(want)-len(acked), err, missing(want, acked, got))
		}
		k := fmt.Sprintf("%s@%d", r.Topic, r.Offset)
		switch {
		case !want[k]:
			t.Fatalf("%s delivered after the restart: not the group's", k)
		case acked[k]:
			t.Fatalf("%s acknowledged before the restart was delivered again", k)
		case got[k]:
			t.Fatalf("%s delivered twice after the restart", k)
		}
		got[k] = true
		sub2.Ack(r)
	}
}

// missing is what want holds that neither acked nor got does (a few of them).
func missing(want, acked, got map[string]bool) []string {
	var out []string
	for k := range want {
		if !acked[k] && !got[k] && len(out) < 10 {
			out = append(out, k)
		}
	}
	return out
}

// TestGroupListsTopicsItStoredNothingOf: a group stores no state of a topic it has handed
// nothing out of, yet management lists such a topic at the group's start, with its records
// pending (from earliest: all of them; from latest: those after the group started), and a
// reset puts it at the reset's start like the others.
func TestGroupListsTopicsItStoredNothingOf(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	groupPublish(t, c, "ls.a", 0, 3, nil)
	early := joinGroup(t, c, "ls.*", client.SubscribeOptions{Group: "early"})
	late := joinGroup(t, c, "ls.*", client.SubscribeOptions{Group: "late", From: client.Latest})
	readAckGroup(t, early, 3, 3)
	early.Close()
	late.Close()
	groupPublish(t, c, "ls.a", 3, 1, nil)
	groupPublish(t, c, "ls.b", 0, 2, nil) // read by neither
	for _, w := range []struct {
		group   string
		pending uint64
		resume  map[string]uint64
	}{{"early", 3, map[string]uint64{"ls.a": 3, "ls.b": 0}}, {"late", 3, map[string]uint64{"ls.a": 3, "ls.b": 0}}} {
		info, err := c.ConsumerInfo(ctx, w.group)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for _, tp := range info.Topics {
			got[tp.Topic] = tp.Resume
		}
		if info.Pending != w.pending || len(got) != len(w.resume) || got["ls.a"] != w.resume["ls.a"] || got["ls.b"] != w.resume["ls.b"] {
			t.Fatalf("group %s: pending %d, topics %v (%+v); want %d pending, at %v", w.group, info.Pending, got, info.Topics, w.pending, w.resume)
		}
	}
	info, err := c.ResetConsumer(ctx, "late", client.AtOffset(1), client.ManageOptions{})
	if err != nil || info.Pending != 4 {
		t.Fatalf("reset to offset 1: %+v %v; want 4 pending (3 of ls.a, 1 of ls.b)", info, err)
	}
}
