package wire

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func groupPositionSeed() []byte {
	return Append(nil, &GroupPosition{Group: "tenant/t/g", Time: 1 << 60,
		Through:     []OriginOffset{{Region: "eu", Offset: 41}, {Region: "us", Offset: 3}},
		Outstanding: []OriginOffset{{Region: "eu", Offset: 40}, {Region: "us", Offset: 0}}})
}

// TestGroupPositionFrame: GROUP_POSITION round-trips (also with nothing handed out); one with
// an empty group or region, a region twice, an outstanding record past its origin's Through,
// of an origin it does not name, or twice, or counts over the bounds is malformed, with an
// error naming the problem.
func TestGroupPositionFrame(t *testing.T) {
	for _, f := range []*GroupPosition{
		{Group: "g", Time: 12345, Through: []OriginOffset{{Region: "eu", Offset: 7}, {Region: "us"}}, Outstanding: []OriginOffset{{Region: "us"}, {Region: "eu", Offset: 7}}},
		{Group: "g", Through: []OriginOffset{}, Outstanding: []OriginOffset{}},
	} {
		got, _, err := Decode(Append(nil, f), Limits{})
		if err != nil || !reflect.DeepEqual(got, f) {
			t.Fatalf("round trip of %+v: %+v, %v", f, got, err)
		}
	}
	eu := []OriginOffset{{Region: "eu", Offset: 7}}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"empty group":      {Append(nil, &GroupPosition{Through: eu}), "empty group"},
		"empty region":     {Append(nil, &GroupPosition{Group: "g", Through: []OriginOffset{{}}}), "empty region"},
		"region twice":     {Append(nil, &GroupPosition{Group: "g", Through: []OriginOffset{{Region: "eu"}, {Region: "eu", Offset: 1}}}), `region "eu" twice`},
		"past through":     {Append(nil, &GroupPosition{Group: "g", Through: eu, Outstanding: []OriginOffset{{Region: "eu", Offset: 8}}}), "past its origin's 7"},
		"unknown origin":   {groupPositionBody("g", eu, []uint64{1, 0}), "origin index 1 of 1 origins"},
		"outstanding dup":  {Append(nil, &GroupPosition{Group: "g", Through: eu, Outstanding: []OriginOffset{{Region: "eu", Offset: 1}, {Region: "eu", Offset: 1}}}), "eu@1 twice"},
		"too many origins": {groupPositionCounts(MaxVectorOrigins+1, 0), "over the limit of 256"},
		"too many out":     {groupPositionCounts(0, MaxGroupOutstanding+1), "over the limit of 65536"},
		"counts past body": {groupPositionCounts(0, 1000), "exceed what"},
	} {
		_, _, err := Decode(c.b, Limits{})
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want malformed naming %q", name, err, c.want)
		}
	}
}

// groupPositionBody is a GROUP_POSITION with outstanding records given as raw (index, offset)
// pairs.
func groupPositionBody(group string, through []OriginOffset, pairs []uint64) []byte {
	e := enc{}.str(group).uvarint(0).uvarint(uint64(len(through)))
	for _, o := range through {
		e = e.str(o.Region).uvarint(o.Offset)
	}
	e = e.uvarint(uint64(len(pairs) / 2))
	for _, p := range pairs {
		e = e.uvarint(p)
	}
	return frameOf(TypeGroupPosition, e)
}

// groupPositionCounts is a GROUP_POSITION declaring n origins (or m outstanding records) with
// a short body.
func groupPositionCounts(n, m uint64) []byte {
	e := enc{}.str("g").uvarint(0).uvarint(n)
	if n == 0 {
		e = e.uvarint(m)
	}
	return frameOf(TypeGroupPosition, append(e, make([]byte, 8)...))
}

// frameOf is a frame of type t with body e.
func frameOf(t Type, e enc) []byte {
	b := []byte{byte(t), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(e)))
	return append(b, e...)
}
