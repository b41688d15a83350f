package groups

import (
	"cmp"
	"errors"
	"maps"
	"slices"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/node/vector"
	"github.com/quicmq/quicmq/wal"
)

// A group's portable position (docs/architecture.md, "Portable positions"; the stored form
// is wal.GroupVector).
//
// What a group has done on a topic is, per origin region, every record up to Through[origin]
// except the outstanding ones, each named by (origin, origin offset): the same set in every
// region. Three things are done with it here:
//
//   - Each store of a group's state carries it (addVectors, called by store): a tracker per
//     topic, owned by the store (g.storeMu), raises Through over the records handed out since
//     the last store and learns the origins of the outstanding records. Their origins come
//     from the reads that handed them out: a member notes each record's origin as it sends
//     it (Learned), dispatch those it read itself (an ordered key's, a resumed topic's), into
//     the topic's learned list (g.mu), which the store takes with the state it snapshots. Only
//     a record no read noted yet (the store ran between its hand-out and its member's
//     Learned), or one that was handed out before a restart, is read again.
//   - Federation mirrors it to the other regions (federation/groups.go), where it is stored
//     under federation.MirroredGroupName.
//   - A group that starts following a topic on a node where a mirrored state of it is newer
//     than its own state there (or it has none) resumes from the union of those sets
//     (resumeLocked): the records below the first one the union does not cover are done but
//     the outstanding ones, which are handed out again; from there on, records the union
//     covers and that are not outstanding are skipped (gtopic.skip), since another region's
//     records may still come in by its mirror after them. Skipping ends once every origin of
//     Through has shown a record past it.
//
// A record outstanding in the other region (handed out, not acknowledged) is delivered again:
// at least once, and what was acknowledged there after its last mirrored state (the mirroring
// lag: federation.Config.PositionInterval plus the link's delay) is delivered again too. A
// member's SDK drops a redelivery of a record it acknowledged itself before it moved
// (client/failover.go), so a group of one member fails over exactly once.

// groupTrack is the store's vector of one topic of a group (owned under g.storeMu once the
// topic is added).
type groupTrack struct {
	at      uint64            // every record below at is accounted for in vec
	vec     map[string]uint64 // nil: not known yet (computed at the next store)
	origins originSet         // origins of outstanding offsets known to the tracker
	// shared: vec is also a stored state's Through (setVector), or the group's vector of
	// one origin (vecCache), so it is copied before it changes: a topic read once (a
	// wildcard's many) costs its store no map of its own.
	shared bool
}

// originSet is the origins of a topic's outstanding records known to its tracker, ascending
// by offset: those of one topic's outstanding records, most often none or one (no map).
type originSet []originAt

func (s originSet) search(off uint64) (int, bool) {
	return slices.BinarySearchFunc(s, off, func(o originAt, off uint64) int { return cmp.Compare(o.off, off) })
}

func (s originSet) get(off uint64) (wal.OriginRef, bool) {
	if i, ok := s.search(off); ok {
		return s[i].ref, true
	}
	return wal.OriginRef{}, false
}

func (s *originSet) set(off uint64, ref wal.OriginRef) {
	i, ok := s.search(off)
	if ok {
		(*s)[i].ref = ref
		return
	}
	*s = slices.Insert(*s, i, originAt{off, ref})
}

// keep drops the origins of offsets that are not entries (ascending by offset).
func (s *originSet) keep(entries []wal.GroupEntry) {
	*s = slices.DeleteFunc(*s, func(o originAt) bool { return !isEntry(entries, o.off) })
	if len(*s) == 0 {
		*s = nil
	}
}

// isEntry reports whether off is one of entries (ascending by offset).
func isEntry(entries []wal.GroupEntry, off uint64) bool {
	_, ok := slices.BinarySearchFunc(entries, off, func(e wal.GroupEntry, off uint64) int { return cmp.Compare(e.Offset, off) })
	return ok
}

