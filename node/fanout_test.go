package node_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// fanPayload is record i's payload in the fanout tests: its offset, then filler to 100 B
// for the first fanSmall records and to 8 KiB after them.
func fanPayload(i int) []byte {
	size := 100
	if i >= fanSmall {
		size = 8 << 10
	}
	p := bytes.Repeat([]byte{byte(i)}, size)
	copy(p, fmt.Sprintf("record %d;", i))
	return p
}

const fanSmall = 200

// readFanRecords reads the records [from, to) of one subscription stream, checking each
// record's offset and payload.
func readFanRecords(r *wire.Reader, from, to int) error {
	for want := from; want < to; {
		f, err := r.Read()
		if err != nil {
			return fmt.Errorf("at offset %d: %w", want, err)
		}
		switch f := f.(type) {
		case *wire.Topic:
		case *wire.Record:
			if f.Offset != uint64(want) || !bytes.Equal(f.Payload, fanPayload(want)) {
				return fmt.Errorf("got offset %d (%.12q), want offset %d", f.Offset, f.Payload, want)
			}
			want++
		default:
			return fmt.Errorf("at offset %d: unexpected %s", want, f.Type())
		}
	}
	return nil
}

// The caught-up subscriptions of one connection are written by its fanout: a live tail of
// small records goes through it. One of them that stops reading is handed back to its own
// goroutine: the others get every record while it is stalled, and it gets every record, in
// order and whole, once it reads again (the bytes the fanout could not queue are written
// first).
func TestFanoutHandsBackAStalledSubscriber(t *testing.T) {
	n, _ := nodetest.Start(t)
	parked := make(chan struct{}, 64)
	n.OnPark(func() {
		select {
		case parked <- struct{}{}:
		default: // enough counted
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := dialClient(t, n) // metrics_test.go
	const topic, readers = "fan.stall", 8
	const records = fanSmall + 400 // then 3.2 MiB: more than a stalled stream's flow-control window
	if _, err := pub.Publish(ctx, client.Message{Topic: topic, Payload: fanPayload(0)}); err != nil {
		t.Fatal(err)
	}

	a := dialAbuse(t, n) // one connection for every subscription
	var rs []*wire.Reader
	for range readers + 1 { // the last one stalls
		s, r := a.stream(wire.Append(nil, &wire.Subscribe{Pattern: topic, Start: wire.StartEarliest}))
		defer s.CancelRead(0)
		s.SetReadDeadline(time.Now().Add(30 * time.Second))
		if f, err := r.Read(); err != nil {
			t.Fatal(err)
		} else if _, ok := f.(*wire.Subscribed); !ok {
			t.Fatalf("subscribe: %#v", f)
		}
		if err := readFanRecords(r, 0, 1); err != nil { // bound, caught up
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	for i := range readers + 1 { // every one caught up, parked on the connection's fanout
		select {
		case <-parked:
		case <-ctx.Done():
			t.Fatalf("%d of %d subscriptions parked on a fanout", i, readers+1)
		}
	}
	// read reads [from, to) on every stream of rs at once, and sends the first error (or
	// nil) on the channel it returns.
	read := func(rs []*wire.Reader, from, to int) <-chan error {
		errs := make(chan error, len(rs))
		for i, r := range rs {
			go func() {
				if err := readFanRecords(r, from, to); err != nil {
					errs <- fmt.Errorf("subscriber %d: %w", i, err)
					return
				}
				errs <- nil
			}()
		}
		done := make(chan error, 1)
		go func() {
			var first error
			for range rs {
				if err := <-errs; err != nil && first == nil {
					first = err
				}
			}
			done <- first
		}()
		return done
	}
	publish := func(from, to, every int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := pub.PublishAsync(ctx, client.Message{Topic: topic, Payload: fanPayload(i)}); err != nil {
				t.Fatal(err)
			}
			if i%every == 0 {
				if err := pub.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := pub.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A live tail: batches of 10 small records, read by all.
	_, _, fanned0 := n.FanoutStats()
	done := read(rs, 1, fanSmall)
	publish(1, fanSmall, 10)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, back0, fanned := n.FanoutStats()
	if got := counterValue(t, n, "quicmq_fanout_records_total"); got != float64(fanned) {
		t.Errorf("quicmq_fanout_records_total is %v, the fanouts wrote %d records", got, fanned)
	}
	delivered := uint64(len(rs) * (fanSmall - 1))
	t.Logf("live tail: fanouts wrote %d of the %d records delivered", fanned-fanned0, delivered)
	if fanned-fanned0 < delivered*9/10 {
		t.Errorf("fanouts wrote %d of the %d records of a live tail, want at least 90%%", fanned-fanned0, delivered)
	}

	// Bulk, with the last subscriber not reading.
	done = read(rs[:readers], fanSmall, records)
	publish(fanSmall, records, 50)
	if err := <-done; err != nil { // the stalled subscriber has not read a byte of them
		t.Fatal(err)
	}
	parks, back, _ := n.FanoutStats()
	t.Logf("bulk: %d parks in all, %d handbacks, %d rounds held back for the connection to send", parks, back-back0, n.FanoutWaits())
	if back == back0 {
		t.Error("the stalled subscriber was never handed back to its own goroutine")
	}
	if err := <-read(rs[readers:], fanSmall, records); err != nil {
		t.Fatal(err)
	}
}

// counterValue is the value of the unlabelled counter name on n's registry (-1: none).
func counterValue(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	mfs, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}
