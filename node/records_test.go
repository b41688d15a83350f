package node

import (
	"context"
	"fmt"
	"testing"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/wire"
)

// A subscription that asks for RECORDS (wire.SubscribeRecords) gets its records in RECORDS
// frames, each record once, in order, with what was published; one that does not ask gets
// RECORD frames, as before the option existed. On a connection of version 2: a wildcard of
// version 3 gets RUNS frames (runs_test.go).
func TestSubscribeRecordsFrames(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	const count = 300
	ctx := context.Background()
	for i := range count {
		msg := client.Message{Topic: "runs.a", Payload: []byte(fmt.Sprintf("r%03d", i))}
		if i%7 == 0 {
			msg.Headers = []client.Header{{Key: "k", Value: []byte("v")}}
		}
		if _, err := c.Publish(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	rc := mustDialVersion(t, n, 2)
	for _, batch := range []bool{true, false} {
		req := &wire.Subscribe{Pattern: "runs.>"}
		if batch {
			req.Flags = wire.SubscribeRecords
		}
		s := rc.open(req)
		if f := s.next(); f.Type() != wire.TypeSubscribed {
			t.Fatalf("got %s, want SUBSCRIBED", f.Type())
		}
		var recs []wire.Record
		frames := 0
		for len(recs) < count {
			switch f := s.next().(type) {
			case *wire.Topic:
			case *wire.Records:
				if !batch {
					t.Fatal("RECORDS on a subscription that did not ask for them")
				}
				recs = append(recs, f.Records...)
				frames++
			case *wire.Record:
				if batch {
					t.Fatal("RECORD on a subscription that asked for RECORDS")
				}
				recs = append(recs, *f)
				frames++
			default:
				t.Fatalf("unexpected %s", f.Type())
			}
		}
		for i, r := range recs {
			if r.Offset != uint64(i) || string(r.Payload) != fmt.Sprintf("r%03d", i) || r.OriginRegion != n.cfg.Region ||
				r.OriginOffset != uint64(i) || (i%7 == 0) != (len(r.Headers) == 1) || r.Time == 0 {
				t.Fatalf("batch=%v: record %d is %+v", batch, i, r)
			}
		}
		if batch && frames >= count/2 {
			t.Fatalf("%d RECORDS frames for %d records", frames, count)
		}
		s.str.Close()
	}
}
