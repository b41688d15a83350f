package subscriptions

import (
	"math/rand/v2"
	"testing"
	"time"
)

// An inbox keeps, per topic, the high-watermark before its first noted advance (where a
// sweep's new cursor starts), raises a change without an advance to the first advance
// after it, and never lowers an advance to a change: checked against a model over a seeded
// schedule of notes and takes.
func TestInboxKeepsFirstAdvance(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	var in inbox
	in.init()
	model := map[uint32]uint64{}
	next := map[uint32]uint64{}
	for step := range 20000 {
		id := uint32(rng.IntN(8))
		switch rng.IntN(10) {
		case 0:
			got := in.takeAdvances()
			if len(got) != len(model) {
				t.Fatalf("step %d: took %d notes, want %d", step, len(got), len(model))
			}
			for id, want := range model {
				if got[id].from != want {
					t.Fatalf("step %d: topic %d noted from %d, want %d", step, id, got[id].from, want)
				}
			}
			clear(model)
			continue
		case 1, 2:
			in.advanced("t", id, next[id], true) // a purge, cut or delete
			if _, ok := model[id]; !ok {
				model[id] = noMove
			}
		default:
			from := next[id]
			next[id] += uint64(1 + rng.IntN(3))
			in.advanced("t", id, from, false)
			if old, ok := model[id]; !ok || old == noMove {
				model[id] = from
			}
		}
		select {
		case <-in.wake:
		default:
			t.Fatalf("step %d: a note did not wake the run goroutine", step)
		}
	}
}
