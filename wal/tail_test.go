package wal

import (
	"context"
	"testing"
)

// NotifyFunc's function runs after the high-watermark advanced, once per durable batch, and
// not after cancel.
func TestNotifyFunc(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	seen := make(chan uint64, 16)
	cancel := l.NotifyFunc("t", func() {
		_, hwm, _ := l.Bounds("t")
		seen <- hwm
	})
	for i := range 3 {
		if res := l.Append(context.Background(), AppendRequest{Topic: "t", Records: []Record{{Payload: []byte("x")}}}); res.Err != nil {
			t.Fatal(res.Err)
		}
		if got := <-seen; got != uint64(i+1) {
			t.Fatalf("called with the high-watermark at %d, want %d", got, i+1)
		}
	}
	cancel()
	cancel()
	if res := l.Append(context.Background(), AppendRequest{Topic: "t", Records: []Record{{Payload: []byte("x")}}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	// Append returns after the completer woke the watchers, so a call would be queued by now.
	select {
	case hwm := <-seen:
		t.Fatalf("called after cancel (high-watermark %d)", hwm)
	default:
	}
}
