package client

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

// TestPositionText: the text form round-trips, through encoding/json too, and bad text is
// refused naming the problem.
func TestPositionText(t *testing.T) {
	p := Position{"orders.b": {"us": 3, "eu": 1 << 40}, "orders.a": {}}
	b, err := p.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	if want := "orders.a= orders.b=eu:1099511627776,us:3"; string(b) != want {
		t.Errorf("text %q, want %q", b, want)
	}
	var back Position
	if err := back.UnmarshalText(b); err != nil || !reflect.DeepEqual(back, p) {
		t.Fatalf("UnmarshalText(%q) = %v, %v", b, back, err)
	}
	j, err := json.Marshal(map[string]Position{"pos": p})
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON map[string]Position
	if err := json.Unmarshal(j, &fromJSON); err != nil || !reflect.DeepEqual(fromJSON["pos"], p) {
		t.Fatalf("json %s: %v, %v", j, fromJSON, err)
	}
	for _, bad := range []string{"x", "=eu:1", "t=eu", "t=:1", "t=eu:-1", "t=eu:1,eu:2", "t= t=", "t=eu:18446744073709551616"} {
		if err := back.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q) accepted", bad)
		}
	}
	if !p.Covers(Record{Topic: "orders.b", OriginRegion: "us", OriginOffset: 3}) || p.Covers(Record{Topic: "orders.b", OriginRegion: "us", OriginOffset: 4}) ||
		p.Covers(Record{Topic: "orders.a", OriginRegion: "us"}) {
		t.Error("Covers is wrong")
	}
}

// TestPositionsAckedVector: a durable's acknowledged vector is, per origin, the highest origin
// offset among the records delivered at or below each cumulative ACK, whatever the
// interleaving of origins and wherever the ACKs fall (inside runs included); a move to
// another region makes it what was delivered, and ACKs of the region left are not sent.
func TestPositionsAckedVector(t *testing.T) {
	rng := testlog.Rand(t, "the deliveries and acks")
	p := newPositions(true, nil)
	var recs []Record
	originNext := map[string]uint64{}
	acked := -1
	for off := uint64(0); off < 5000; off++ {
		o := []string{"eu", "us", "ap"}[rng.IntN(3)]
		if len(recs) > 0 && rng.IntN(3) > 0 { // runs of one origin
			o = recs[len(recs)-1].OriginRegion
		}
		originNext[o] += 1 + uint64(rng.IntN(2)) // gaps in origin offsets too (a GAP at the origin)
		r := Record{Topic: "t", Offset: off, OriginRegion: o, OriginOffset: originNext[o]}
		p.deliver(&r, 0)
		recs = append(recs, r)
		if rng.IntN(7) == 0 {
			at := acked + 1 + rng.IntN(len(recs)-acked)
			if at >= len(recs) {
				continue
			}
			if !p.ack("t", uint64(at), r.gen) {
				t.Fatal("an ACK of this region is not to be sent")
			}
			acked = at
			want := map[string]uint64{}
			for _, r := range recs[:at+1] {
				want[r.OriginRegion] = r.OriginOffset
			}
			if got := p.snapshot(true)["t"]; !maps.Equal(got, want) {
				t.Fatalf("after ACK %d: acked vector %v, want %v", at, got, want)
			}
		}
	}
	p.moved()
	if got, want := p.snapshot(true), p.snapshot(false); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a move: acked %v, want what was delivered %v", got, want)
	}
	if p.ack("t", 1, recs[0].gen) {
		t.Error("an ACK of a record of the region left is to be sent")
	}
}

// FuzzPositionText: whatever text UnmarshalText takes, it never panics, and what it accepts
// marshals to text that reads back the same.
func FuzzPositionText(f *testing.F) {
	f.Add("orders.a= orders.b=eu:1,us:3")
	f.Add("t=eu:18446744073709551615")
	f.Add("t==:")
	f.Fuzz(func(t *testing.T, text string) {
		var p Position
		if p.UnmarshalText([]byte(text)) != nil {
			return
		}
		b, _ := p.MarshalText()
		var q Position
		if err := q.UnmarshalText(b); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("%q read as %v, written as %q, read back as %v (%v)", text, p, b, q, err)
		}
	})
}

// A node that does not know vector positions answers the SUBSCRIBE's vector block as trailing
// bytes (ERROR 1): the client says so.
func TestPositionRefusedByOlderNode(t *testing.T) {
	f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
		if sub, ok := first.(*wire.Subscribe); ok && sub.Vector != nil {
			s.Write(wire.Append(nil, &wire.ErrorFrame{Code: wire.CodeProtocol, Message: "malformed frame: SUBSCRIBE: 12 trailing bytes"}))
		}
		s.Close()
	})
	c := dialFake(t, f)
	_, err := c.Subscribe(context.Background(), "t", SubscribeOptions{Position: Position{"t": {"eu": 3}}})
	if err == nil || !strings.Contains(err.Error(), "does not take vector positions") || !isCodeErr(err, CodeProtocol) {
		t.Fatalf("got %v, want the node named as not taking vector positions, with CodeProtocol", err)
	}
	t.Log(err)
}

func isCodeErr(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// TestPositionsDeliveredAcrossTopicsAndOrigins: the delivered position, kept per topic
// without a map for its first origin, is the Position of the highest origin offset of each
// topic and origin delivered, on top of the one it started from, and shares nothing with
// what it returns.
func TestPositionsDeliveredAcrossTopicsAndOrigins(t *testing.T) {
	rng := testlog.Rand(t, "the deliveries")
	from := Position{"t0": {"us": 7}, "t1": {}, "t2": {"eu": 3, "ap": 9}}
	p := newPositions(false, from)
	want := from.Clone()
	// Each stream numbers its topics 0, 1, ... as it first sends them (sometimes a topic
	// again under a new index); a new stream starts again at 0.
	index := map[string]uint64{}
	for range 3000 {
		topic := []string{"t0", "t1", "t2", "t3", "t4"}[rng.IntN(5)]
		o := []string{"eu", "us", "ap"}[rng.IntN(3)]
		off := uint64(rng.IntN(1000))
		switch rng.IntN(200) {
		case 0:
			p.newStream()
			clear(index)
		case 1:
			delete(index, topic) // bound again
		}
		idx, ok := index[topic]
		if !ok {
			idx = uint64(len(index)) + uint64(rng.IntN(2))*uint64(rng.IntN(3)) // mostly in order
			index[topic] = idx
		}
		p.deliver(&Record{Topic: topic, OriginRegion: o, OriginOffset: off}, idx)
		if rng.IntN(500) == 0 {
			if got := p.snapshot(false); !reflect.DeepEqual(got, mergedWant(want, topic, o, off)) {
				t.Fatalf("mid-way: delivered %v, want %v", got, mergedWant(want, topic, o, off))
			}
		}
		if want[topic] == nil {
			want[topic] = map[string]uint64{}
		}
		if last, ok := want[topic][o]; !ok || off > last {
			want[topic][o] = off
		}
	}
	got := p.snapshot(false)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	got["t0"]["us"] = 1 << 40
	if p.snapshot(false)["t0"]["us"] == 1<<40 {
		t.Fatal("the snapshot shares its maps with the positions")
	}
}

// mergedWant is want with (topic, origin, off) delivered too, as a copy.
func mergedWant(want Position, topic, origin string, off uint64) Position {
	w := want.Clone()
	if w[topic] == nil {
		w[topic] = map[string]uint64{}
	}
	if last, ok := w[topic][origin]; !ok || off > last {
		w[topic][origin] = off
	}
	return w
}
