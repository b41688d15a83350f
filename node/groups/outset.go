package groups

import (
	"cmp"
	"slices"
)

// outSet is a topic's outstanding records (gtopic.out), ascending by offset, under g.mu.
//
// A group hands a topic's records out in offset order and its members mostly acknowledge
// them in that order, so put appends and del of the lowest moves the slice's start: both
// O(1) in the usual case, a copy of at most the window otherwise. A topic with one record
// outstanding (a wildcard group's usual case: one record of each of many topics) costs a
// slice of one pointer, not a map; one with none costs nothing.
type outSet struct {
	fs []*Flight
}

func (o *outSet) len() int { return len(o.fs) }

// all is the outstanding records, ascending; the caller does not change the set while it
// ranges over them.
func (o *outSet) all() []*Flight { return o.fs }

func (o *outSet) search(off uint64) (int, bool) {
	return slices.BinarySearchFunc(o.fs, off, func(f *Flight, off uint64) int { return cmp.Compare(f.off, off) })
}

// get is the outstanding record at off, or nil.
func (o *outSet) get(off uint64) *Flight {
	if i, ok := o.search(off); ok {
		return o.fs[i]
	}
	return nil
}

// put adds f (at f.off), replacing one at its offset.
func (o *outSet) put(f *Flight) {
	if n := len(o.fs); n == 0 || o.fs[n-1].off < f.off {
		o.fs = append(o.fs, f)
		return
	}
	i, ok := o.search(f.off)
	if ok {
		o.fs[i] = f
		return
	}
	o.fs = slices.Insert(o.fs, i, f)
}

// del removes the record at off, if outstanding.
func (o *outSet) del(off uint64) {
	i, ok := o.search(off)
	switch {
	case !ok:
	case len(o.fs) == 1:
		o.fs = nil
	case i == 0:
		o.fs[0] = nil // not kept alive by the array
		o.fs = o.fs[1:]
	default:
		o.fs = slices.Delete(o.fs, i, i+1)
	}
}

// from is the lowest outstanding offset at or above off, if any.
func (o *outSet) from(off uint64) (uint64, bool) {
	i, _ := o.search(off)
	if i == len(o.fs) {
		return 0, false
	}
	return o.fs[i].off, true
}