// vecCache interns a group's vectors of one origin ({region: offset}): the trackers and
// stored states that have one share it (groupTrack.shared), so that a wildcard group's
// topics, each read from one region, cost no map of their own. Owned by g.storeMu; bounded
// (started again past vecCacheMax).
type vecCache struct {
	m map[wal.OriginRef]map[string]uint64
}

const vecCacheMax = 4096

func (c *vecCache) one(ref wal.OriginRef) map[string]uint64 {
	if v, ok := c.m[ref]; ok {
		return v
	}
	if c.m == nil || len(c.m) >= vecCacheMax {
		c.m = make(map[wal.OriginRef]map[string]uint64)
	}
	v := map[string]uint64{ref.Region: ref.Offset}
	c.m[ref] = v
	return v
}

// originAt is the origin of the record at off of a topic, as a read of it found it.
type originAt struct {
	off uint64
	ref wal.OriginRef
}

// Learned notes the origins of records a member read to send them: fs[i]'s is refs[i]
// (Region "": not read). A record handed out and read, not yet stored, marks its topic dirty
// here rather than at its dispatch (Flight.fresh), so a store meanwhile leaves it out instead
// of reading it again.
func (g *Group) Learned(fs []Taken, refs []wal.OriginRef) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, f := range fs {
		t := f.t
		if t.dropped {
			continue // deleted
		}
		if refs[i].Region != "" {
			g.learnLocked(t, originAt{off: f.off, ref: refs[i]})
		}
		if f.fresh {
			f.fresh = false
			g.markDirtyLocked(t)
		}
	}
}

// learnLocked adds o to t's learned origins. A topic's first note since the last store (a
// wildcard group's usual one) takes the next slot of a shared array (g.mu.learnArena),
// capped to that slot, so that noting a record of each of many topics does not allocate a
// slice per topic; a second note copies it out (append over the cap). The store takes a
// topic's slice and reads it after g.mu; a later note writes only slots past every slice
// handed out, never one of them.
func (g *Group) learnLocked(t *gtopic, o originAt) {
	if t.learned != nil {
		t.learned = append(t.learned, o)
		return
	}
	a := g.mu.learnArena
	if len(a) == cap(a) {
		a = make([]originAt, 0, 256)
	}
	a = append(a, o)
	g.mu.learnArena = a
	n := len(a)
	t.learned = a[n-1 : n : n]
}

// groupSkip is a topic's skipping after a resume from another region's vector (g.mu).
type groupSkip struct {
	through map[string]uint64
	out     map[wal.OriginRef]bool // outstanding records covered by through, not yet handed out here
	pending map[string]bool        // origins of through with no record past it dispatched yet
	skipped uint64
}

// DoneSet is a group's done records on one topic in origin terms.
type DoneSet struct {
	through map[string]uint64
	Out     map[wal.OriginRef]bool
}

func (d DoneSet) Done(r wal.OriginRef) bool {
	last, ok := d.through[r.Region]
	return ok && r.Offset <= last && !d.Out[r]
}

// union is the records done in a or in b.
func union(a, b DoneSet) DoneSet {
	c := DoneSet{through: maps.Clone(a.through), Out: make(map[wal.OriginRef]bool)}
	if c.through == nil {
		c.through = make(map[string]uint64)
	}
	for o, off := range b.through {
		if last, ok := c.through[o]; !ok || off > last {
			c.through[o] = off
		}
	}
	for r := range a.Out {
		if !b.Done(r) {
			c.Out[r] = true
		}
	}
	for r := range b.Out {
		if !a.Done(r) {
			c.Out[r] = true
		}
	}
	return c
}

// stateDone is the done set of a stored state with a vector.
func StateDone(st *wal.GroupState) DoneSet {
	d := DoneSet{through: maps.Clone(st.Vector.Through), Out: make(map[wal.OriginRef]bool)}
	for _, e := range st.Entries {
		d.Out[e.Origin] = true
	}
	for _, r := range st.Vector.Elsewhere {
		d.Out[r] = true
	}
	return d
}

// isMirroredGroup reports whether a stored group name is another region's group mirrored here.
func IsMirroredGroup(name string) bool {
	_, _, ok := federation.ParseMirroredGroup(name)
	return ok
}

