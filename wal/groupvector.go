package wal

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// A group's portable position (docs/architecture.md, "Portable positions").
//
// A group acknowledges record by record, so what it has done is not a prefix of each origin's
// order as a durable's position is: it is, per origin region, every record up to Through[origin]
// except the outstanding ones (handed out or given back, not yet acknowledged). Each origin's
// order is kept in every region's log (I7), so that set means the same in every region. The
// outstanding set is bounded by the group's window: it is the entries (each with its origin
// and origin offset) plus Elsewhere, outstanding records not at an offset of this log before
// Next (a resume from another region's vector whose records come later, or never).
//
// Layout groupStateVector, after the layout number of a sparse state (groups.go):
//
//	flags uvarint (bit 0: Skipping)
//	n uvarint | n x (uvarint len, region, uvarint through)   regions ascending, distinct, non-empty
//	per entry: uvarint origin index (< n) | uvarint origin offset (<= that region's through)
//	m uvarint | m x (uvarint origin index, uvarint origin offset)   ascending, none an entry's
//
// Entries of one origin have ascending origin offsets (their offsets ascend and the origin's
// order is kept in the log).

// GroupVector is a group state's portable form.
type GroupVector struct {
	// Through is, per origin region, the last origin offset the group handed out or skipped:
	// every record of that origin at or below it is done, unless it is outstanding (an entry
	// or in Elsewhere). An origin it does not name has nothing done.
	Through map[string]uint64
	// Elsewhere are outstanding records Through covers that are not among the entries.
	Elsewhere []OriginRef
	// Skipping says the group resumed from a vector of another region: records from Next on
	// that Through covers and that are not outstanding are done (skipped, not handed out).
	// Without it Through is the vector of the records below Next.
	Skipping bool
}

// Bounds of a stored group vector, checked before anything is allocated.
const (
	groupVectorSkipping = 1 << 0
	MaxGroupElsewhere   = 1 << 16 // outstanding records of a vector not among its entries
)

// Done reports whether the vector's records done include origin's record at offset, given the
// state's entries.
func (v *GroupVector) Done(entries []GroupEntry, ref OriginRef) bool {
	last, ok := v.Through[ref.Region]
	if !ok || ref.Offset > last {
		return false
	}
	for _, e := range entries {
		if e.Origin == ref {
			return false
		}
	}
	return !slices.Contains(v.Elsewhere, ref)
}

func appendGroupVector(b []byte, s *GroupState) []byte {
	v := s.Vector
	var flags uint64
	if v.Skipping {
		flags |= groupVectorSkipping
	}
	b = binary.AppendUvarint(b, flags)
	// A state's vector names one origin or a few (one per region): their sorted names are
	// kept in a small array and an origin's index found by a linear look, so that a store of
	// many states (a wildcard group's) allocates nothing here per state.
	var arr [8]string
	regions := arr[:0]
	for r := range v.Through {
		regions = append(regions, r)
	}
	slices.Sort(regions)
	index := func(region string) uint64 { // 0 for a region not named, as before
		if i, ok := slices.BinarySearch(regions, region); ok {
			return uint64(i)
		}
		return 0
	}
	b = binary.AppendUvarint(b, uint64(len(regions)))
	for _, r := range regions {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
		b = binary.AppendUvarint(b, v.Through[r])
	}
	for _, e := range s.Entries {
		b = binary.AppendUvarint(b, index(e.Origin.Region))
		b = binary.AppendUvarint(b, e.Origin.Offset)
	}
	els := v.Elsewhere
	if !slices.IsSortedFunc(els, compareRef) {
		els = slices.Clone(els)
		slices.SortFunc(els, compareRef)
	}
	b = binary.AppendUvarint(b, uint64(len(els)))
	for _, o := range els {
		b = binary.AppendUvarint(b, index(o.Region))
		b = binary.AppendUvarint(b, o.Offset)
	}
	return b
}

func compareRef(a, b OriginRef) int {
	if c := strings.Compare(a.Region, b.Region); c != 0 {
		return c
	}
	return cmp.Compare(a.Offset, b.Offset)
}

