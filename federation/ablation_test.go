package federation

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

// Both stream mappings mirror every record exactly once, in its origin's order: one stream
// per mirrored topic, and the shared-link ablation (every mirror of the link on one stream).
// Topics are published concurrently in random batches, the link is cut once mid-way, and
// interest in one topic goes away and comes back, so that the shared stream carries a topic
// whose mirror left (its records discarded) and then the same topic under a new number.
func TestSharedLinkAblationMirrorsExactlyOnce(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "stream-per-topic"
		if shared {
			name = "shared-link"
		}
		t.Run(name, func(t *testing.T) {
			m := newFedMesh(t)
			a := m.addNode("a", nodeOpts{mirror: []string{"abl.>"}, sharedLink: shared})
			b := m.addNode("b", nodeOpts{sharedLink: shared})
			testlog.WaitFor(t, 10*time.Second, "link a->b", func() bool { li, ok := a.link("b"); return ok && li.Connected })

			const topics, per = 12, 300
			var wg sync.WaitGroup
			publishAll := func(from, to int) {
				for i := range topics {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewPCG(uint64(i), uint64(from)))
						for k := from; k < to; {
							n := min(1+r.IntN(40), to-k)
							b.publishSeq(t, fmt.Sprintf("abl.t%02d", i), k, k+n)
							k += n
						}
					}()
				}
			}
			publishAll(0, per/2)
			b.publishSeq(t, "int.x", 0, 50)
			a.fedNow().AddInterest("int.x")
			wg.Wait()
			testlog.WaitFor(t, 10*time.Second, "int.x mirrored", func() bool { return a.next("int.x") == 50 })
			if shared {
				if got := sharedOpened(a.fedNow()); got != 1 {
					t.Fatalf("shared streams opened: %d, want 1 for %d mirrors", got, topics+1)
				}
			}

			// Interest in int.x goes; its records keep coming at the origin; it comes back.
			a.fedNow().RemoveInterest("int.x")
			testlog.WaitFor(t, 10*time.Second, "int.x mirror stopped", func() bool {
				_, ok := a.fedNow().mirrorCursors("b")["int.x"]
				return !ok
			})
			b.publishSeq(t, "int.x", 50, 120)
			publishAll(per/2, per)
			if n := a.fedNow().cutLinks("b"); n != 1 {
				t.Fatalf("cut %d connections, want 1", n)
			}
			wg.Wait()
			a.fedNow().AddInterest("int.x")

			testlog.WaitFor(t, 20*time.Second, "every topic mirrored", func() bool {
				for i := range topics {
					if a.next(fmt.Sprintf("abl.t%02d", i)) != per {
						return false
					}
				}
				return a.next("int.x") == 120
			})
			for i := range topics {
				if n := checkMirrored(t, a, b, fmt.Sprintf("abl.t%02d", i)); n != per {
					t.Fatalf("abl.t%02d: %d records mirrored, want %d", i, n, per)
				}
			}
			if n := checkMirrored(t, a, b, "int.x"); n != 120 {
				t.Fatalf("int.x: %d records mirrored, want 120", n)
			}
			if got := metricValue(t, a.registry(), "quicmq_mirror_appended_records_total", nil); got != topics*per+120 {
				t.Fatalf("quicmq_mirror_appended_records_total %v, want %d (a duplicate append or a lost one)", got, topics*per+120)
			}
			if shared {
				if got := sharedOpened(a.fedNow()); got != 1 {
					t.Fatalf("shared streams opened on the reconnected link: %d, want 1", got)
				}
			} else if sharedOpened(a.fedNow()) != 0 {
				t.Fatal("a shared stream was opened with the ablation off")
			}
		})
	}
}

// The ablation is refused by a serving node that does not have it on: nothing is mirrored
// over a shared stream it did not agree to.
func TestSharedLinkAblationRefusedWhenOff(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"abl.>"}, sharedLink: true})
	b := m.addNode("b", nodeOpts{})
	b.publishSeq(t, "abl.t", 0, 10)
	testlog.WaitFor(t, 10*time.Second, "link a->b", func() bool { li, ok := a.link("b"); return ok && li.Connected })
	testlog.WaitFor(t, 10*time.Second, "a shared stream opened and refused", func() bool {
		sl := a.fedNow().links()[0].sharedLink()
		if sl == nil {
			return false
		}
		sl.mu.Lock()
		defer sl.mu.Unlock()
		if cur := sl.mu.cur; cur != nil {
			select {
			case <-cur.done:
				var e *wire.Error
				return errors.As(cur.err, &e) && e.Code == wire.CodeForbidden
			default:
			}
		}
		return false
	})
	if got := a.next("abl.t"); got != 0 {
		t.Fatalf("%d records mirrored over a refused shared stream", got)
	}
}

// sharedOpened is how many shared streams the links of f opened on their current
// connections.
func sharedOpened(f *Federation) uint64 {
	var n uint64
	for _, l := range f.links() {
		if sl := l.sharedLink(); sl != nil {
			n += sl.opened.Load()
		}
	}
	return n
}
