package wire

import (
	"errors"
	"testing"
)

// TestPublishAckFlags: the flags of PUBLISH_ACK are an optional last field: absent when
// zero (the frame is byte for byte the old one), refused when sent as an explicit 0, and
// reset by the Decoder between acks it decodes in place.
func TestPublishAckFlags(t *testing.T) {
	plain := Append(nil, &PublishAck{Seq: 1, Offset: 2, Time: 3})
	if want := []byte{byte(TypePublishAck), 0, 0, 0, 3, 1, 2, 3}; string(plain) != string(want) {
		t.Fatalf("ack without flags encodes as % x, want % x", plain, want)
	}
	dup := Append(nil, &PublishAck{Seq: 2, Offset: 2, Time: 3, Flags: AckDuplicate})
	if len(dup) != len(plain)+1 {
		t.Fatalf("ack with flags is %d bytes, want %d", len(dup), len(plain)+1)
	}
	zero := append(append([]byte{byte(TypePublishAck), 0, 0, 0, 4}, plain[5:]...), 0)
	if _, _, err := Decode(zero, Limits{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("explicit zero flags: %v, want ErrMalformed", err)
	}
	d := NewDecoder(Limits{})
	for i, c := range []struct {
		b     []byte
		flags uint64
	}{{dup, AckDuplicate}, {plain, 0}, {dup, AckDuplicate}} {
		f, n, err := d.Decode(c.b)
		if err != nil || n != len(c.b) {
			t.Fatalf("ack %d: %v (%d bytes)", i, err, n)
		}
		if got := f.(*PublishAck).Flags; got != c.flags {
			t.Fatalf("ack %d: flags %d, want %d", i, got, c.flags)
		}
	}
}