// decodeGroupVector reads a state's vector after its layout number, setting the entries'
// origins; the reason names what is malformed.
func decodeGroupVector(r *groupReader, entries []GroupEntry) (*GroupVector, string) {
	flags := r.uvarint()
	n := r.uvarint()
	switch {
	case r.bad:
		return nil, "vector truncated"
	case flags&^groupVectorSkipping != 0:
		return nil, fmt.Sprintf("vector flags %#x unknown", flags)
	case n > maxVector:
		return nil, fmt.Sprintf("vector of %d origins, at most %d", n, maxVector)
	case n*2 > uint64(len(r.b)):
		return nil, fmt.Sprintf("vector of %d origins in %d bytes", n, len(r.b))
	}
	v := &GroupVector{Through: make(map[string]uint64, n), Skipping: flags&groupVectorSkipping != 0}
	regions := make([]string, 0, n)
	for range n {
		reg, through := r.str(), r.uvarint()
		switch {
		case r.bad:
			return nil, "vector origin truncated"
		case reg == "":
			return nil, "vector origin with an empty region"
		case len(regions) > 0 && reg <= regions[len(regions)-1]:
			return nil, fmt.Sprintf("vector origin %q out of order or twice", reg)
		}
		regions = append(regions, reg)
		v.Through[reg] = through
	}
	ref := func(what string) (OriginRef, string) {
		i, off := r.uvarint(), r.uvarint()
		switch {
		case r.bad:
			return OriginRef{}, what + " origin truncated"
		case i >= uint64(len(regions)):
			return OriginRef{}, fmt.Sprintf("%s origin index %d of %d origins", what, i, len(regions))
		case off > v.Through[regions[i]]:
			return OriginRef{}, fmt.Sprintf("%s origin offset %d of %q past the vector's %d", what, off, regions[i], v.Through[regions[i]])
		}
		return OriginRef{Region: regions[i], Offset: off}, ""
	}
	lastOf := make(map[string]uint64, n)
	for i := range entries {
		o, reason := ref("entry")
		if reason != "" {
			return nil, reason
		}
		if last, ok := lastOf[o.Region]; ok && o.Offset <= last {
			return nil, fmt.Sprintf("entry origin offsets of %q not ascending (%d after %d)", o.Region, o.Offset, last)
		}
		lastOf[o.Region] = o.Offset
		entries[i].Origin = o
	}
	m := r.uvarint()
	switch {
	case r.bad:
		return nil, "vector outstanding count truncated"
	case m > MaxGroupElsewhere:
		return nil, fmt.Sprintf("%d outstanding records elsewhere, at most %d", m, MaxGroupElsewhere)
	case m*2 > uint64(len(r.b)):
		return nil, fmt.Sprintf("%d outstanding records in %d bytes", m, len(r.b))
	}
	for range m {
		o, reason := ref("outstanding")
		if reason != "" {
			return nil, reason
		}
		if k := len(v.Elsewhere); k > 0 && compareRef(v.Elsewhere[k-1], o) >= 0 {
			return nil, fmt.Sprintf("outstanding record %s@%d out of order or twice", o.Region, o.Offset)
		}
		for _, e := range entries {
			if e.Origin == o {
				return nil, fmt.Sprintf("outstanding record %s@%d is an entry too", o.Region, o.Offset)
			}
		}
		v.Elsewhere = append(v.Elsewhere, o)
	}
	return v, ""
}

// checkGroupVector refuses a state whose vector the layout cannot hold.
func checkGroupVector(s *GroupState) error {
	v := s.Vector
	if v == nil {
		return nil
	}
	if len(v.Through) > maxVector || len(v.Elsewhere) > MaxGroupElsewhere {
		return fmt.Errorf("%w: group vector of %d origins and %d outstanding elsewhere, at most %d and %d", ErrInvalidRequest, len(v.Through), len(v.Elsewhere), maxVector, MaxGroupElsewhere)
	}
	for r := range v.Through {
		if err := checkName("group vector region", r); err != nil {
			return err
		}
	}
	for _, e := range append(slices.Clone(v.Elsewhere), entryOrigins(s.Entries)...) {
		if last, ok := v.Through[e.Region]; !ok || e.Offset > last {
			return fmt.Errorf("%w: group vector: outstanding %s@%d not covered by its vector", ErrInvalidRequest, e.Region, e.Offset)
		}
	}
	// What the decoder checks: a state it would refuse is refused here.
	if _, reason := decodeGroupState(encodeGroupState(s)); reason != "" {
		return fmt.Errorf("%w: group vector: %s", ErrInvalidRequest, reason)
	}
	return nil
}

