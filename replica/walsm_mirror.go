package replica

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/wal"
)

// Consumer state mirrored from other regions on a replicated topic (federation's POSITION
// and GROUP_POSITION): stored at apply, in the entry's batch, only when newer than what is
// stored under its name, so a replay of the entry, a retry, or a late frame from a
// superseded link never moves it back. Every replica compares with the same stored state
// (written only by entries of the topic's group), so all store the same.

// applyMirrored applies a mirror position or a mirror group entry (driver goroutine).
func (s *WalSM) applyMirrored(b *pebble.Batch, we *WalEntry, ts int64) error {
	if we.Kind == EntryMirrorGroup {
		_, err := s.w.SetMirroredGroup(b, we.Name, we.Topic, we.Group.State)
		return err
	}
	// A mirrored position's value is the time its origin stored it.
	if cur, ok := s.w.Position(we.Name, we.Topic); ok && cur >= we.Value {
		return nil
	}
	return s.w.SetPosition(b, wal.Position{Name: we.Name, Topic: we.Topic, Value: we.Value, Vector: we.Vector}, ts)
}

// entryVector is the vector a set position stores: the entry's, except in a build with
// -tags quicmq_broken_mpos (broken_mpos.go), which drops it.
func entryVector(v map[string]uint64) map[string]uint64 {
	if dropPositionVector {
		return nil
	}
	return v
}
