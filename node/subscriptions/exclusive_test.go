package subscriptions

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

func newTestLocks(t *testing.T) (*Locks, chan struct{}) {
	t.Helper()
	stop := make(chan struct{})
	return NewLocks(LockConfig{Node: "n1", Region: "eu", Timeout: time.Second, Stop: stop}), stop
}

// TestLocksOneHolderAtATime: subscribers and standbys of one durable, in a seeded order,
// each holding it for a random while: never two holders at once, every other subscriber
// refused with CodeConflict naming the durable, the node, the region and the holder's
// client, every standby served in the end, and a second release is harmless.
func TestLocksOneHolderAtATime(t *testing.T) {
	rng := testlog.Rand(t, "lock schedule")
	l, _ := newTestLocks(t)
	var holders, most, refused, served atomic.Int64
	var wg sync.WaitGroup
	const subscribers = 40
	standbys := 0
	for i := range subscribers {
		standby := rng.IntN(2) == 0
		if standby {
			standbys++
		}
		hold := rng.IntN(200)
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := "10.0.0." + string(rune('a'+i%26))
			release, e := l.Here("n2", client, "tenant/worker", "worker", standby, nil, nil)
			if e != nil {
				if standby || e.Code != wire.CodeConflict || !containsAll(e.Message, `"worker"`, "node n2", "region eu", "client 10.0.0.") {
					t.Errorf("subscriber %d (standby %v): %v", i, standby, e)
				}
				refused.Add(1)
				return
			}
			if release == nil {
				t.Errorf("subscriber %d: no lock and no error", i)
				return
			}
			h := holders.Add(1)
			for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
			}
			for range hold { // hold it a while, so that others meet it held
				runtime.Gosched()
			}
			holders.Add(-1)
			if standby {
				served.Add(1)
			}
			release()
			release()
		}()
	}
	wg.Wait()
	t.Logf("%d subscribers, %d standbys: %d refused, %d standbys served, at most %d holders at once", subscribers, standbys, refused.Load(), served.Load(), most.Load())
	if most.Load() != 1 {
		t.Fatalf("at most %d holders at once, want 1", most.Load())
	}
	if served.Load() != int64(standbys) {
		t.Fatalf("%d of %d standbys served", served.Load(), standbys)
	}
	if _, e := l.Here("n1", "c", "tenant/worker", "worker", false, nil, nil); e != nil {
		t.Fatalf("after every holder let go: %v", e)
	}
}

// TestLocksStandbyGivesUp: a standby waiting for a held durable gives up quietly when its
// subscription or its asker goes, and with CodeShuttingDown when the node stops.
func TestLocksStandbyGivesUp(t *testing.T) {
	l, nodeStop := newTestLocks(t)
	release, e := l.Here("n1", "c1", "d", "d", false, nil, nil)
	if e != nil {
		t.Fatal(e)
	}
	defer release()
	for _, what := range []string{"stop", "gone"} {
		stop, gone := make(chan struct{}), make(chan struct{})
		done := make(chan *wire.Error, 1)
		go func() {
			rel, e := l.Here("n1", "c2", "d", "d", true, stop, gone)
			if rel != nil {
				e = wire.Errorf(wire.CodeInternal, "took a held lock")
			}
			done <- e
		}()
		if what == "stop" {
			close(stop)
		} else {
			close(gone)
		}
		if e := <-done; e != nil {
			t.Fatalf("standby after %s: %v, want nil, nil", what, e)
		}
	}
	done := make(chan *wire.Error, 1)
	go func() {
		_, e := l.Here("n1", "c3", "d", "d", true, nil, nil)
		done <- e
	}()
	close(nodeStop)
	if e := <-done; e == nil || e.Code != wire.CodeShuttingDown {
		t.Fatalf("standby when the node stops: %v, want code %d", e, wire.CodeShuttingDown)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
