package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestKill9DurableWildcardResumesExactly: a durable wildcard consumer over many topics of one
// record each (issue 35; QUICMQ_KILL_WILD_TOPICS, default 2,000; 100,000 on demand) reads
// them, acknowledging each and committing every 97, while its real node process is killed
// with SIGKILL twice at random points; each time it resumes on the restarted node. Nothing is
// lost (every record not acknowledged before a kill comes again), nothing committed comes
// again, no record comes twice within a run, and once everything is committed a new run of
// the durable gets nothing.
func TestKill9DurableWildcardResumesExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	topics := envInt("QUICMQ_KILL_WILD_TOPICS", 2000)
	bin := quicmqBinary(t)
	data := t.TempDir()
	rng := testlog.Rand(t, "the kill points")
	p := startNodeProcess(t, bin, data)
	conn := dial(t, p.Addr, data)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	futures := make(chan *client.Future, 1024)
	go func() {
		defer close(futures)
		for i := range topics {
			f, err := conn.PublishAsync(ctx, client.Message{Topic: fmt.Sprintf("wk.%d", i), Payload: fmt.Appendf(nil, "r%d", i)})
			if err != nil {
				t.Error(err)
				return
			}
			futures <- f
		}
	}()
	for f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		return
	}

	acked := map[string]bool{}     // topics whose record was acknowledged, in any run
	committed := map[string]bool{} // of those, the ones a Commit confirmed stored
	begin := time.Now()
	// run subscribes the durable and reads until every record stored at its set-up came,
	// or, with killAfter >= 0, until killAfter records came, then kills the node. It
	// returns how many records it got.
	run := func(cycle, killAfter int) int {
		sub, err := conn.Subscribe(ctx, "wk.>", client.SubscribeOptions{Durable: "d", NotifyCaughtUp: true})
		if err != nil {
			t.Fatalf("run %d: subscribe: %v", cycle, err)
		}
		defer sub.Close()
		t.Logf("run %d: subscribed, %d acknowledged and %d committed so far; stops after %d", cycle, len(acked), len(committed), killAfter)
		got := map[string]bool{}
		var sinceCommit []string
		for killAfter < 0 || len(got) < killAfter {
			nctx, ncancel := context.WithTimeout(ctx, 20*time.Second)
			rec, err := sub.Next(nctx)
			ncancel()
			if errors.Is(err, client.ErrCaughtUp) {
				break
			}
			if err != nil {
				t.Fatalf("run %d: after %d records: %v", cycle, len(got), err)
			}
			if rec.Offset != 0 || string(rec.Payload) != "r"+rec.Topic[len("wk."):] {
				t.Fatalf("run %d: got %s@%d = %q", cycle, rec.Topic, rec.Offset, rec.Payload)
			}
			if got[rec.Topic] {
				t.Fatalf("run %d: %s delivered twice", cycle, rec.Topic)
			}
			if committed[rec.Topic] {
				t.Fatalf("run %d: %s delivered again after its acknowledgement was committed", cycle, rec.Topic)
			}
			got[rec.Topic] = true
			if err := sub.Ack(rec); err != nil {
				t.Fatalf("run %d: ack: %v", cycle, err)
			}
			acked[rec.Topic] = true
			sinceCommit = append(sinceCommit, rec.Topic)
			if len(sinceCommit) == 97 {
				if err := sub.Commit(ctx); err != nil {
					t.Fatalf("run %d: commit: %v", cycle, err)
				}
				for _, tp := range sinceCommit {
					committed[tp] = true
				}
				sinceCommit = sinceCommit[:0]
			}
		}
		if killAfter >= 0 {
			p.Kill() // acknowledgements since the last commit may or may not be stored
			conn.Close()
			p = startNodeProcess(t, bin, data)
			conn = dial(t, p.Addr, data)
			return len(got)
		}
		if err := sub.Commit(ctx); err != nil {
			t.Fatalf("run %d: commit: %v", cycle, err)
		}
		for _, tp := range sinceCommit {
			committed[tp] = true
		}
		return len(got)
	}
	var counts []int
	for cycle := range 2 {
		left := topics - len(acked)
		counts = append(counts, run(cycle, left/4+rng.IntN(left/2+1)))
	}
	counts = append(counts, run(2, -1))
	// An acknowledgement that reached the store before a kill, though no Commit confirmed
	// it, is not delivered again: every topic was acknowledged in some run, and the run
	// after the last Commit gets nothing.
	for i := range topics {
		if tp := fmt.Sprintf("wk.%d", i); !acked[tp] {
			t.Fatalf("%s never delivered: lost", tp)
		}
	}
	if n := run(3, -1); n != 0 {
		t.Fatalf("a run after everything was committed got %d records", n)
	}
	t.Logf("%d topics: runs got %v records (acknowledged but not committed before a kill may come again); %v in all", topics, counts, time.Since(begin).Round(time.Millisecond))
}
