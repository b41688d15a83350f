package node

import (
	"sync"
	"sync/atomic"
	"time"
)

// watchdog runs a check some time after each of many operations (a proposal, a relayed
// batch) that are usually answered well before it, with one timer for all of them instead
// of one each. A timer per operation was one per record when a client's publishes go to
// many topics (one batch each): each stopped timer stays in the runtime's heap until it is
// swept, and those sweeps (runtime.(*timers).adjust) were 7% of every node's CPU in
// issue 29's many-topic run, the firing ones a goroutine each.
//
// Every check is due `after` its add (or its re-arm), so the queue is in due order and
// the timer waits for its head. A check runs at most `after/slack` late: the timer never
// fires more often than that, however many operations are queued. A cancelled check
// keeps only its small entry queued until it is due (its function is released at once).
type watchdog struct {
	after time.Duration
	mu    struct {
		sync.Mutex
		q     []*watch // due order; q[head:] pending
		head  int
		armed bool // a timer is set for q[head]
	}
}

// watchSlack is how late, as a fraction of after, a check may run.
const watchSlack = 16

// watch is one queued check; cancel it once its operation is answered.
type watch struct {
	due time.Time
	fn  atomic.Pointer[watchFunc]
}

// watchFunc checks an operation when it is due; again re-arms it for another `after`.
type watchFunc func(now time.Time) (again bool)

func newWatchdog(after time.Duration) *watchdog { return &watchdog{after: after} }

// add queues fn, to run after w.after unless cancelled before.
func (w *watchdog) add(fn watchFunc) *watch {
	e := &watch{}
	e.fn.Store(&fn)
	w.push(e, time.Now())
	return e
}

// cancel drops e's check (and what it holds); false if it ran or was cancelled already.
func (e *watch) cancel() bool { return e.fn.Swap(nil) != nil }

func (w *watchdog) push(e *watch, now time.Time) {
	e.due = now.Add(w.after)
	w.mu.Lock()
	w.mu.q = append(w.mu.q, e)
	arm := !w.mu.armed
	w.mu.armed = true
	w.mu.Unlock()
	if arm {
		time.AfterFunc(w.after, w.fire)
	}
}

// fire runs the checks due, then sets the timer for the next one (on its own goroutine,
// time.AfterFunc's).
func (w *watchdog) fire() {
	now := time.Now()
	var due []*watch
	w.mu.Lock()
	for w.mu.head < len(w.mu.q) && !w.mu.q[w.mu.head].due.After(now) {
		due = append(due, w.mu.q[w.mu.head])
		w.mu.q[w.mu.head] = nil
		w.mu.head++
	}
	w.compactLocked()
	w.mu.Unlock()
	for _, e := range due {
		fn := e.fn.Load()
		if fn == nil {
			continue // answered
		}
		if (*fn)(now) {
			w.push(e, time.Now())
		} else {
			e.fn.CompareAndSwap(fn, nil)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.head == len(w.mu.q) {
		w.mu.armed = false
		return
	}
	wait := max(time.Until(w.mu.q[w.mu.head].due), w.after/watchSlack)
	time.AfterFunc(wait, w.fire)
}

// compactLocked moves the pending checks to the front once the done ones are most of the
// queue, so that its backing array does not grow with every operation ever watched.
func (w *watchdog) compactLocked() {
	if w.mu.head < 1024 || w.mu.head < len(w.mu.q)/2 {
		return
	}
	n := copy(w.mu.q, w.mu.q[w.mu.head:])
	clear(w.mu.q[n:])
	w.mu.q, w.mu.head = w.mu.q[:n], 0
}

// pending says how many checks are queued, cancelled ones included (tests).
func (w *watchdog) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.mu.q) - w.mu.head
}