func entryOrigins(es []GroupEntry) []OriginRef {
	out := make([]OriginRef, len(es))
	for i, e := range es {
		out[i] = e.Origin
	}
	return out
}

// GroupStatesOf calls fn for each stored group state of topic (of every group, those
// mirrored from other regions too), until fn returns false. It is one pass over the group
// keys (as groups_admin.go's purge is): fn must not block.
func (l *Log) GroupStatesOf(topic string, fn func(group string, s *GroupState) bool) error {
	db, err := l.readDB()
	if err != nil {
		return fmt.Errorf("wal: group states of %q: %w", topic, err)
	}
	defer l.db.RUnlock()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGroup}, UpperBound: []byte{prefixGroup + 1}})
	if err != nil {
		return fmt.Errorf("wal: group states of %q: %w", topic, err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		group, t, ok := parseGroupKey(key)
		if !ok {
			return &CorruptError{Reason: fmt.Sprintf("malformed group key %q", key)}
		}
		if t != topic {
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("wal: group states of %q: %w", topic, err)
		}
		p, reason := openMeta(key, val, len(val)-5)
		var s *GroupState
		if reason == "" {
			s, reason = decodeGroupState(p)
		}
		if reason != "" {
			return &CorruptError{Topic: topic, Reason: fmt.Sprintf("group %q: %s", group, reason)}
		}
		if !fn(group, s) {
			return nil
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("wal: group states of %q: %w", topic, err)
	}
	return nil
}

// SetMirroredGroup stores the state of a group mirrored from another region under name, in
// one synced write, keeping its Updated (the time its origin stored it), unless the state
// stored under name is as new or newer (a late frame from a superseded link); stored reports
// whether it was written. A replicated topic is refused (*ReplicatedError), as SetPosition
// refuses one. It needs a Vector: the rest of a mirrored state means nothing here.
func (l *Log) SetMirroredGroup(ctx context.Context, name, topic string, s *GroupState) (stored bool, err error) {
	for _, c := range []struct{ what, v string }{{"group name", name}, {"group topic", topic}} {
		if err := checkName(c.what, c.v); err != nil {
			return false, fmt.Errorf("wal: set mirrored group %q: %w", name, err)
		}
	}
	if s.Vector == nil {
		return false, fmt.Errorf("wal: set mirrored group %q: %w: a state without a vector", name, ErrInvalidRequest)
	}
	if err := l.refuseReplicated(topic); err != nil { // written only through its raft group, as positions are
		return false, fmt.Errorf("wal: set mirrored group %q: %w", name, err)
	}
	if err := checkGroupVector(s); err != nil {
		return false, fmt.Errorf("wal: set mirrored group %q: %w", name, err)
	}
	db, err := l.readDB()
	if err != nil {
		return false, fmt.Errorf("wal: set mirrored group %q: %w", name, err)
	}
	defer l.db.RUnlock()
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	if l.topicGone(topic) {
		return false, nil
	}
	k := groupKey(name, topic)
	if val, closer, err := db.Get(k); err == nil {
		p, reason := openMeta(k, val, len(val)-5)
		var old *GroupState
		if reason == "" {
			old, reason = decodeGroupState(p)
		}
		newer := reason == "" && !old.Updated.Before(s.Updated)
		closer.Close()
		if newer {
			return false, nil
		}
	} else if err != pebble.ErrNotFound {
		return false, fmt.Errorf("wal: set mirrored group %q: %w", name, err)
	}
	if err := db.Set(k, sealMeta(k, encodeGroupState(s)), pebble.Sync); err != nil {
		return false, fmt.Errorf("wal: set mirrored group %q: %w", name, err)
	}
	return true, nil
}
