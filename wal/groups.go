package wal

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Consumer group state (see doc.go, "Consumer groups"). The node's group dispatcher owns a
// group's state while the group is live; the log only stores and loads it, each store one
// synced Pebble batch. Replication (issue 13) must carry these keys as replicated state,
// written in the entries of the acknowledgements they describe.

// prefixGroup starts a consumer group's keys.
const prefixGroup = 's'

// GroupSettings are a consumer group's settings, fixed by its first member.
type GroupSettings struct {
	Pattern    string
	AckWait    time.Duration
	MaxDeliver uint64
	DeadLetter string // "" when records that reached MaxDeliver are dropped
	Order      byte   // the wire's group order (0 none, 1 topic, 2 key)
	// Start is where the group starts on a topic it has no state of (StartOf); zero for a
	// group stored before it was kept, or one over replicated topics, whose raft entries carry
	// none: such a group stores a state of every topic it follows.
	Start GroupStart
}

// GroupStart is a group's start on the topics it has no state of.
type GroupStart struct {
	Kind GroupStartKind
	Time int64 // GroupFromTime: unix ns on the log's clock (a time, or a ClockMark for "latest")
}

// GroupStartKind says how a group starts on a topic without state.
type GroupStartKind byte

const (
	GroupStartUnknown GroupStartKind = iota // not stored: a state of every topic is
	GroupFromFirst                          // the topic's first record
	GroupFromTime                           // the first record at or after Time
	GroupFromMark                           // the same, Time a ClockMark ("latest"): loading it raises the log's clock to it
)

// StartOf is where a group that starts at s starts on topic: its first offset, or the first
// record at or after s.Time (the high-watermark when none is). ok is false for an unknown
// start or topic.
func (l *Log) StartOf(topic string, s GroupStart) (off uint64, ok bool) {
	first, _, ok := l.Bounds(topic)
	if !ok {
		return 0, false
	}
	switch s.Kind {
	case GroupFromFirst:
		return first, true
	case GroupFromTime, GroupFromMark:
		off, err := l.OffsetForTime(topic, s.Time)
		if err != nil {
			return 0, false
		}
		return max(off, first), true
	}
	return 0, false
}

// GroupEntry is one outstanding record of a group: handed out (or given back, waiting to
// be handed out again) and not yet acknowledged or dead-lettered.
type GroupEntry struct {
	Offset     uint64
	Deliveries uint32 // how often it was delivered (as stored: deliveries since the last store may be missing)
	// Origin is the record's origin region and origin offset, which name it in every
	// region; set for every entry of a state with a Vector, empty otherwise.
	Origin OriginRef
}

// OriginRef names a record in every region: its origin region and origin offset.
type OriginRef struct {
	Region string
	Offset uint64
}

// GroupState is a group's position in one topic: every offset below Floor is done; the
// entries are the outstanding records of [Floor, Next), ascending, and every other offset
// of [Floor, Next) is done; offsets from Next on were never handed out. The entries are at
// most the group's outstanding bound (node.GroupConfig.Window), however far Next is from
// Floor.
type GroupState struct {
	Floor   uint64
	Next    uint64
	Entries []GroupEntry
	// Updated is when the state was stored (the log's clock, set by SetGroup: a value
	// given to it is ignored; the origin's clock for SetMirroredGroup); zero for a state
	// stored before the log kept the time.
	Updated time.Time
	// Vector is the state's portable form (groupvector.go), nil when it is not known (a
	// state stored before vectors, or one whose vector could not be read).
	Vector *GroupVector
}

// groupStateSparse is the trailing layout number of a state whose entries are its
// outstanding records only. A state without it (stored before) lists every offset of
// [Floor, Next) it knows, done ones flagged, and an offset it does not list is outstanding,
// delivered once; decodeGroupState turns it into the sparse form.
const groupStateSparse = 1

// maxOldGroupSpan bounds the span [Floor, Next) of a state in the layout before
// groupStateSparse, which lists or implies every offset of it (it was bounded by the node's
// window, GroupConfig.Window, default 1024).
const maxOldGroupSpan = 1 << 18

// groupStateVector is the layout number of a sparse state followed by its vector
// (groupvector.go). A state without a vector is still written with groupStateSparse, so a
// node that knows only that layout reads it; one with a vector it refuses as an unknown
// layout.
const groupStateVector = 2

// groupKey is 's' | uvarint len(group) | group | topic; the settings use topic "".
func groupKey(group, topic string) []byte {
	return appendGroupKey(make([]byte, 0, 1+binary.MaxVarintLen64+len(group)+len(topic)), group, topic)
}

func appendGroupKey(k []byte, group, topic string) []byte {
	k = append(k, prefixGroup)
	k = binary.AppendUvarint(k, uint64(len(group)))
	k = append(k, group...)
	return append(k, topic...)
}

