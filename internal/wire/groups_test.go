package wire

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// groupSeed is a member's SUBSCRIBE, an ACK, a NAK and a COMMIT, as a group stream carries
// them (a fuzz seed).
func groupSeed() []byte {
	var b []byte
	b = Append(b, &Subscribe{Pattern: "orders.>", Flags: SubscribeRecords, Group: &Group{Name: "g", AckWait: 1500 * time.Millisecond, MaxDeliver: 3, DeadLetter: "dlq", Order: OrderKey}})
	b = Append(b, &Ack{Index: 0, Offset: 7})
	b = Append(b, &Nak{Index: 0, Offset: 8})
	b = Append(b, &Commit{Seq: 1})
	return Append(b, &Committed{Seq: 1})
}

// TestGroupFramesRoundTrip: the group block, NAK, COMMIT and COMMITTED decode to what was
// encoded; SUBSCRIBE without a group is byte for byte what it was before groups.
func TestGroupFramesRoundTrip(t *testing.T) {
	frames := []Frame{
		&Subscribe{Pattern: "a.>", Flags: SubscribeRecords | SubscribeGroup, Group: &Group{Name: "g", AckWait: 2 * time.Second, MaxDeliver: 5, DeadLetter: "a.dlq", Order: OrderTopic}},
		&Subscribe{Pattern: "a", Flags: SubscribeGroup, Group: &Group{Name: "h"}},
		&Nak{Index: 3, Offset: 1 << 40},
		&Commit{Seq: 9},
		&Committed{Seq: 9},
	}
	for _, f := range frames {
		got, n, err := Decode(Append(nil, f), DefaultLimits())
		if err != nil || n != len(Append(nil, f)) {
			t.Fatalf("%s: decode: %v (%d bytes)", f.Type(), err, n)
		}
		if !reflect.DeepEqual(got, f) {
			t.Fatalf("%s: got %#v, want %#v", f.Type(), got, f)
		}
	}
	plain := Append(nil, &Subscribe{Pattern: "a", Flags: SubscribeRecords})
	want := []byte{byte(TypeSubscribe), 0, 0, 0, 7, 1, 'a', 0, 0, 0, 0, SubscribeRecords}
	if string(plain) != string(want) {
		t.Fatalf("SUBSCRIBE without a group encodes as % x, want % x", plain, want)
	}
}

// TestGroupBlockRefused: a group flag without its block, an unknown order and values over
// their limits are malformed, named in the error.
func TestGroupBlockRefused(t *testing.T) {
	ok := Append(nil, &Subscribe{Pattern: "a", Group: &Group{Name: "g", Order: OrderKey}})
	cut := ok[:len(ok)-1]
	cut[4]-- // the frame's length
	badOrder := append([]byte(nil), ok...)
	badOrder[len(badOrder)-1] = 3
	longWait := Append(nil, &Subscribe{Pattern: "a", Group: &Group{Name: "g", AckWait: 25 * time.Hour}})
	for name, b := range map[string][]byte{"cut": cut, "order 3": badOrder, "25 h": longWait} {
		if _, _, err := Decode(b, DefaultLimits()); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}
