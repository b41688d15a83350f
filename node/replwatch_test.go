package node

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestWatchdogRunsWhatIsDueOnly: of many watched operations, those answered in time never
// run their check, the others run it once, within after and a slack of it, and one
// re-armed runs again after another after; the queue does not keep what is done.
func TestWatchdogRunsWhatIsDueOnly(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 1))
		const after = time.Second
		w := newWatchdog(after)
		var mu sync.Mutex
		ran := map[int][]time.Duration{}
		start := time.Now()
		var keep []int
		for i := range 5000 {
			added := time.Now()
			again := i%100 == 7 // re-armed once
			e := w.add(func(now time.Time) bool {
				mu.Lock()
				defer mu.Unlock()
				ran[i] = append(ran[i], now.Sub(added))
				return again && len(ran[i]) == 1
			})
			if rng.IntN(10) != 0 && !again {
				e.cancel() // answered in time
			} else {
				keep = append(keep, i)
			}
			if i%500 == 0 {
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			}
		}
		time.Sleep(time.Since(start) + 3*after)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != len(keep) {
			t.Fatalf("%d checks ran, want %d (those not cancelled)", len(ran), len(keep))
		}
		for _, i := range keep {
			want := 1
			if i%100 == 7 {
				want = 2
			}
			got := ran[i]
			if len(got) != want {
				t.Fatalf("check %d ran %d times, want %d", i, len(got), want)
			}
			for k, d := range got {
				lo := time.Duration(k+1) * after
				if d < lo || d > lo+time.Duration(k+1)*after/watchSlack {
					t.Fatalf("check %d's run %d came %v after its add, want %v to %v", i, k, d, lo, lo+time.Duration(k+1)*after/watchSlack)
				}
			}
		}
		if n := w.pending(); n != 0 {
			t.Fatalf("%d checks still queued", n)
		}
		if n := len(w.mu.q); n > 1024 {
			t.Fatalf("queue holds %d done checks of 5000", n)
		}
	})
}
