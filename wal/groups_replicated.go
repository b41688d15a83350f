package wal

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Consumer group state of replicated topics: the replica package's state machine writes it
// at apply, in the batch of the raft entry that carries it, under the keys SetGroup writes
// (groups.go), so that Group loads it on whichever replica serves the group next.

// SetGroup writes a consumer group's settings (when not nil) and its state of a bound
// topic (when not nil) into b, the state stored as updated at the given time (unix
// nanoseconds; the state's own Updated is ignored).
func (w *ReplicaWriter) SetGroup(b *pebble.Batch, group, topic string, settings *GroupSettings, state *GroupState, updated int64) error {
	if err := errors.Join(checkName("group name", group), checkName("group topic", topic)); err != nil {
		return fmt.Errorf("wal: replicated group %q of %q: %w", group, topic, err)
	}
	if w.bound[topic] == nil {
		return fmt.Errorf("wal: replicated group %q of %q: %w: topic not bound", group, topic, ErrInvalidRequest)
	}
	if settings != nil {
		k := groupKey(group, "")
		if err := b.Set(k, sealMeta(k, encodeGroupSettings(settings)), nil); err != nil {
			return fmt.Errorf("wal: replicated group %q: %w", group, err)
		}
	}
	if state != nil {
		if w.stagedGroups[topic] == nil {
			w.stagedGroups[topic] = make(map[string]bool)
		}
		w.stagedGroups[topic][group] = true
		st := *state
		st.Updated = time.Unix(0, updated)
		k := groupKey(group, topic)
		if err := b.Set(k, sealMeta(k, encodeGroupState(&st)), nil); err != nil {
			return fmt.Errorf("wal: replicated group %q of %q: %w", group, topic, err)
		}
	}
	return nil
}

// RemoveGroup deletes, in b, a consumer group's settings and its state of a bound topic.
func (w *ReplicaWriter) RemoveGroup(b *pebble.Batch, group, topic string) error {
	if err := errors.Join(checkName("group name", group), checkName("group topic", topic)); err != nil {
		return fmt.Errorf("wal: remove replicated group %q of %q: %w", group, topic, err)
	}
	if w.bound[topic] == nil {
		return fmt.Errorf("wal: remove replicated group %q of %q: %w: topic not bound", group, topic, ErrInvalidRequest)
	}
	if err := errors.Join(b.Delete(groupKey(group, ""), nil), b.Delete(groupKey(group, topic), nil)); err != nil {
		return fmt.Errorf("wal: remove replicated group %q of %q: %w", group, topic, err)
	}
	return nil
}
