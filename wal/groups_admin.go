package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// Group management at the log's level: listing every stored group, removing one, and the
// groups' states of a topic that is purged or deleted. A topic's group states are found by
// one pass over the group keys ('s'), since they are keyed by group, then topic: the pass
// costs one key per (group, topic) pair stored, and each value is bounded by the group's
// window (node.GroupConfig.Window), so a purge or delete reads at most groups x topics
// small values. Purge and delete hold l.groupMu from that pass until their batch is
// applied, and SetGroup holds it while it writes, so no group state of the topic is written
// between the pass and the batch.

// GroupInfo is one stored group.
type GroupInfo struct {
	Name string
	// Settings are valid when HasSettings (a group whose settings key was lost has states
	// only).
	Settings    GroupSettings
	HasSettings bool
	States      map[string]*GroupState // by topic
}

// Groups calls fn for each stored group whose name starts with prefix, in key order (by
// name length, then name), until fn returns false. It holds one group in memory at a time
// and an iterator open: fn must not block.
func (l *Log) Groups(prefix string, fn func(GroupInfo) bool) error {
	db, err := l.readDB()
	if err != nil {
		return fmt.Errorf("wal: list groups: %w", err)
	}
	defer l.db.RUnlock()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGroup}, UpperBound: []byte{prefixGroup + 1}})
	if err != nil {
		return fmt.Errorf("wal: list groups: %w", err)
	}
	defer it.Close()
	var cur *GroupInfo
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		group, topic, ok := parseGroupKey(key)
		if !ok {
			return &CorruptError{Reason: fmt.Sprintf("malformed group key %q", key)}
		}
		if !strings.HasPrefix(group, prefix) {
			continue
		}
		if cur != nil && cur.Name != group {
			if !fn(*cur) {
				return nil
			}
			cur = nil
		}
		if cur == nil {
			cur = &GroupInfo{Name: group, States: make(map[string]*GroupState)}
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("wal: list groups: %w", err)
		}
		if err := decodeGroupValue(key, val, group, topic, cur); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("wal: list groups: %w", err)
	}
	if cur != nil {
		fn(*cur)
	}
	return nil
}

// decodeGroupValue reads one group value (settings for topic "", else a topic's state) into g.
func decodeGroupValue(key, val []byte, group, topic string, g *GroupInfo) error {
	p, reason := openMeta(key, val, len(val)-5)
	if reason == "" && topic == "" {
		g.Settings, reason = decodeGroupSettings(p)
		g.HasSettings = true
	} else if reason == "" {
		var s *GroupState
		if s, reason = decodeGroupState(p); reason == "" {
			g.States[topic] = s
		}
	}
	if reason != "" {
		return &CorruptError{Topic: topic, Reason: fmt.Sprintf("group %q: %s", group, reason)}
	}
	return nil
}

// parseGroupKey is the inverse of groupKey.
func parseGroupKey(k []byte) (group, topic string, ok bool) {
	if len(k) < 2 || k[0] != prefixGroup {
		return "", "", false
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || n == 0 || n > uint64(len(k)-1-w) {
		return "", "", false
	}
	rest := k[1+w:]
	return string(rest[:n]), string(rest[n:]), true
}

// DeleteGroup removes a group's settings and every topic's state of it in one synced batch
// and returns how many topic states it removed (ok false: nothing was stored).
func (l *Log) DeleteGroup(ctx context.Context, group string) (topics int, ok bool, err error) {
	if err := checkName("group name", group); err != nil {
		return 0, false, fmt.Errorf("wal: delete group %q: %w", group, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, false, fmt.Errorf("wal: delete group %q: %w", group, err)
	}
	db, err := l.readDB()
	if err != nil {
		return 0, false, fmt.Errorf("wal: delete group %q: %w", group, err)
	}
	defer l.db.RUnlock()
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	lower := groupKey(group, "")
	upper := append(bytes.Clone(lower), 0xff)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, false, fmt.Errorf("wal: delete group %q: %w", group, err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		ok = true
		if len(it.Key()) > len(lower) {
			topics++
		}
	}
	if err := it.Close(); err != nil {
		return 0, false, fmt.Errorf("wal: delete group %q: %w", group, err)
	}
	if !ok {
		return 0, false, nil
	}
	b := db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(lower, upper, nil)
	if err := db.Apply(b, pebble.Sync); err != nil {
		return 0, false, fmt.Errorf("wal: delete group %q: %w", group, err)
	}
	return topics, true, nil
}

// topicGone reports whether topic was deleted since Open and not created again (as readers
// see it).
func (l *Log) topicGone(topic string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	_, gone := l.mu.deleted[topic]
	return gone && l.mu.topics[topic] == nil
}

// groupsOfTopicInto writes into b what a purge (cut: the topic's new first offset) or a
// delete (cut 0) of topic does to the groups' states of it: a delete removes them, a purge
// moves each floor (and next offset) up to cut and forgets the records below it. Committer
// goroutine, with l.groupMu held until b is applied.
func (l *Log) groupsOfTopicInto(b *pebble.Batch, topic string, del bool, cut uint64) error {
	it, err := l.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGroup}, UpperBound: []byte{prefixGroup + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	now := l.opts.Now()
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		group, t, ok := parseGroupKey(key)
		if !ok {
			return &CorruptError{Reason: fmt.Sprintf("malformed group key %q", key)}
		}
		if t != topic {
			continue
		}
		k := bytes.Clone(key)
		if del {
			_ = b.Delete(k, nil)
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		g := GroupInfo{States: make(map[string]*GroupState)}
		if err := decodeGroupValue(key, val, group, t, &g); err != nil {
			return err
		}
		s := g.States[t]
		if s.Floor >= cut {
			continue
		}
		moved := &GroupState{Floor: cut, Next: max(s.Next, cut), Updated: now}
		for _, e := range s.Entries {
			if e.Offset >= cut {
				moved.Entries = append(moved.Entries, e)
			}
		}
		_ = b.Set(k, sealMeta(k, encodeGroupState(moved)), nil)
	}
	return it.Error()
}

// GroupNames returns the names of the stored groups that start with prefix, sorted. It
// reads keys only: one per (group, topic) pair stored.
func (l *Log) GroupNames(prefix string) ([]string, error) {
	db, err := l.readDB()
	if err != nil {
		return nil, fmt.Errorf("wal: list group names: %w", err)
	}
	defer l.db.RUnlock()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGroup}, UpperBound: []byte{prefixGroup + 1}})
	if err != nil {
		return nil, fmt.Errorf("wal: list group names: %w", err)
	}
	defer it.Close()
	var names []string
	for valid := it.First(); valid; valid = it.Next() {
		group, _, ok := parseGroupKey(it.Key())
		if !ok {
			return nil, &CorruptError{Reason: fmt.Sprintf("malformed group key %q", it.Key())}
		}
		if strings.HasPrefix(group, prefix) && (len(names) == 0 || names[len(names)-1] != group) {
			names = append(names, group)
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("wal: list group names: %w", err)
	}
	slices.Sort(names)
	return names, nil
}
