package groups

import (
	"testing"

	"github.com/quicmq/quicmq/wal"
)

func refs(rs ...wal.OriginRef) map[wal.OriginRef]bool {
	m := map[wal.OriginRef]bool{}
	for _, r := range rs {
		m[r] = true
	}
	return m
}

// TestGroupDoneUnion: the union of two done sets counts done exactly what either counts done,
// over every record of both origins up to past both vectors.
func TestGroupDoneUnion(t *testing.T) {
	eu := func(o uint64) wal.OriginRef { return wal.OriginRef{Region: "eu", Offset: o} }
	us := func(o uint64) wal.OriginRef { return wal.OriginRef{Region: "us", Offset: o} }
	a := DoneSet{through: map[string]uint64{"eu": 10, "us": 3}, Out: refs(eu(4), eu(9), us(3))}
	b := DoneSet{through: map[string]uint64{"eu": 7}, Out: refs(eu(4), eu(5))}
	c := DoneSet{through: map[string]uint64{}, Out: refs()}
	for _, pair := range [][2]DoneSet{{a, b}, {b, a}, {a, c}, {c, b}} {
		u := union(pair[0], pair[1])
		for _, region := range []string{"eu", "us", "ap"} {
			for o := range uint64(14) {
				r := wal.OriginRef{Region: region, Offset: o}
				if want := pair[0].Done(r) || pair[1].Done(r); u.Done(r) != want {
					t.Errorf("union(%v, %v): %s@%d done %v, want %v", pair[0], pair[1], region, o, u.Done(r), want)
				}
			}
		}
	}
}

// TestGroupSkip: after a resume, dispatch skips the records the vector counts done, hands out
// the outstanding ones, and ends skipping once every origin showed a record past the vector
// (dropping outstanding records of an origin that passed: they can no longer come).
func TestGroupSkip(t *testing.T) {
	eu := func(o uint64) wal.OriginRef { return wal.OriginRef{Region: "eu", Offset: o} }
	us := func(o uint64) wal.OriginRef { return wal.OriginRef{Region: "us", Offset: o} }
	tp := &gtopic{skip: &groupSkip{through: map[string]uint64{"eu": 5, "us": 2}, out: refs(eu(3), eu(4)), pending: map[string]bool{"eu": true, "us": true}}}
	for _, c := range []struct {
		ref  wal.OriginRef
		skip bool
	}{
		{eu(2), true}, {eu(3), false}, {us(1), true}, {wal.OriginRef{Region: "ap", Offset: 0}, false},
		{eu(6), false},                // eu passed: eu@4, outstanding, never came and can no longer come
		{us(2), true}, {us(3), false}, // us passed: skipping ends
	} {
		if tp.skip == nil {
			t.Fatalf("skipping ended before %v", c.ref)
		}
		if got := tp.skipLocked(c.ref); got != c.skip {
			t.Errorf("%s@%d: skipped %v, want %v", c.ref.Region, c.ref.Offset, got, c.skip)
		}
		if c.ref == eu(6) && len(tp.skip.out) != 0 {
			t.Errorf("after eu passed, outstanding elsewhere %v, want none", tp.skip.out)
		}
	}
	if tp.skip != nil {
		t.Fatalf("still skipping: %+v", tp.skip)
	}
}
