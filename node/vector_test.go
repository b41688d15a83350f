package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/vector"
	"github.com/quicmq/quicmq/wal"
)

// vecRec is a record as the vector rule sees it.
type vecRec struct {
	off       uint64
	origin    string
	originOff uint64
}

// interleavedLog appends n records to topic "t" of a new log, each of one of three origins
// chosen by rng: "eu" (this region: published here) and "us", "ap" (mirrored, each with its
// cursor in the same batch, as federation does), in runs of 1 to 4. It returns the records.
func interleavedLog(t *testing.T, rng *rand.Rand, n int) (*wal.Log, []vecRec) {
	t.Helper()
	return interleavedLogTB(t, rng, n)
}

func interleavedLogTB(t testing.TB, rng *rand.Rand, n int) (*wal.Log, []vecRec) {
	t.Helper()
	l, err := wal.Open(t.TempDir(), wal.Options{Logger: testLogger(t), RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	next := map[string]uint64{}
	var recs []vecRec
	for len(recs) < n {
		origin := []string{"eu", "us", "ap"}[rng.IntN(3)]
		run := min(1+rng.IntN(4), n-len(recs))
		req := wal.AppendRequest{Topic: "t"}
		for range run {
			r := wal.Record{Payload: []byte("x")}
			if origin != "eu" {
				r.OriginRegion, r.OriginOffset = origin, next[origin]
				next[origin]++
			}
			req.Records = append(req.Records, r)
		}
		if origin != "eu" {
			req.Position = &wal.Position{Name: mirrorCursorPrefix + origin, Topic: "t", Value: next[origin] - 1}
		}
		res := l.Append(ctx, req)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		for i := range run {
			off := res.First + uint64(i)
			r := vecRec{off: off, origin: origin, originOff: off}
			if origin != "eu" {
				r.originOff = req.Records[i].OriginOffset
			}
			recs = append(recs, r)
		}
	}
	return l, recs
}

// TestVectorResumeRule: with records of three origins interleaved, resuming after any vector
// starts at the first record it does not cover and delivers exactly the records it does not
// cover, each origin in order: nothing it covers, nothing else skipped. The vectors are
// random (seeded, printed), with origins left out, at their start, in the middle, at and past
// their last record. The vector of a prefix (computed backwards) and one advanced over a
// range (forwards) agree with the records.
func TestVectorResumeRule(t *testing.T) {
	rng := testlog.Rand(t, "the log and the vectors")
	l, recs := interleavedLog(t, rng, 3000)
	last := map[string]uint64{}
	for _, r := range recs {
		last[r.origin] = r.originOff
	}
	for trial := range 300 {
		v := map[string]uint64{}
		for o, top := range last {
			switch rng.IntN(5) {
			case 0: // left out: nothing of it covered
			case 1:
				v[o] = top + uint64(rng.IntN(3)) // everything
			default:
				v[o] = uint64(rng.IntN(int(top) + 1))
			}
		}
		start, err := vector.Start(l, "eu", "t", v)
		if err != nil {
			t.Fatal(err)
		}
		var want, got []vecRec
		for _, r := range recs {
			cov := vector.Covered(v, r.origin, "eu", r.originOff)
			if !cov {
				want = append(want, r)
			}
			if r.off < start && !cov {
				t.Fatalf("trial %d, vector %v: start %d is past record %+v, which it does not cover", trial, v, start, r)
			}
			if r.off >= start && !vector.Covered(v, rOrigin(r), "eu", r.originOff) {
				got = append(got, r)
			}
		}
		if len(want) > 0 && want[0].off != start {
			t.Fatalf("trial %d, vector %v: start %d, want the first uncovered record %d", trial, v, start, want[0].off)
		}
		if len(want) == 0 && start != uint64(len(recs)) {
			t.Fatalf("trial %d, vector %v covers every record: start %d, want the head %d", trial, v, start, len(recs))
		}
		if len(got) != len(want) {
			t.Fatalf("trial %d, vector %v: %d records delivered, want %d", trial, v, len(got), len(want))
		}
		lastSent := map[string]uint64{}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("trial %d: record %d delivered %+v, want %+v", trial, i, got[i], want[i])
			}
			if p, ok := lastSent[got[i].origin]; ok && got[i].originOff <= p {
				t.Fatalf("trial %d: origin %s out of order: %d after %d", trial, got[i].origin, got[i].originOff, p)
			}
			lastSent[got[i].origin] = got[i].originOff
		}

		// The vector of every record below upTo, backwards and forwards.
		upTo := uint64(rng.IntN(len(recs) + 1))
		wantVec := map[string]uint64{}
		for _, r := range recs[:upTo] {
			wantVec[r.origin] = r.originOff
		}
		back, err := vector.Prefix(l, "eu", "t", upTo)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(back, wantVec) {
			t.Fatalf("trial %d: prefixVector(%d) = %v, want %v", trial, upTo, back, wantVec)
		}
		if upTo > 0 {
			mid := uint64(rng.IntN(int(upTo)))
			fwd, err := vector.Prefix(l, "eu", "t", mid)
			if err != nil {
				t.Fatal(err)
			}
			if at, err := vector.Advance(l, "eu", "t", fwd, mid, upTo-1); err != nil || at != upTo {
				t.Fatalf("advanceVector to %d: at %d, %v", upTo-1, at, err)
			}
			if !maps.Equal(fwd, wantVec) {
				t.Fatalf("trial %d: prefixVector(%d) advanced to %d = %v, want %v", trial, mid, upTo, fwd, wantVec)
			}
		}
	}
}