func encodeGroupSettings(s *GroupSettings) []byte {
	b := binary.AppendUvarint(nil, uint64(len(s.Pattern)))
	b = append(b, s.Pattern...)
	b = binary.AppendUvarint(b, uint64(s.AckWait))
	b = binary.AppendUvarint(b, s.MaxDeliver)
	b = binary.AppendUvarint(b, uint64(len(s.DeadLetter)))
	b = append(b, s.DeadLetter...)
	b = append(b, s.Order)
	if s.Start.Kind == GroupStartUnknown {
		return b // as stored before the start was kept
	}
	b = append(b, byte(s.Start.Kind))
	return binary.AppendUvarint(b, uint64(s.Start.Time))
}

func encodeGroupState(s *GroupState) []byte { return appendGroupState(nil, s) }

// appendGroupState appends s's encoding to b.
func appendGroupState(b []byte, s *GroupState) []byte {
	b = binary.AppendUvarint(b, s.Floor)
	b = binary.AppendUvarint(b, s.Next)
	b = binary.AppendUvarint(b, uint64(len(s.Entries)))
	for _, e := range s.Entries {
		b = binary.AppendUvarint(b, e.Offset-s.Floor)
		b = binary.AppendUvarint(b, uint64(e.Deliveries)<<1) // the low bit was "done" before groupStateSparse
	}
	// The time of the store, then the layout, after the entries: a state stored before the
	// time was kept ends with the last entry and reads back with a zero Updated; one stored
	// before the layout number ends with the time.
	var ns uint64
	if !s.Updated.IsZero() {
		ns = uint64(s.Updated.UnixNano())
	}
	b = binary.AppendUvarint(b, ns)
	if s.Vector == nil {
		return binary.AppendUvarint(b, groupStateSparse)
	}
	b = binary.AppendUvarint(b, groupStateVector)
	return appendGroupVector(b, s)
}

// TopicGroupState is a group's state of one topic, as SetGroupStates takes it.
type TopicGroupState struct {
	Topic string
	State *GroupState
}

// SetGroup stores a group's settings (when not nil) and its state in the topics of states,
// in one synced batch, and returns once it is durable: SetGroupStates of them.
func (l *Log) SetGroup(ctx context.Context, group string, settings *GroupSettings, states map[string]*GroupState) error {
	list := make([]TopicGroupState, 0, len(states))
	for _, topic := range slices.Sorted(maps.Keys(states)) {
		list = append(list, TopicGroupState{topic, states[topic]})
	}
	return l.SetGroupStates(ctx, group, settings, list)
}

// SetGroupStates stores a group's settings (when not nil) and its states (one per topic),
// in one synced batch, and returns once it is durable. Each state is stored with the log's
// time. A state of a topic deleted since Open (and not created again) is not written: the
// delete removed the group's state of it, and a store that raced the delete must not bring
// it back (l.groupMu orders the two). States in topic order cost the least (sorted here
// otherwise, in place).
func (l *Log) SetGroupStates(ctx context.Context, group string, settings *GroupSettings, states []TopicGroupState) error {
	if err := checkName("group name", group); err != nil {
		return fmt.Errorf("wal: set group %q: %w", group, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wal: set group %q: %w", group, err)
	}
	db, err := l.readDB()
	if err != nil {
		return fmt.Errorf("wal: set group %q: %w", group, err)
	}
	defer l.db.RUnlock()
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	b := db.NewBatch()
	defer b.Close()
	now := l.opts.Now()
	if settings != nil {
		k := groupKey(group, "")
		_ = b.Set(k, sealMeta(k, encodeGroupSettings(settings)), nil)
	}
	// One key and one value buffer for every state (the batch copies them): a wildcard
	// group's store holds a state of each of many topics. In key order: the memtable's
	// inserts of a batch's ascending keys each start where the last one ended.
	var k, v []byte
	byTopic := func(a, b TopicGroupState) int { return strings.Compare(a.Topic, b.Topic) }
	if !slices.IsSortedFunc(states, byTopic) {
		slices.SortFunc(states, byTopic)
	}
	for _, ts := range states {
		topic, s := ts.Topic, ts.State
		if err := checkName("group topic", topic); err != nil {
			return fmt.Errorf("wal: set group %q: %w", group, err)
		}
		if l.topicGone(topic) {
			continue
		}
		st := *s
		st.Updated = now
		k = appendGroupKey(k[:0], group, topic)
		v = appendGroupState(append(v[:0], metaHeader[:]...), &st)
		_ = b.Set(k, sealMetaInPlace(k, v), nil)
	}
	if b.Empty() {
		return nil
	}
	if err := db.Apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("wal: set group %q: %w", group, err)
	}
	return nil
}