// resumeLocked starts t from the mirrored states of its topic newer than own (nil: none here)
// and reports whether it did. It reads the log (with g.mu held: it runs when a group starts
// following a topic, before members take from it).
func (g *Group) resumeLocked(t *gtopic, own *wal.GroupState) bool {
	n := g.env
	var newer []*wal.GroupState
	for _, st := range g.mu.mirrored[t.name] {
		if own == nil || st.Updated.After(own.Updated) {
			newer = append(newer, st)
		}
	}
	delete(g.mu.mirrored, t.name)
	if len(newer) == 0 {
		return false
	}
	d := DoneSet{through: map[string]uint64{}, Out: map[wal.OriginRef]bool{}}
	if own != nil {
		if od, err := g.ownDone(t.name, own); err == nil {
			d = od
		} else { // without it the union is smaller: more is delivered again, nothing skipped wrongly
			n.Log.Warn("group's own state has no vector: resuming from the mirrored ones alone", "group", g.shown, "topic", t.name, "err", err)
		}
	}
	for _, st := range newer {
		d = union(d, StateDone(st))
	}
	start, err := vector.Start(n.Wal, n.Region, t.name, d.through)
	if err != nil {
		n.Log.Warn("group not resumed from its mirrored position", "group", g.shown, "topic", t.name, "err", err)
		return false
	}
	located, err := locateOutstanding(n.Wal, n.Region, t.name, start, d.Out)
	if err != nil {
		n.Log.Warn("group not resumed from its mirrored position", "group", g.shown, "topic", t.name, "err", err)
		return false
	}
	t.floor, t.next = start, start
	g.markDirtyLocked(t)
	t.track = groupTrack{at: start, vec: maps.Clone(d.through), origins: make(originSet, 0, len(located))}
	for _, off := range slices.Sorted(maps.Keys(located)) {
		ref := located[off]
		delete(d.Out, ref)
		t.track.origins.set(off, ref)
		t.floor = min(t.floor, off)
		g.restoreLocked(t, off, 1)
		t.out.get(off).reason = "it was outstanding in another region"
	}
	t.skip = &groupSkip{through: maps.Clone(d.through), out: d.Out, pending: make(map[string]bool, len(d.through))}
	for o := range d.through {
		t.skip.pending[o] = true
	}
	n.Log.Info("group resumed from a position mirrored from another region", "group", g.shown, "topic", t.name,
		"start", start, "outstanding", len(located), "outstanding_elsewhere", len(d.Out), "mirrored_states", len(newer))
	return true
}

// ownDone is the done set of the group's own stored state of topic.
func (g *Group) ownDone(topic string, own *wal.GroupState) (DoneSet, error) {
	if own.Vector != nil {
		return StateDone(own), nil
	}
	n := g.env
	vec, err := vector.Prefix(n.Wal, n.Region, topic, own.Next)
	if err != nil {
		return DoneSet{}, err
	}
	d := DoneSet{through: vec, Out: make(map[wal.OriginRef]bool, len(own.Entries))}
	for _, e := range own.Entries {
		ref, err := readOrigin(n.Wal, n.Region, topic, e.Offset)
		if err != nil {
			return DoneSet{}, err
		}
		d.Out[ref] = true
	}
	return d, nil
}

// errNoRecord: an outstanding record is no longer in the log (retention).
var errNoRecord = errors.New("record not in the log")

// readOrigin reads the origin of the record at off.
func readOrigin(l *wal.Log, region, topic string, off uint64) (wal.OriginRef, error) {
	var ref wal.OriginRef
	n, err := l.ReadFunc(topic, off, 1, vector.ReadBytes, func(r *wal.Record) error {
		ref = wal.OriginRef{Region: vector.OriginOf(r, region), Offset: r.OriginOffset}
		return nil
	})
	if err == nil && n == 0 {
		err = errNoRecord
	}
	return ref, err
}

