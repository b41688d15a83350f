package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
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