// Group loads a group's stored settings and state; ok is false when nothing is stored.
func (l *Log) Group(group string) (settings GroupSettings, states map[string]*GroupState, ok bool, err error) {
	db, err := l.readDB()
	if err != nil {
		return settings, nil, false, fmt.Errorf("wal: load group %q: %w", group, err)
	}
	defer l.db.RUnlock()
	lower := groupKey(group, "")
	upper := append(bytes.Clone(lower), 0xff)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return settings, nil, false, fmt.Errorf("wal: load group %q: %w", group, err)
	}
	defer it.Close()
	states = make(map[string]*GroupState)
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if !bytes.HasPrefix(key, lower) {
			continue
		}
		topic := string(key[len(lower):])
		val, err := it.ValueAndErr()
		if err != nil {
			return settings, nil, false, fmt.Errorf("wal: load group %q: %w", group, err)
		}
		p, reason := openMeta(key, val, len(val)-5)
		if reason == "" && topic == "" {
			settings, reason = decodeGroupSettings(p)
			ok = true
		} else if reason == "" {
			var s *GroupState
			if s, reason = decodeGroupState(p); reason == "" {
				states[topic] = s
			}
		}
		if reason != "" {
			return settings, nil, false, &CorruptError{Topic: topic, Reason: fmt.Sprintf("group %q: %s", group, reason)}
		}
	}
	if err := it.Error(); err != nil {
		return settings, nil, false, fmt.Errorf("wal: load group %q: %w", group, err)
	}
	return settings, states, ok || len(states) > 0, nil
}

// groupReader decodes uvarints and strings, remembering the first failure.
type groupReader struct {
	b   []byte
	bad bool
}

func (r *groupReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *groupReader) str() string {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func decodeGroupSettings(p []byte) (GroupSettings, string) {
	r := &groupReader{b: p}
	s := GroupSettings{Pattern: r.str(), AckWait: time.Duration(r.uvarint()), MaxDeliver: r.uvarint(), DeadLetter: r.str()}
	if r.bad || len(r.b) < 1 {
		return s, "malformed settings"
	}
	s.Order = r.b[0]
	r.b = r.b[1:]
	if len(r.b) == 0 {
		return s, "" // stored before the start was kept
	}
	s.Start.Kind = GroupStartKind(r.b[0])
	r.b = r.b[1:]
	s.Start.Time = int64(r.uvarint())
	if r.bad || len(r.b) != 0 || s.Start.Kind == GroupStartUnknown || s.Start.Kind > GroupFromMark {
		return s, "malformed settings: start"
	}
	return s, ""
}

func decodeGroupState(p []byte) (*GroupState, string) {
	r := &groupReader{b: p}
	s := &GroupState{Floor: r.uvarint(), Next: r.uvarint()}
	n := r.uvarint()
	if r.bad || s.Next < s.Floor || n > uint64(len(r.b)) || n > s.Next-s.Floor {
		return nil, "malformed state"
	}
	entries := make([]GroupEntry, 0, n)
	var done []bool // per entry: flagged done (the layout before groupStateSparse)
	for range n {
		off, v := s.Floor+r.uvarint(), r.uvarint()
		if r.bad || off >= s.Next || v>>1 > 1<<32-1 {
			return nil, "malformed state entry"
		}
		entries = append(entries, GroupEntry{Offset: off, Deliveries: uint32(v >> 1)})
		done = append(done, v&1 == 1)
	}
	if len(r.b) > 0 { // stored since the time was kept
		if ns := r.uvarint(); ns != 0 {
			s.Updated = time.Unix(0, int64(ns))
		}
	}
	sparse := false
	if len(r.b) > 0 { // stored since the layout number was kept
		switch r.uvarint() {
		case groupStateSparse:
		case groupStateVector:
			for i := range entries {
				if done[i] {
					return nil, "malformed state: an entry flagged done"
				}
			}
			var reason string
			if s.Vector, reason = decodeGroupVector(r, entries); reason != "" {
				return nil, "malformed state: " + reason
			}
		default:
			return nil, "malformed state: unknown layout"
		}
		sparse = true
	}
	if r.bad || len(r.b) != 0 || !slices.IsSortedFunc(entries, func(a, b GroupEntry) int { return cmp.Compare(a.Offset, b.Offset) }) {
		return nil, "malformed state: trailing bytes or entries out of order"
	}
	if sparse {
		for i, d := range done {
			if d || (i > 0 && entries[i].Offset == entries[i-1].Offset) {
				return nil, "malformed state: an entry flagged done or listed twice"
			}
		}
		s.Entries = entries
		return s, ""
	}
	// The layout before groupStateSparse: its span was bounded by the node's window, so a
	// span past any window is damage (expanding it would take the node's memory).
	if s.Next-s.Floor > maxOldGroupSpan {
		return nil, fmt.Sprintf("malformed state: the layout before sparse states spanning %d offsets, at most %d", s.Next-s.Floor, maxOldGroupSpan)
	}
	s.Entries = make([]GroupEntry, 0, n)
	i := 0
	for off := s.Floor; off < s.Next; off++ {
		for i < len(entries) && entries[i].Offset < off {
			i++
		}
		switch {
		case i < len(entries) && entries[i].Offset == off && done[i]:
		case i < len(entries) && entries[i].Offset == off:
			s.Entries = append(s.Entries, entries[i])
		default:
			s.Entries = append(s.Entries, GroupEntry{Offset: off, Deliveries: 1})
		}
	}
	return s, ""
}
