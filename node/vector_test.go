package node

import (
	"context"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

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
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 16))
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
		start, err := vectorStart(l, "eu", "t", v)
		if err != nil {
			t.Fatal(err)
		}
		var want, got []vecRec
		for _, r := range recs {
			cov := covered(v, r.origin, "eu", r.originOff)
			if !cov {
				want = append(want, r)
			}
			if r.off < start && !cov {
				t.Fatalf("trial %d, vector %v: start %d is past record %+v, which it does not cover", trial, v, start, r)
			}
			if r.off >= start && !covered(v, rOrigin(r), "eu", r.originOff) {
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
		back, err := prefixVector(l, "eu", "t", upTo)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(back, wantVec) {
			t.Fatalf("trial %d: prefixVector(%d) = %v, want %v", trial, upTo, back, wantVec)
		}
		if upTo > 0 {
			mid := uint64(rng.IntN(int(upTo)))
			fwd, err := prefixVector(l, "eu", "t", mid)
			if err != nil {
				t.Fatal(err)
			}
			if at, err := advanceVector(l, "eu", "t", fwd, mid, upTo-1); err != nil || at != upTo {
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