// locateOutstanding finds the offsets below start of the records of out: it reads back from
// start until each of them is found or shown absent (a record of its origin below it passed).
func locateOutstanding(l *wal.Log, region, topic string, start uint64, out map[wal.OriginRef]bool) (map[uint64]wal.OriginRef, error) {
	located := make(map[uint64]wal.OriginRef)
	want := make(map[string][]uint64) // per origin, the origin offsets still looked for
	for r := range out {
		want[r.Region] = append(want[r.Region], r.Offset)
	}
	if len(want) == 0 {
		return located, nil
	}
	err := vector.ScanBack(l, topic, start, func(off uint64, origin string, originOff uint64) bool {
		if origin == "" {
			origin = region
		}
		offs := want[origin]
		ref := wal.OriginRef{Region: origin, Offset: originOff}
		if out[ref] {
			located[off] = ref
		}
		// Those of the origin at or above originOff are found now, or not below start.
		offs = slices.DeleteFunc(offs, func(o uint64) bool { return o >= originOff })
		if len(offs) == 0 {
			delete(want, origin)
		} else {
			want[origin] = offs
		}
		return len(want) > 0
	})
	return located, err
}

// skipLocked reports whether dispatch skips the record ref of t (done after a resume), and
// ends t's skipping when no record it covers can come any more.
func (t *gtopic) skipLocked(ref wal.OriginRef) bool {
	s := t.skip
	last, ok := s.through[ref.Region]
	if ok && ref.Offset <= last {
		if s.out[ref] {
			delete(s.out, ref)
			return false
		}
		s.skipped++
		return true
	}
	if ok && s.pending[ref.Region] {
		// Past through in its origin's order: no record of it that through covers comes later.
		delete(s.pending, ref.Region)
		maps.DeleteFunc(s.out, func(r wal.OriginRef, _ bool) bool { return r.Region == ref.Region })
		if len(s.pending) == 0 {
			t.skip = nil
		}
	}
	return false
}

// skipVectorLocked is t's skipping as a stored vector's part (nil when it is not skipping): the
// store takes it with the state it snapshots, so that an outstanding record is either one of
// the entries or in Elsewhere.
func (t *gtopic) skipVectorLocked() *wal.GroupVector {
	if t.skip == nil {
		return nil
	}
	v := &wal.GroupVector{Through: maps.Clone(t.skip.through), Skipping: true}
	for r := range t.skip.out {
		v.Elsewhere = append(v.Elsewhere, r)
	}
	return v
}

// emptyVec is the vector of a topic the group starts on at its first record: shared by every
// such tracker (groupTrack.shared), never written, so that following many topics costs no
// map per topic until one is read.
var emptyVec = map[string]uint64{}

// beginTrack starts t's tracker from its stored state (nil: a topic the group starts on at
// start; first is the topic's first offset).
func (t *gtopic) beginTrack(st *wal.GroupState, start, first uint64) {
	switch {
	case st != nil && st.Vector != nil:
		t.track = groupTrack{at: st.Next, vec: maps.Clone(st.Vector.Through)}
		for _, e := range st.Entries {
			t.track.origins.set(e.Offset, e.Origin)
		}
		if st.Vector.Skipping {
			t.skip = &groupSkip{through: maps.Clone(st.Vector.Through), out: make(map[wal.OriginRef]bool, len(st.Vector.Elsewhere)), pending: make(map[string]bool)}
			for _, r := range st.Vector.Elsewhere {
				t.skip.out[r] = true
			}
			for o := range st.Vector.Through {
				t.skip.pending[o] = true
			}
		}
	case st != nil:
		t.track = groupTrack{at: st.Next}
	default:
		t.track = groupTrack{at: start}
		if start <= first {
			t.track.vec, t.track.shared = emptyVec, true // nothing before it
		}
	}
}

// vectorItem is a state a store took, with its topic's tracker and the origins learned
// since the last store (taken with the state, under g.mu).
type vectorItem struct {
	topic   string
	in      wal.Instance // its log (gtopic.in)
	st      *wal.GroupState
	tr      *groupTrack
	vec     *wal.GroupVector // room for st's vector when it has none (skipping's)
	learned []originAt
}

