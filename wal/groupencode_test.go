package wal

import (
	"bytes"
	"encoding/binary"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// appendGroupVectorBefore is appendGroupVector as it was before it kept its regions in an
// array (issue 35): the reference the encoding must still equal byte for byte.
func appendGroupVectorBefore(b []byte, s *GroupState) []byte {
	v := s.Vector
	var flags uint64
	if v.Skipping {
		flags |= groupVectorSkipping
	}
	b = binary.AppendUvarint(b, flags)
	regions := slices.Sorted(maps.Keys(v.Through))
	index := make(map[string]uint64, len(regions))
	b = binary.AppendUvarint(b, uint64(len(regions)))
	for i, r := range regions {
		index[r] = uint64(i)
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
		b = binary.AppendUvarint(b, v.Through[r])
	}
	for _, e := range s.Entries {
		b = binary.AppendUvarint(b, index[e.Origin.Region])
		b = binary.AppendUvarint(b, e.Origin.Offset)
	}
	els := slices.Clone(v.Elsewhere)
	slices.SortFunc(els, compareRef)
	b = binary.AppendUvarint(b, uint64(len(els)))
	for _, o := range els {
		b = binary.AppendUvarint(b, index[o.Region])
		b = binary.AppendUvarint(b, o.Offset)
	}
	return b
}

// TestGroupStateEncodingUnchanged: SetGroup's encoding into reused buffers (appendGroupKey,
// appendGroupState, sealMetaInPlace) writes, byte for byte, what groupKey, encodeGroupState
// and sealMeta wrote before, for random states (1-12 origins, entries of origins the vector
// does not name, Elsewhere in any order); the seed is printed.
func TestGroupStateEncodingUnchanged(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var k, v []byte
	for i := range 2000 {
		st := &GroupState{Floor: rng.Uint64N(100), Updated: time.Unix(0, rng.Int64N(1<<60))}
		st.Next = st.Floor + rng.Uint64N(50)
		region := func() string { return "r" + strconv.Itoa(rng.IntN(14)) }
		for off := st.Floor; off < st.Next; off++ {
			if rng.IntN(3) == 0 {
				st.Entries = append(st.Entries, GroupEntry{Offset: off, Deliveries: uint32(rng.IntN(4)), Origin: OriginRef{Region: region(), Offset: rng.Uint64N(1000)}})
			}
		}
		if rng.IntN(4) > 0 {
			st.Vector = &GroupVector{Through: map[string]uint64{}, Skipping: rng.IntN(2) == 0}
			for range 1 + rng.IntN(12) {
				st.Vector.Through[region()] = rng.Uint64N(1000)
			}
			for range rng.IntN(4) {
				st.Vector.Elsewhere = append(st.Vector.Elsewhere, OriginRef{Region: region(), Offset: rng.Uint64N(1000)})
			}
		}
		want := binary.AppendUvarint(nil, st.Floor)
		if st.Vector != nil {
			// The sparse part is shared: take encodeGroupState's up to the vector, then the reference's.
			b := encodeGroupState(&GroupState{Floor: st.Floor, Next: st.Next, Entries: st.Entries, Updated: st.Updated})
			want = append(b[:len(b)-1], groupStateVector)
			want = appendGroupVectorBefore(want, st)
		} else {
			want = encodeGroupState(st)
		}
		group, topic := "g"+strconv.Itoa(i%3), "t."+strconv.Itoa(i)
		k = appendGroupKey(k[:0], group, topic)
		v = appendGroupState(append(v[:0], metaHeader[:]...), st)
		if !bytes.Equal(k, groupKey(group, topic)) {
			t.Fatalf("state %d: key %x, want %x", i, k, groupKey(group, topic))
		}
		if got, want := sealMetaInPlace(k, v), sealMeta(k, want); !bytes.Equal(got, want) {
			t.Fatalf("state %d %+v: value\n%x, want\n%x", i, st, got, want)
		}
	}
}

// TestGroupStateEncodingAllocs: encoding a wildcard group's usual state (one origin, nothing
// outstanding) into a buffer with room allocates nothing; with the map and sort of before it
// allocated twice a state.
func TestGroupStateEncodingAllocs(t *testing.T) {
	st := &GroupState{Floor: 1, Next: 1, Updated: time.Unix(0, 5), Vector: &GroupVector{Through: map[string]uint64{"eu": 0}}}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = appendGroupState(buf[:0], st) }); n != 0 {
		t.Fatalf("encoding a state allocated %.1f times, want 0", n)
	}
}
