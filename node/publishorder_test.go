package node

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestAwaitingQueueKeepsReadOrderPerTopic: batches of a few topics are queued in a seeded
// order that puts some of a topic's batches back before later ones (as a reroute does);
// each topic's batches are taken in read order, and a batch reports an earlier one of its
// topic queued exactly when one is.
func TestAwaitingQueueKeepsReadOrderPerTopic(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	p := &publisher{}
	topics := []string{"a", "b.c", "d"}
	var all []*pendingBatch
	for i := range 60 {
		all = append(all, &pendingBatch{topic: topics[rng.IntN(len(topics))], order: uint64(i + 1)})
	}
	// Queued in read order, except that a third are held and queued afterwards, in a
	// shuffled order: each must still go before its topic's later batches.
	var held []*pendingBatch
	for _, b := range all {
		if rng.IntN(3) == 0 {
			held = append(held, b)
			continue
		}
		p.insertLocked(b)
	}
	rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	for _, b := range held {
		p.insertLocked(b)
	}
	for _, topic := range topics {
		var last uint64
		for {
			b := p.takeLocked(topic)
			if b == nil {
				break
			}
			if b.topic != topic {
				t.Fatalf("took a batch of %q asking for %q", b.topic, topic)
			}
			if b.order <= last {
				t.Fatalf("topic %q: batch %d taken after %d", topic, b.order, last)
			}
			last = b.order
			probe := &pendingBatch{topic: topic, order: b.order + 1}
			next := p.takeLocked(topic)
			if got, want := p.queuedBeforeLocked(probe), next != nil && next.order < probe.order; got != want {
				t.Fatalf("topic %q: queuedBeforeLocked(%d) = %v, want %v", topic, probe.order, got, want)
			}
			if next != nil {
				p.insertLocked(next) // put back where it was
			}
		}
	}
	if p.takeLocked("a") != nil || p.takeLocked("b.c") != nil || p.takeLocked("d") != nil {
		t.Fatal("a batch is left in the queue")
	}
}

// BenchmarkAwaitingQueue is the awaiting queue of one publish stream creating topics (every
// batch's topic new, so every batch waits for its placement) with `inflight` batches
// queued: each op queues one batch, checks it for earlier ones of its topic (waitTurn) and
// takes the oldest (its topic's awaiter). Its ns/op should not grow with inflight.
//
//	go test -run '^$' -bench AwaitingQueue ./node
func BenchmarkAwaitingQueue(b *testing.B) {
	for _, inflight := range []int{16, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			p := &publisher{}
			name := func(i int) string { return fmt.Sprintf("s.t%07d", i) }
			names := make([]string, inflight+b.N)
			for i := range names {
				names[i] = name(i)
			}
			for i := range inflight {
				p.insertLocked(&pendingBatch{topic: names[i], order: uint64(i + 1)})
			}
			b.ResetTimer()
			for i := range b.N {
				nb := &pendingBatch{topic: names[inflight+i], order: uint64(inflight + i + 1)}
				p.insertLocked(nb)
				if p.queuedBeforeLocked(nb) {
					b.Fatal("a new topic has an earlier batch queued")
				}
				if p.takeLocked(names[i]) == nil {
					b.Fatalf("%s: nothing queued", names[i])
				}
			}
		})
	}
}
