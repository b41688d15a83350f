package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/routing"
)

// The sixth demonstration: two real node processes of one region. A topic's owner
// is killed with SIGKILL; publishing and subscribing to its topics through the other node
// fail with an error naming the owner (at once while the link is down, and "failed" once
// gossip declares it), while the other node's topics keep working; when the owner returns on
// the same data directory everything resumes, with every acknowledged record in place.
// QUICMQ_PLACEMENT_KILL_CYCLES sets the number of kills (default 2).
func TestKill9OwnerMakesItsTopicsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	t.Parallel()
	cycles := 2
	if v, err := strconv.Atoi(os.Getenv("QUICMQ_PLACEMENT_KILL_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	// One region of two single-copy nodes (no --replicas): each topic has one owner.
	r := nodeproc.NewRegion(t, quicmqBinary(t), "eu", 2)
	r.Replicas, r.Options = 0, meshOptions
	caDir := r.CADir
	startEU1 := func() *nodeproc.Process { return r.Start(0) }
	startEU2 := func() *nodeproc.Process { return r.Start(1) }
	eu1 := startEU1()
	eu2 := startEU2()
	// Topics are placed over the members known when they are created: publish only once
	// both nodes know each other (their links are up).
	for _, p := range []*nodeproc.Process{eu1, eu2} {
		select {
		case <-p.LinkUp():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no link up within 30 s\n%s", p.Name, p.Tail())
		}
	}
	conn := dialCA(t, eu1.Addr, caDir)

	// One topic per owner, as both nodes compute it.
	var onEU1, onEU2 string
	for i := 0; onEU1 == "" || onEU2 == ""; i++ {
		topic := fmt.Sprintf("place.t%d", i)
		if routing.Owner(topic, []string{"eu1", "eu2"}) == "eu2" {
			onEU2 = topic
		} else {
			onEU1 = topic
		}
	}

	// publish sends one record through eu1, bounded in time.
	publish := func(topic, payload string) (client.Ack, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return conn.Publish(ctx, client.Message{Topic: topic, Payload: []byte(payload)})
	}
	// waitPublish retries until a publish to topic succeeds (placement ready, link up).
	waitPublish := func(topic, payload string, within time.Duration) (client.Ack, time.Duration) {
		t.Helper()
		var ack client.Ack
		took := testlog.WaitForErr(t, within, "a publish to "+topic+" accepted", func() error {
			var err error
			if ack, err = publish(topic, payload); err != nil {
				return fmt.Errorf("%w\neu2 log:\n%s", err, eu2.Tail())
			}
			return nil
		})
		return ack, took
	}

	acked := map[uint64]string{} // onEU2's acknowledged records
	seq := 0
	publishBatch := func(count int) {
		for range count {
			p := fmt.Sprintf("r%d", seq)
			ack, _ := waitPublish(onEU2, p, 30*time.Second)
			if prev, dup := acked[ack.Offset]; dup {
				t.Fatalf("offset %d of %s acknowledged twice (%q, %q)", ack.Offset, onEU2, prev, p)
			}
			acked[ack.Offset] = p
			seq++
		}
	}
	publishBatch(100)
	waitPublish(onEU1, "x", 10*time.Second)

	for cycle := range cycles {
		eu2.Kill()
		killed := time.Now()
		var firstErr, failedErr time.Duration
		var lastErr error
		testlog.WaitForErr(t, 30*time.Second, fmt.Sprintf("cycle %d: an error saying eu2 failed", cycle), func() error {
			_, err := publish(onEU2, "during-outage")
			var ce *client.Error
			switch {
			case err == nil:
				t.Fatalf("cycle %d: a publish to %s was acknowledged while its owner eu2 was dead", cycle, onEU2)
			case errors.As(err, &ce) && ce.Code == client.CodeUnavailable && strings.Contains(ce.Message, `"eu2"`):
				if firstErr == 0 {
					firstErr = time.Since(killed)
				}
				if strings.Contains(ce.Message, "has failed") {
					failedErr = time.Since(killed)
				}
			}
			lastErr = err
			if failedErr == 0 {
				return fmt.Errorf("last: %v", lastErr)
			}
			return nil
		})
		t.Logf("cycle %d: first error naming eu2 %v after the kill, gossip's failure %v after; the error: %v",
			cycle, firstErr.Round(time.Millisecond), failedErr.Round(time.Millisecond), lastErr)

		// eu1's own topics are unaffected, and subscribing to eu2's says why it cannot.
		if _, err := publish(onEU1, "y"); err != nil {
			t.Fatalf("cycle %d: publish to %s (owned by the live eu1) failed: %v", cycle, onEU1, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := conn.Subscribe(ctx, onEU2, client.SubscribeOptions{})
		cancel()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != client.CodeUnavailable || !strings.Contains(ce.Message, `"eu2"`) {
			t.Fatalf("cycle %d: subscribe to %s while eu2 is dead: %v; want unavailable naming eu2", cycle, onEU2, err)
		}

		eu2 = startEU2()
		p := fmt.Sprintf("r%d", seq)
		ack, back := waitPublish(onEU2, p, 60*time.Second)
		acked[ack.Offset] = p
		t.Logf("cycle %d: eu2 restarted; publishes through eu1 accepted again %v after its start", cycle, back.Round(time.Millisecond))
		seq++
		publishBatch(50)
	}

	// Every acknowledged record is there, at its offset, once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := conn.Subscribe(ctx, onEU2, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var last uint64
	for found := 0; found < len(acked); {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d acknowledged records: %v", found, len(acked), err)
		}
		if want, ok := acked[rec.Offset]; ok {
			if string(rec.Payload) != want {
				t.Fatalf("offset %d holds %q, acknowledged as %q", rec.Offset, rec.Payload, want)
			}
			found++
		}
		last = rec.Offset
	}
	t.Logf("%d acknowledged records of %s read back through eu1, all at their offsets (last offset %d)", len(acked), onEU2, last)
}
