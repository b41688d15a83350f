package groups

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// What a group writes: its state (Store) and its dead letters; and a snapshot of its state
// for management (LiveState).

// Store writes the state of the topics that changed since the last store, in one synced
// batch, and returns once it is durable.
func (g *Group) Store(ctx context.Context) error {
	g.storeMu.Lock()
	defer g.storeMu.Unlock()
	g.mu.Lock()
	states := make([]wal.TopicGroupState, 0, len(g.mu.dirty))
	items := make([]vectorItem, 0, len(g.mu.dirty))
	// The states and their vectors in one allocation each, not one a topic: a wildcard
	// group's store holds a state of each of many topics.
	sts := make([]wal.GroupState, len(g.mu.dirty))
	vecs := make([]wal.GroupVector, len(g.mu.dirty))
	dirty := g.mu.dirty
	g.mu.dirty = nil
	for i, t := range dirty {
		t.dirty = false
		if t.dropped {
			continue // dropped (deleted) since it changed
		}
		st := &sts[i]
		st.Floor, st.Next = t.floor, t.next
		if n := t.out.len(); n > 0 {
			st.Entries = make([]wal.GroupEntry, 0, n)
		}
		for _, f := range t.out.all() { // ascending
			st.Entries = append(st.Entries, wal.GroupEntry{Offset: f.off, Deliveries: f.deliveries})
		}
		st.Vector = t.skipVectorLocked() // with the entries it snapshots (vector.go)
		states = append(states, wal.TopicGroupState{Topic: t.name, State: st})
		items = append(items, vectorItem{topic: t.name, in: t.in, st: st, tr: &t.track, learned: t.learned, vec: &vecs[i]})
		t.learned = nil
	}
	g.mu.Unlock()
	if len(states) == 0 {
		return nil
	}
	g.addVectors(items)
	// Replicated (where.go): the settings go with a replicated topic's entry, so every replica has them.
	set := g.set
	if err := g.env.Where.Store(ctx, g.name, &set, states); err != nil {
		g.mu.Lock()
		for _, t := range dirty {
			if !t.dropped {
				g.markDirtyLocked(t)
			}
		}
		g.mu.Unlock()
		return err
	}
	return nil
}

// DeadLetter appends records that reached max-deliver to the group's dead-letter topic,
// with headers saying why and from where, then marks them done. Without a dead-letter
// topic they are dropped (logged). The append is synced; the group's state is stored after
// it, so a crash in between can write a record to the dead-letter topic twice, never lose it.
func (g *Group) DeadLetter(ctx context.Context, fs []*Flight, shown func(string) string) error {
	n := g.env
	if g.set.DeadLetter == "" {
		for _, f := range fs {
			n.Log.Warn("group dropped a record after max-deliver (no dead-letter topic)", "group", g.shown, "topic", f.t.name, "offset", f.off, "deliveries", f.deliveries)
		}
		g.finishDead(fs)
		return nil
	}
	recs := make([]wal.Record, 0, len(fs))
	for _, f := range fs {
		_, err := n.Wal.ReadFunc(f.t.name, f.off, 1, 1<<30, func(r *wal.Record) error {
			hs := make([]wire.Header, 0, len(r.Headers)+6)
			hs = append(hs,
				wire.Header{Key: "quicmq-dead-letter-topic", Value: []byte(shown(f.t.name))},
				wire.Header{Key: "quicmq-dead-letter-offset", Value: strconv.AppendUint(nil, f.off, 10)},
				wire.Header{Key: "quicmq-dead-letter-group", Value: []byte(g.shown)},
				wire.Header{Key: "quicmq-dead-letter-deliveries", Value: strconv.AppendUint(nil, uint64(f.deliveries), 10)},
				wire.Header{Key: "quicmq-dead-letter-member", Value: []byte(f.last)},
				wire.Header{Key: "quicmq-dead-letter-reason", Value: []byte(f.reason)})
			for _, h := range r.Headers {
				hs = append(hs, wire.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
			}
			recs = append(recs, wal.Record{Headers: hs, Payload: append([]byte(nil), r.Payload...)})
			return nil
		})
		if err != nil && !errors.Is(err, wal.ErrOffsetOutOfRange) {
			return fmt.Errorf("read %q at offset %d: %w", f.t.name, f.off, err)
		}
	}
	if len(recs) > 0 {
		if err := n.Where.AppendDeadLetter(context.WithoutCancel(ctx), g.set.DeadLetter, recs); err != nil { // where.go
			return fmt.Errorf("append to dead-letter topic %q: %w", shown(g.set.DeadLetter), err)
		}
	}
	g.finishDead(fs)
	return g.Store(context.WithoutCancel(ctx))
}

// liveTopicState is a live group's state of one topic, as its stored state would be if it
// were stored now: floor, next offset to hand out, outstanding offsets.
type TopicState struct {
	Floor, Next uint64
	Out         []uint64
}

// LiveState is g's state of each of its topics now.
func (g *Group) LiveState() map[string]TopicState {
	g.mu.Lock()
	defer g.mu.Unlock()
	states := make(map[string]TopicState, len(g.mu.list))
	for _, t := range g.mu.list {
		st := TopicState{Floor: t.floor, Next: t.next, Out: make([]uint64, 0, t.out.len())}
		for _, f := range t.out.all() {
			st.Out = append(st.Out, f.off)
		}
		states[t.name] = st
	}
	return states
}