// addVectors sets the vector of each state the store took (their topics' skipping, if any, is
// in Vector already), from the origins learned with the state and, for the records those
// miss, a read of them. A state whose vector cannot be read is stored without one (a resume
// elsewhere then finds none newer of it). Called by store with g.storeMu held.
func (g *Group) addVectors(items []vectorItem) {
	n := g.env
	// Those whose records the learned origins cover need no read; the others are read in
	// the order of the topics' keys, with one iterator: a wildcard group's store holds a
	// record or two of each of many topics.
	type keyed struct {
		id uint32
		in wal.Instance
		it *vectorItem
	}
	var order []keyed
	for i := range items {
		it := &items[i]
		switch {
		case it.tr.covered(it.st, it.learned):
			g.setVector(it, nil)
		default:
			order = append(order, keyed{it.in.ID(), it.in, it})
		}
	}
	if len(order) == 0 {
		return
	}
	slices.SortFunc(order, func(a, b keyed) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.it.topic, b.it.topic)) })
	sweep := n.Wal.NewSweep()
	defer sweep.Release()
	for _, k := range order {
		read := func(from uint64, max int, fn func(*wal.Record) error) (int, error) {
			got, _, err := sweep.ReadFunc(k.in, from, max, vector.ReadBytes, fn)
			return got, err
		}
		g.setVector(k.it, read)
	}
}

// setVector advances it's tracker to its state (with the learned origins, reading the rest
// with read) and sets the state's vector and its entries' origins.
func (g *Group) setVector(it *vectorItem, read func(uint64, int, func(*wal.Record) error) (int, error)) {
	n := g.env
	tr, topic, st := it.tr, it.topic, it.st
	if err := tr.advance(n.Wal, read, n.Region, topic, st, it.learned, &g.vecs); err != nil {
		n.Log.Debug("group state stored without its vector", "group", g.shown, "topic", topic, "err", err)
		st.Vector = nil
		return
	}
	v := st.Vector
	if v == nil {
		v = it.vec
	}
	if len(v.Through) == 0 { // no skipping's vector to raise it with
		v.Through, tr.shared = tr.vec, true
	} else {
		through := maps.Clone(tr.vec)
		for o, off := range v.Through {
			if last, ok := through[o]; !ok || off > last {
				through[o] = off
			}
		}
		v.Through = through
	}
	st.Vector = v
	for i := range st.Entries {
		st.Entries[i].Origin, _ = tr.origins.get(st.Entries[i].Offset)
	}
}

// covered reports whether advancing tr to st needs no read of the log: learned holds every
// record from tr.at to st.Next.
func (tr *groupTrack) covered(st *wal.GroupState, learned []originAt) bool {
	if tr.vec == nil || st.Next < tr.at {
		return false
	}
	sortLearned(learned)
	at := tr.at
	for _, o := range learned {
		if o.off == at {
			at++
		}
	}
	return at >= st.Next
}

// sortLearned sorts learned by offset (members' reads of one topic may note out of order).
func sortLearned(learned []originAt) {
	byOff := func(a, b originAt) int { return cmp.Compare(a.off, b.off) }
	if !slices.IsSortedFunc(learned, byOff) {
		slices.SortStableFunc(learned, byOff)
	}
}

