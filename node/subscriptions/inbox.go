package subscriptions

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/quicmq/quicmq/internal/wire"
)

// inbox is everything other goroutines tell a subscription's run goroutine, and its wake-up:
// besides the ACK checks (Subscription.mu) the only way in to the run state. The run goroutine
// alone takes what is in it; each writer only adds and wakes it, and never blocks:
//
//   - the node's topic watcher: a new topic matches (newTopic);
//   - the log's completer, with the log's lock held: a sweep's topic advanced (advanced);
//   - the ack reader: a COMMIT whose ACKs are stored (commit), or a protocol error (fail);
//   - the node (management, a durable's lost lock) and the ack reader: the error the
//     subscription ends with (fail);
//   - a fanout handing a parked subscription back, and the log's or tail's notifications
//     (wake, handed to them as a channel).
type inbox struct {
	wake  chan struct{}              // capacity 1: a wake-up is pending or not
	err   atomic.Pointer[wire.Error] // the error to end with (the first one told)
	asked atomic.Uint64              // the highest COMMIT whose ACKs are stored (commit.go)

	mu struct {
		sync.Mutex
		newTopics []string        // matching topics created since the last take
		dirty     map[uint32]note // a sweep's topics that advanced, by ID (sweep.go)
	}
}

func (in *inbox) init() { in.wake = make(chan struct{}, 1) }

// poke wakes the run goroutine, if it is not already due to wake.
func (in *inbox) poke() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// newTopic tells of a new topic matching the pattern. The node's topic watcher.
func (in *inbox) newTopic(topic string) {
	in.mu.Lock()
	in.mu.newTopics = append(in.mu.newTopics, topic)
	in.mu.Unlock()
	in.poke()
}

// takeNewTopics takes the topics newTopic told of. Run goroutine.
func (in *inbox) takeNewTopics() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := in.mu.newTopics
	in.mu.newTopics = nil
	return t
}

// advanced notes that topic (ID id) advanced from from, or changed without an advance (a
// purge, cut or delete); the first note of a topic is kept, but a change is raised to an
// advance. The log's completer, with the log's lock held.
func (in *inbox) advanced(topic string, id uint32, from uint64, changed bool) {
	in.mu.Lock()
	if in.mu.dirty == nil {
		in.mu.dirty = make(map[uint32]note)
	}
	if old, ok := in.mu.dirty[id]; !ok || (old.from == noMove && !changed) {
		if changed {
			from = noMove
		}
		in.mu.dirty[id] = note{topic, from}
	}
	in.mu.Unlock()
	in.poke()
}

// takeAdvances takes the notes advanced made. Run goroutine.
func (in *inbox) takeAdvances() map[uint32]note {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := in.mu.dirty
	in.mu.dirty = nil
	return m
}

// peekAdvances is a copy of the notes made so far, which stay. Run goroutine, at set-up.
func (in *inbox) peekAdvances() map[uint32]note {
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.mu.dirty)
}

// commit tells of a COMMIT up to seq whose ACKs are stored. Ack reader.
func (in *inbox) commit(seq uint64) {
	if seq > in.asked.Load() {
		in.asked.Store(seq)
	}
	in.poke()
}

// fail sets the error the subscription ends with, unless one is set. The caller ends the
// subscription's context.
func (in *inbox) fail(e *wire.Error) { in.err.CompareAndSwap(nil, e) }