// rOrigin is the origin as the log stores it: "" for this region's records.
func rOrigin(r vecRec) string {
	if r.origin == "eu" {
		return ""
	}
	return r.origin
}

// A tenant's subscription given a vector resumes after it inside the tenant's namespace, and
// a durable's acknowledged vector is stored with its position; a vector the request cannot
// take is refused naming why.
func TestSubscribeVector(t *testing.T) {
	n := tenantNode(t)
	c := mustDialAs(t, n, acmeToken)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 10 {
		if _, err := c.Publish(ctx, client.Message{Topic: "orders.a", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Origin "test" (this region) covered up to 4, and an origin the log does not hold.
	pos := client.Position{"orders.a": {"test": 4, "elsewhere": 99}}
	sub, err := c.Subscribe(ctx, "orders.*", client.SubscribeOptions{Durable: "d", Position: pos})
	if err != nil {
		t.Fatal(err)
	}
	for want := uint64(5); want < 8; want++ {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Offset != want || rec.OriginRegion != "test" {
			t.Fatalf("got %s@%d from %s, want offset %d", rec.Topic, rec.Offset, rec.OriginRegion, want)
		}
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := sub.Position()["orders.a"], map[string]uint64{"test": 7, "elsewhere": 99}; !maps.Equal(got, want) {
		t.Errorf("client's position %v, want %v", got, want)
	}
	sub.Close()
	resume, vec, ok, err := n.Log().PositionVector("tenant/acme/d", "acme.orders.a")
	if want := map[string]uint64{"test": 7, "elsewhere": 99}; err != nil || !ok || resume != 8 || !maps.Equal(vec, want) {
		t.Fatalf("stored position: resume %d, vector %v (%v %v), want 8 and %v", resume, vec, ok, err, want)
	}

	for name, tc := range map[string]struct {
		opts    client.SubscribeOptions
		pattern string
		code    client.Code
	}{
		"topic outside the pattern": {client.SubscribeOptions{Position: client.Position{"orders.b.c": {}}}, "orders.*", client.CodeInvalidArgument},
		"invalid topic":             {client.SubscribeOptions{Position: client.Position{"orders..b": {}}}, "orders.>", client.CodeInvalidTopic},
		"with a group":              {client.SubscribeOptions{Group: "g", Position: client.Position{"orders.a": {}}}, "orders.*", client.CodeInvalidArgument},
	} {
		_, err := c.Subscribe(ctx, tc.pattern, tc.opts)
		var e *client.Error
		if !errors.As(err, &e) || e.Code != tc.code {
			t.Errorf("%s: got %v, want code %v", name, err, tc.code)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// A group with a vector never reaches the node from the SDK: the raw frame is refused.
	rc := mustDial(t, newTestNode(t))
	s := rc.open(&wire.Subscribe{Pattern: "x.>", Group: &wire.Group{Name: "g"}, Vector: []wire.TopicVector{{Topic: "x.a"}}})
	if e := s.expectError(); e.Code != wire.CodeInvalidArgument {
		t.Errorf("group with a vector: %v", e)
	}
}

// In a region of two nodes, a subscription with a vector made through the node that does not
// own the topic is served by the owner from the vector: the relay hands it on, for a literal
// topic and for a pattern spanning both nodes' topics.
func TestVectorThroughRelay(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	topics := []string{"jobs.a", "jobs.b", "jobs.c", "jobs.d", "jobs.e", "jobs.f"}
	pub := m.dial("eu-1")
	pos := client.Position{}
	owners := map[string]bool{}
	for _, topic := range topics {
		owners[m.owner("eu", topic)] = true
		for i := range 10 {
			if _, err := pub.Publish(context.Background(), client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		pos[topic] = map[string]uint64{"eu": 6}
	}
	if len(owners) < 2 {
		t.Fatalf("all of %v placed on one node", topics)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, via := range []string{"eu-1", "eu-2"} {
		for _, pattern := range []string{"jobs.a", "jobs.*"} {
			p := pos
			if pattern == "jobs.a" {
				p = client.Position{"jobs.a": pos["jobs.a"]}
			}
			sub, err := m.dial(via).Subscribe(ctx, pattern, client.SubscribeOptions{Position: p})
			if err != nil {
				t.Fatal(err)
			}
			want := 3 * len(topics)
			if pattern == "jobs.a" {
				want = 3
			}
			got := map[string][]uint64{}
			for range want {
				rec, err := sub.Next(ctx)
				if err != nil {
					t.Fatalf("via %s, %s: %v", via, pattern, err)
				}
				got[rec.Topic] = append(got[rec.Topic], rec.Offset)
			}
			for topic, offs := range got {
				if !slices.Equal(offs, []uint64{7, 8, 9}) {
					t.Errorf("via %s, %s: %s delivered %v, want 7, 8, 9", via, pattern, topic, offs)
				}
			}
			sub.Close()
		}
	}
}

// BenchmarkVectorStart: finding where a vector resumes in a log of 20,000 records of three
// interleaved origins, for a vector 1,000 records behind the head (every origin named), and for
// one that leaves an origin out (the whole log is read).
func BenchmarkVectorStart(b *testing.B) {
	for _, tc := range []struct {
		name   string
		drop   string
		behind int
	}{{"behind-1000", "", 1000}, {"origin-left-out", "ap", 1000}} {
		b.Run(tc.name, func(b *testing.B) {
			l, recs := benchLog(b, 20_000)
			v := map[string]uint64{}
			for _, r := range recs[:len(recs)-tc.behind] {
				v[r.origin] = r.originOff
			}
			delete(v, tc.drop)
			b.ResetTimer()
			for range b.N {
				if _, err := vector.Start(l, "eu", "t", v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAdvanceVector: the cost a durable's store adds per acknowledged record.
func BenchmarkAdvanceVector(b *testing.B) {
	l, _ := benchLog(b, 20_000)
	vec := map[string]uint64{}
	b.ResetTimer()
	for i := range b.N {
		from := uint64(i%19) * 1024
		if _, err := vector.Advance(l, "eu", "t", vec, from, from+1023); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1024, "ns/record")
}

func benchLog(b *testing.B, n int) (*wal.Log, []vecRec) {
	b.Helper()
	return interleavedLogTB(b, rand.New(rand.NewPCG(1, 2)), n)
}
