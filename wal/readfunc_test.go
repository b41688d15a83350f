package wal

import (
	"bytes"
	"errors"
	"testing"
)

// ReadFunc hands over the same records as Read, in order, honours the limits, and stops at
// the callback's error with the count of records it accepted.
func TestReadFuncMatchesRead(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	mustAppend(t, l, "rf", 0, 300)
	want, err := l.Read("rf", 10, 200, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []Record
	n, err := l.ReadFunc("rf", 10, 200, 0, func(r *Record) error {
		c := *r
		c.Payload = bytes.Clone(r.Payload) // valid only during the call
		got = append(got, c)
		return nil
	})
	if err != nil || n != len(want) || len(got) != len(want) {
		t.Fatalf("ReadFunc: %d records, err %v; Read: %d", n, err, len(want))
	}
	for i := range want {
		if got[i].Offset != want[i].Offset || got[i].Time != want[i].Time || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("record %d differs: %+v vs %+v", i, got[i], want[i])
		}
	}

	stop := errors.New("enough")
	n, err = l.ReadFunc("rf", 0, 0, 0, func(r *Record) error {
		if r.Offset == 5 {
			return stop
		}
		return nil
	})
	if n != 5 || err != stop {
		t.Fatalf("stopped read: %d records, err %v; want 5 and the callback's error", n, err)
	}
	if _, err := l.ReadFunc("nope", 0, 0, 0, func(*Record) error { return nil }); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("unknown topic: %v", err)
	}
}