// advance brings the tracker to st.Next and learns the origins of st's entries: from learned
// (the origins reads of the records noted, sorted by offset), reading forward with read what
// learned misses (read is not called when learned covers it all: covered). A shared vector
// raised to one origin's record becomes vecs' vector of it; otherwise it is copied first.
func (tr *groupTrack) advance(l *wal.Log, read func(uint64, int, func(*wal.Record) error) (int, error), region, topic string, st *wal.GroupState, learned []originAt, vecs *vecCache) error {
	if tr.vec == nil || st.Next < tr.at {
		vec, err := vector.Prefix(l, region, topic, min(tr.at, st.Next))
		if err != nil {
			return err
		}
		tr.vec, tr.at, tr.shared = vec, min(tr.at, st.Next), false
	}
	r := raise{tr: tr, entries: st.Entries}
	sortLearned(learned)
	for i := 0; tr.at < st.Next; {
		for ; i < len(learned) && learned[i].off < tr.at; i++ { // accounted for: its origin may be wanted
			if o := learned[i]; isEntry(st.Entries, o.off) {
				tr.origins.set(o.off, o.ref)
			}
		}
		if i < len(learned) && learned[i].off == tr.at {
			r.note(learned[i].off, learned[i].ref)
			tr.at++
			continue
		}
		to := st.Next
		if i < len(learned) {
			to = min(to, learned[i].off)
		}
		next, short, err := vector.ForwardWith(read, tr.at, to, func(rec *wal.Record) {
			r.note(rec.Offset, wal.OriginRef{Region: vector.OriginOf(rec, region), Offset: rec.OriginOffset})
		})
		switch {
		case err != nil:
			tr.at = next
			r.apply(vecs)
			return err
		case short:
			tr.at = next
			r.apply(vecs)
			return errNoRecord
		}
		tr.at = to
	}
	r.apply(vecs)
	for _, o := range learned { // those below where the tracker was
		if _, ok := tr.origins.get(o.off); !ok && isEntry(st.Entries, o.off) {
			tr.origins.set(o.off, o.ref)
		}
	}
	tr.origins.keep(st.Entries)
	for _, e := range st.Entries {
		if _, ok := tr.origins.get(e.Offset); ok {
			continue
		}
		ref, err := readOrigin(l, region, topic, e.Offset)
		if err != nil {
			return err
		}
		tr.origins.set(e.Offset, ref)
	}
	// Entries of one origin must ascend in its order: a log that breaks I7 gets no vector.
	if len(st.Entries) > 1 {
		last := make(map[string]uint64, 2)
		for _, e := range st.Entries { // sorted by offset (store)
			r, _ := tr.origins.get(e.Offset)
			if l, ok := last[r.Region]; ok && r.Offset <= l {
				return errors.New("outstanding records out of their origin's order")
			}
			last[r.Region] = r.Offset
		}
	}
	return nil
}

// raise is an advance's raising of its tracker's vector: the records it accounts for, of
// one origin as long as they are (one, with no map), then written into the tracker's own
// copy of its vector.
type raise struct {
	tr      *groupTrack
	entries []wal.GroupEntry // the state's: whose origins the tracker keeps
	one     wal.OriginRef    // the highest record of the one origin noted so far
	n       int              // records noted
	many    bool             // of several origins: written into tr.vec as noted
}

// note accounts for the record at off, of origin ref, and keeps its origin if it is
// outstanding.
func (r *raise) note(off uint64, ref wal.OriginRef) {
	switch {
	case r.many:
		r.tr.raiseOwn(ref)
	case r.n == 0 || ref.Region == r.one.Region:
		if r.n == 0 || ref.Offset > r.one.Offset {
			r.one = ref
		}
	default:
		r.many = true
		r.tr.raiseOwn(r.one)
		r.tr.raiseOwn(ref)
	}
	r.n++
	if isEntry(r.entries, off) {
		r.tr.origins.set(off, ref)
	}
}

// apply raises the tracker's vector to what was noted: a shared vector of at most that one
// origin becomes vecs' vector of it, with no copy.
func (r *raise) apply(vecs *vecCache) {
	if r.many || r.n == 0 {
		return
	}
	tr := r.tr
	last, ok := tr.vec[r.one.Region]
	switch {
	case ok && r.one.Offset <= last:
	case tr.shared && len(tr.vec) == 0, tr.shared && ok && len(tr.vec) == 1:
		tr.vec = vecs.one(r.one)
	default:
		tr.raiseOwn(r.one)
	}
}

// raiseOwn raises tr's vector to ref, in a copy of its own if it is shared.
func (tr *groupTrack) raiseOwn(ref wal.OriginRef) {
	last, ok := tr.vec[ref.Region]
	if ok && ref.Offset <= last {
		return
	}
	if tr.shared {
		vec := make(map[string]uint64, len(tr.vec)+1)
		maps.Copy(vec, tr.vec)
		tr.vec, tr.shared = vec, false
	}
	tr.vec[ref.Region] = ref.Offset
}
