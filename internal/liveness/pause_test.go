package liveness

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A process whose goroutines wait to run is marked paused: here 32 goroutines that never
// block share one P, so each waits about 31 preemption slices (10 ms each) for its turn.
func TestPauseClockSeesStarvedProcess(t *testing.T) {
	release := pauses.acquire()
	defer release()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	start := time.Now()
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for !pauses.lastPause().After(start) && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
	if !pauses.lastPause().After(start) {
		t.Fatal("no pause seen in 10 s of a starved process")
	}
	t.Logf("pause seen %v after the starvation began", pauses.lastPause().Sub(start).Round(time.Millisecond))
}

// A pause of this process restarts the count of the peer's silence: the watch closes the
// connection no sooner than Timeout after the pause, although the peer went silent earlier.
// (Without the pause clock it closes Timeout after the crash, 600 ms too soon.)
func TestWatchCountsSilenceFromLastPause(t *testing.T) {
	const timeout, keepAlive = time.Second, 500 * time.Millisecond
	qc, done, killed := watchCrashedPeer(t, timeout, keepAlive)
	pauseAt := time.NewTimer(600 * time.Millisecond)
	var paused time.Time
	select {
	case <-pauseAt.C:
		paused = time.Now()
		pauses.last.Store(paused.UnixNano()) // what the sampler records after a stall
	case closed := <-done:
		t.Fatalf("Watch returned (closed %v) %v after the crash, before the pause", closed, time.Since(killed))
	}
	select {
	case closed := <-done:
		if !closed {
			t.Fatalf("Watch returned without closing: %v", context.Cause(qc.Context()))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection to a silent peer is open 10 s after the pause")
	}
	tick := Config{Timeout: timeout, KeepAlive: keepAlive}.withDefaults().Tick
	if after := time.Since(paused); after < timeout-tick {
		t.Errorf("closed %v after the pause, want at least the timeout %v (less a tick)", after, timeout)
	}
	t.Logf("closed %v after the crash, %v after the pause", time.Since(killed).Round(time.Millisecond), time.Since(paused).Round(time.Millisecond))
}
