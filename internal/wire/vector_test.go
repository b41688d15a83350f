package wire

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
)

func vectorSeed() []byte {
	b := Append(nil, &Position{Durable: "tenant/t/d", Time: 1 << 60, Origins: []OriginOffset{{Region: "eu", Offset: 3}}})
	return Append(b, &Subscribe{Pattern: "orders.>", Durable: "d", Flags: SubscribeRecords, Vector: []TopicVector{
		{Topic: "orders.a", Origins: []OriginOffset{{Region: "eu", Offset: 41}, {Region: "us", Offset: 0}}},
		{Topic: "orders.b", Origins: []OriginOffset{}},
	}})
}

// TestVectorRoundTrip: a vector block decodes to what was encoded, also after a group block;
// a SUBSCRIBE without one is byte for byte what it was before vectors.
func TestVectorRoundTrip(t *testing.T) {
	frames := []*Subscribe{
		{Pattern: "a", Vector: []TopicVector{}},
		{Pattern: "a.>", Flags: SubscribeRecords | SubscribeCaughtUp, Vector: []TopicVector{{Topic: "a.b", Origins: []OriginOffset{{Region: "ap", Offset: 1 << 40}}}}},
		{Pattern: "a.>", Group: &Group{Name: "g"}, Vector: []TopicVector{{Topic: "a.c", Origins: []OriginOffset{}}}},
	}
	for _, f := range frames {
		got, _, err := Decode(Append(nil, f), Limits{})
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		s := got.(*Subscribe)
		if s.Flags&SubscribeVector == 0 {
			t.Errorf("%+v: decoded flags %#x lack SubscribeVector", f, s.Flags)
		}
		s.Flags &^= SubscribeVector | SubscribeGroup
		want := *f
		want.Flags &^= SubscribeGroup
		if !reflect.DeepEqual(s, &want) {
			t.Errorf("round trip: got %+v, want %+v", s, &want)
		}
	}
	plain := &Subscribe{Pattern: "a", Flags: SubscribeRecords}
	withNil := &Subscribe{Pattern: "a", Flags: SubscribeRecords | SubscribeVector}
	if !bytes.Equal(Append(nil, plain), Append(nil, withNil)) {
		t.Error("SubscribeVector without a Vector is encoded")
	}
}

// TestVectorMalformed: every broken block is refused as malformed, naming the problem.
func TestVectorMalformed(t *testing.T) {
	body := func(block ...byte) []byte {
		e := enc(nil).str("a").byte1(0).uvarint(0).str("").str("").uvarint(SubscribeVector)
		return append(e, block...)
	}
	cases := map[string][]byte{
		"flag without block":   body(),
		"topics over limit":    body(enc(nil).uvarint(MaxVectorTopics + 1)...),
		"topics past the body": body(5, 1, 'x', 0),
		"empty topic":          body(1, 0, 0),
		"topic twice":          body(2, 1, 'x', 0, 1, 'x', 0),
		"empty region":         body(1, 1, 'x', 1, 0, 3),
		"region twice":         body(1, 1, 'x', 2, 1, 'e', 3, 1, 'e', 4),
		"truncated offset":     body(1, 1, 'x', 1, 1, 'e'),
		"origins over limit":   body(append([]byte{1, 1, 'x'}, enc(nil).uvarint(MaxVectorOrigins+1)...)...),
	}
	for name, b := range cases {
		frame := append([]byte{byte(TypeSubscribe), 0, 0, 0, byte(len(b))}, b...)
		_, _, err := Decode(frame, Limits{})
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want malformed", name, err)
		}
	}
}

// TestVectorMap: VectorBlock and VectorMap are inverses; the block is sorted when asked.
func TestVectorMap(t *testing.T) {
	m := map[string]map[string]uint64{"b": {"us": 2, "eu": 1}, "a": {}}
	v, err := VectorBlock(m, slices.Sort)
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Topic != "a" || v[1].Origins[0].Region != "eu" {
		t.Errorf("not sorted: %+v", v)
	}
	if back := VectorMap(v); !reflect.DeepEqual(back, m) {
		t.Errorf("VectorMap(VectorBlock(m)) = %v, want %v", back, m)
	}
}

// TestPositionFrame: POSITION round-trips; one without origins, with an empty durable or
// region, or a region twice is malformed.
func TestPositionFrame(t *testing.T) {
	f := &Position{Durable: "d", Time: 12345, Origins: []OriginOffset{{Region: "eu", Offset: 7}, {Region: "us", Offset: 0}}}
	got, _, err := Decode(Append(nil, f), Limits{})
	if err != nil || !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for name, p := range map[string]*Position{
		"no origins":    {Durable: "d"},
		"empty durable": {Origins: []OriginOffset{{Region: "eu"}}},
		"empty region":  {Durable: "d", Origins: []OriginOffset{{}}},
		"region twice":  {Durable: "d", Origins: []OriginOffset{{Region: "eu"}, {Region: "eu", Offset: 1}}},
	} {
		if _, _, err := Decode(Append(nil, p), Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want malformed", name, err)
		}
	}
}
