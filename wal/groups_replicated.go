package wal

import (
	"errors"
	"fmt"
	"math"
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
	if w.bound(topic) == nil {
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
		w.stageGroup(k, updated)
	}
	return nil
}

// RemoveGroup deletes, in b, a consumer group's settings and its state of a bound topic.
func (w *ReplicaWriter) RemoveGroup(b *pebble.Batch, group, topic string) error {
	if err := errors.Join(checkName("group name", group), checkName("group topic", topic)); err != nil {
		return fmt.Errorf("wal: remove replicated group %q of %q: %w", group, topic, err)
	}
	if w.bound(topic) == nil {
		return fmt.Errorf("wal: remove replicated group %q of %q: %w: topic not bound", group, topic, ErrInvalidRequest)
	}
	if err := errors.Join(b.Delete(groupKey(group, ""), nil), b.Delete(groupKey(group, topic), nil)); err != nil {
		return fmt.Errorf("wal: remove replicated group %q of %q: %w", group, topic, err)
	}
	w.stageGroup(groupKey(group, topic), math.MinInt64) // gone: any mirrored state is newer
	return nil
}

// stageGroup notes the Updated of a group state written in a batch not yet published, for
// SetMirroredGroup to compare with.
func (w *ReplicaWriter) stageGroup(k []byte, updated int64) {
	if w.groups == nil {
		w.groups = make(map[string]int64)
	}
	w.groups[string(k)] = updated
}

// SetMirroredGroup writes, in b, the state of a group mirrored from another region under
// name, keeping its Updated (its origin's time), unless the state stored (or written in an
// earlier batch not yet published) under name is as new or newer, as Log.SetMirroredGroup
// does for a local topic; stored reports whether it was written. It needs a Vector.
func (w *ReplicaWriter) SetMirroredGroup(b *pebble.Batch, name, topic string, s *GroupState) (stored bool, err error) {
	if err := errors.Join(checkName("group name", name), checkName("group topic", topic)); err != nil {
		return false, fmt.Errorf("wal: replicated mirrored group %q of %q: %w", name, topic, err)
	}
	if w.bound(topic) == nil {
		return false, fmt.Errorf("wal: replicated mirrored group %q of %q: %w: topic not bound", name, topic, ErrInvalidRequest)
	}
	if s.Vector == nil || s.Updated.IsZero() {
		return false, fmt.Errorf("wal: replicated mirrored group %q of %q: %w: a state without a vector or a time", name, topic, ErrInvalidRequest)
	}
	if err := checkGroupVector(s); err != nil {
		return false, fmt.Errorf("wal: replicated mirrored group %q of %q: %w", name, topic, err)
	}
	k := groupKey(name, topic)
	at, ok := w.groups[string(k)]
	if !ok {
		val, closer, err := w.l.pdb.Get(k)
		switch {
		case err == nil:
			p, reason := openMeta(k, val, len(val)-5)
			var old *GroupState
			if reason == "" {
				old, reason = decodeGroupState(p)
			}
			if reason == "" && !old.Updated.IsZero() {
				at, ok = old.Updated.UnixNano(), true
			}
			closer.Close()
		case !errors.Is(err, pebble.ErrNotFound):
			return false, fmt.Errorf("wal: replicated mirrored group %q of %q: %w", name, topic, err)
		}
	}
	if ok && at >= s.Updated.UnixNano() {
		return false, nil
	}
	if err := b.Set(k, sealMeta(k, encodeGroupState(s)), nil); err != nil {
		return false, fmt.Errorf("wal: replicated mirrored group %q of %q: %w", name, topic, err)
	}
	w.stageGroup(k, s.Updated.UnixNano())
	if w.stagedGroups[topic] == nil { // a Forget later in the batch removes it too
		w.stagedGroups[topic] = make(map[string]bool)
	}
	w.stagedGroups[topic][name] = true
	return true, nil
}

// AppendGroupVector appends the vector of s (not nil) in the stored layout of groupvector.go
// (flags, origins, the entries' origins, the outstanding records elsewhere): the form a raft
// entry carries it in (replica's set group layout 2), so that every replica stores it as
// SetGroup would.
func AppendGroupVector(dst []byte, s *GroupState) []byte { return appendGroupVector(dst, s) }

// DecodeGroupVector reads what AppendGroupVector wrote, all of p, for a state with entries
// (whose Origin it sets). p comes from the network: every count is bounded before use.
func DecodeGroupVector(p []byte, entries []GroupEntry) (*GroupVector, error) {
	r := &groupReader{b: p}
	v, reason := decodeGroupVector(r, entries)
	if reason == "" && (r.bad || len(r.b) != 0) {
		reason = "trailing bytes after the vector"
	}
	if reason != "" {
		return nil, fmt.Errorf("%w: group vector: %s", ErrInvalidRequest, reason)
	}
	return v, nil
}

// CheckGroupVector reports what keeps s's vector (if any) from being stored: the checks of
// SetGroup and SetMirroredGroup.
func CheckGroupVector(s *GroupState) error { return checkGroupVector(s) }
