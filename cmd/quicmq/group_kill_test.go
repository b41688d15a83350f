package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
)

// TestSubGroupKilledMemberLosesNothing: a `quicmq sub --group` process killed with SIGKILL
// in the middle of a topic loses nothing: every record it had not acknowledged (printed or
// not) reaches another member of the group once its ack-wait passes.
func TestSubGroupKilledMemberLosesNothing(t *testing.T) {
	bin := quicmqBinary(t)
	n := startCLINode(t)
	const total = 500
	lines := make([]string, total)
	for i := range lines {
		lines[i] = "r" + strconv.Itoa(i)
	}
	publishLines(t, n, "work", lines...)

	member := nodeproc.Run(t, bin, append([]string{"sub", "--topic", "work", "--group", "g", "--ack-wait", "500ms"}, n.conn()...)...)
	seen := map[string]bool{}
	take := func() bool {
		l, err := member.Next(context.Background())
		if err == nil {
			f := strings.Split(l.Text, "\t")
			seen[f[len(f)-1]] = true
		}
		return err == nil
	}
	for len(seen) < 100 && take() { // mid-stream: it holds records it has not acknowledged
	}
	member.Kill()
	for take() { // what it printed before the kill (and may have acknowledged)
	}
	if len(seen) < 100 {
		t.Fatalf("the member printed %d records before it was killed", len(seen))
	}
	first := len(seen)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: n.ca}, n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "work", client.SubscribeOptions{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for len(seen) < total {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("the other member, with %d of %d records seen: %v", len(seen), total, err)
		}
		seen[string(r.Payload)] = true
		sub.Ack(r)
	}
	t.Logf("the killed member printed %d records; the other member got the rest", first)
}
