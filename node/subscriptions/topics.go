package subscriptions

import (
	"errors"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// The topics of a subscription: adding one as it appears (the topic watcher tells the run
// goroutine, which adds it), where its cursor starts, and CAUGHT_UP.

// checkCaughtUp buffers CAUGHT_UP, once, when the client asked for it and every topic
// matching at set-up has been sent up to its head at set-up (this node's cursors, and each
// upstream's own CAUGHT_UP). It reports whether it buffered the frame. Run goroutine.
func (sub *subRun) checkCaughtUp() bool {
	if !sub.caughtUp || sub.caughtOK || sub.sweep.pending != nil {
		return false // with a sweep: not before every cursor of set-up is made
	}
	for c, head := range sub.catchUp {
		if c.next >= head {
			delete(sub.catchUp, c)
		}
	}
	if len(sub.catchUp) > 0 || len(sub.upWait) > 0 {
		return false
	}
	sub.caughtOK = true
	sub.w.Buffer(&wire.CaughtUp{Topics: sub.setupN + sub.upTopics})
	return true
}

func (sub *subRun) takeNewTopics() *wire.Error {
	if sub.sweep.on {
		return nil // the node's advances name new topics too (sweep.go)
	}
	for _, t := range sub.in.takeNewTopics() {
		if sub.owner != "" {
			break // served by the owner's upstream, whatever this node holds
		}
		if _, up := sub.upIndex[t]; up {
			continue // a replica created here of a topic an upstream serves already
		}
		if err := sub.addTopic(t, true); err != nil {
			return err
		}
	}
	return nil
}

// addTopic starts a cursor on topic, unless one exists. created says the topic appeared
// after the subscription began: it is read from its start whatever the start position.
func (sub *subRun) addTopic(topic string, created bool) *wire.Error {
	if _, ok := sub.byTopic[topic]; ok {
		return nil
	}
	n := sub.h
	c := &cursor{topic: topic, scan: n.wal.NewScanner(topic), tail: n.tails.Acquire(topic)}
	_ = c.scan.Check() // bound to the topic as it is: a delete of it ends the cursor
	// Register for wake-ups before reading the bounds, so no append is missed: with the
	// shared tail, its (a connection's subscriptions woken one after the other).
	var stop func()
	if c.tail != nil {
		stop = c.tail.Watch(sub.conn, sub.in.wake)
	} else {
		stop = n.wal.Notify(topic, sub.in.wake)
	}
	c.cancel = func() {
		stop()
		n.tails.Release(c.tail)
		c.tail = nil
	}
	next, stored, err := sub.startOffset(topic, created)
	if err != nil {
		c.cancel()
		return err
	}
	c.next, c.stored, c.skip = next, stored, sub.vec.skip(topic)
	sub.beginStored(topic, next, stored > 0) // vector.go
	sub.mu.Lock()
	c.pub = next
	sub.mu.curs = append(sub.mu.curs, c)
	sub.mu.Unlock()
	sub.byTopic[topic] = c
	sub.cursors = append(sub.cursors, c)
	return nil
}

// startOffset is where the cursor on topic starts, and 1 + the durable consumer's stored
// position there (0: none). An explicit offset past the topic's head (beyond the offset the
// next record gets) is refused with CodeOffsetOutOfRange naming the head, for a topic that
// exists at set-up; one below the first retained record is raised to it.
func (sub *subRun) startOffset(topic string, created bool) (uint64, uint64, *wire.Error) {
	n := sub.h
	if sub.req.Durable != "" {
		// A replicated topic's new leader may not have applied all its term committed: read
		// the durable's positions (its own, those mirrored here) only once it has.
		if e := n.topics.PositionBarrier(sub.ctx, sub.req.Durable, topic); e != nil {
			return 0, 0, e
		}
	}
	if next, ok, e := sub.vectorResume(topic); ok || e != nil { // vector.go
		return next, next, e
	}
	if sub.req.Durable != "" {
		// Resume, not Position + 1: a consumer reset to offset 0 has acknowledged nothing
		// there, yet resumes at 0 rather than at its start position.
		resume, ok, err := n.wal.Resume(sub.req.Durable, topic)
		if err != nil {
			return 0, 0, wire.Errorf(wire.CodeInternal, "read position of %q on %q: %v", sub.req.Durable, topic, err)
		}
		if ok {
			return resume, resume, nil
		}
	}
	first, next, _ := n.wal.Bounds(topic)
	if created {
		return first, 0, nil
	}
	switch sub.req.Start {
	case wire.StartLatest:
		if sub.sweep.on {
			return sub.head, 0, nil
		}
		if v, ok := sub.latest[topic]; ok {
			return v, 0, nil
		}
		return next, 0, nil
	case wire.StartOffset:
		if sub.req.StartValue > next {
			return 0, 0, wire.Errorf(wire.CodeOffsetOutOfRange, "start offset %d of topic %q is past its head: the next record gets offset %d (start at most there)",
				sub.req.StartValue, sub.actor.ClientName(topic), next)
		}
		return max(sub.req.StartValue, first), 0, nil
	case wire.StartTime:
		off, err := n.wal.OffsetForTime(topic, int64(sub.req.StartValue))
		if err != nil && !errors.Is(err, wal.ErrUnknownTopic) {
			return 0, 0, wire.Errorf(wire.CodeInternal, "find time %d in %q: %v", sub.req.StartValue, topic, err)
		}
		return max(off, first), 0, nil
	}
	return first, 0, nil
}
