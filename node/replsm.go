package node

import (
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/replica"
)

// The node's state machine for replica's driver: the metadata group's records and the
// groups of topics (replica.WalSM), their snapshots and catch-up chunks.

// nodeSM routes the metadata group's entries to the LogSM and every other group's to the
// WalSM. The driver's goroutine calls it.
type nodeSM replicated

func (s *nodeSM) Applied(group uint64) (uint64, error) {
	if group == metaGroup {
		return s.meta.Applied(group)
	}
	return s.sm.Applied(group)
}

func (s *nodeSM) Apply(b *pebble.Batch, group, applied uint64, ents []replica.Entry) ([]replica.Result, error) {
	if group == metaGroup {
		return s.meta.Apply(b, group, applied, ents)
	}
	if len(ents) > 0 {
		(*replicated)(s).noteApplied(group)
	}
	return s.sm.Apply(b, group, applied, ents)
}

// noteApplied records that group applied entries now (on the driver's goroutine).
func (r *replicated) noteApplied(group uint64) {
	at, ok := r.appliedAt.Load(group)
	if !ok {
		at, _ = r.appliedAt.LoadOrStore(group, new(atomic.Int64))
	}
	at.(*atomic.Int64).Store(time.Now().UnixNano())
}

// appliedSince says whether group applied entries at this node at or after t.
func (r *replicated) appliedSince(group uint64, t time.Time) bool {
	at, ok := r.appliedAt.Load(group)
	return ok && at.(*atomic.Int64).Load() >= t.UnixNano()
}

// The snapshots of both (metadata only) and the records their catch-ups fetch, by group
// likewise (replica.Snapshotter).

func (s *nodeSM) snapshotter(group uint64) replica.Snapshotter {
	if group == metaGroup {
		return s.meta
	}
	return s.sm
}

func (s *nodeSM) SnapshotData(group uint64) (uint64, []byte, error) {
	return s.snapshotter(group).SnapshotData(group)
}

func (s *nodeSM) Missing(group uint64, data []byte) ([]replica.Span, error) {
	return s.snapshotter(group).Missing(group, data)
}

func (s *nodeSM) ReadChunk(group uint64, log string, from, to uint64, maxBytes int) ([]byte, uint64, error) {
	return s.snapshotter(group).ReadChunk(group, log, from, to, maxBytes)
}

func (s *nodeSM) ImportChunk(b *pebble.Batch, group uint64, log string, to uint64, chunk []byte) (int, error) {
	return s.snapshotter(group).ImportChunk(b, group, log, to, chunk)
}

func (s *nodeSM) Restore(b *pebble.Batch, group, index uint64, data []byte) (func() error, error) {
	return s.snapshotter(group).Restore(b, group, index, data)
}

func (s *nodeSM) Committed() {
	s.meta.Committed()
	s.sm.Committed()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
