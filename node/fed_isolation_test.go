package node

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// fedGauge sums the samples of a metric family on n's registry.
func fedGauge(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	mfs, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetGauge() != nil {
				sum += m.GetGauge().GetValue()
			} else if m.GetCounter() != nil {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// heapInUse estimates, from the heap profile after a collection, the bytes in use allocated
// outside Pebble (rest) and inside it (pebble). Pebble's memtables, block cache and flush
// buffers grow with what the two logs hold, and a race build puts even its manually managed
// buffers on the Go heap in one process of two (pebble/internal/manual); the rest is what
// the nodes, links, QUIC connections and clients hold: what a buffered stream would grow.
func heapInUse(t *testing.T) (rest, pebble uint64) {
	t.Helper()
	runtime.GC()
	runtime.GC() // the profile describes the heap as of the last completed collection
	n, _ := runtime.MemProfile(nil, true)
	recs := make([]runtime.MemProfileRecord, n+64)
	n, ok := runtime.MemProfile(recs, true)
	if !ok {
		t.Fatal("memory profile grew while read")
	}
	for _, r := range recs[:n] {
		inPebble := false
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.Contains(f.Function, "cockroachdb/pebble") {
				inPebble = true
				break
			}
			if !more {
				break
			}
		}
		// Scale the sampled figures as pprof does: an allocation of size s was sampled with
		// probability 1-exp(-s/rate).
		in := float64(r.InUseBytes())
		if r.AllocObjects > 0 && runtime.MemProfileRate > 0 {
			size := float64(r.AllocBytes) / float64(r.AllocObjects)
			in /= 1 - math.Exp(-size/float64(runtime.MemProfileRate))
		}
		if inPebble {
			pebble += uint64(in)
		} else {
			rest += uint64(in)
		}
	}
	return rest, pebble
}

// One link (us -> eu) carries 100 remote streams: 50 mirror streams (us subscribers of
// topics published in eu) and 50 pass-through replays of eu's log (SubscribeOptions.Region).
// The subscriber of one replay stops reading while a firehose is published to its topic:
// the other 99 keep up with the steady publish rate (their lag stays flat), and the heap of
// the process holding both nodes and the clients (less Pebble's, which grows with the logs)
// stays bounded: the stalled stream is held back by QUIC flow control at every hop, not
// buffered (I4, I5 across regions).
func TestFedLinkIsolatesStalledReplay(t *testing.T) {
	m := newTestMesh(t, "eu", "us")
	const half = 50
	var topics []string // [0, half): mirrored; [half, 2*half): replayed; topics[half] stalls
	for i := 0; i < half; i++ {
		topics = append(topics, fmt.Sprintf("iso.m.%02d", i))
	}
	for i := 0; i < half; i++ {
		topics = append(topics, fmt.Sprintf("iso.p.%02d", i))
	}
	const stalled = half
	eu := m.dial("eu")
	for _, topic := range topics {
		publishSeq(t, eu, topic, "eu", 0, 1)
	}
	us := m.dial("us")
	ctx := context.Background()
	subs := make([]*client.Subscription, len(topics))
	for i, topic := range topics {
		opts := client.SubscribeOptions{}
		if i >= half {
			opts.Region = "eu"
		}
		sub, err := us.Subscribe(ctx, topic, opts)
		if err != nil {
			t.Fatalf("subscribe %s: %v", topic, err)
		}
		subs[i] = sub
	}
	usNode := m.nodes["us"]
	testlog.WaitForErr(t, 20*time.Second, fmt.Sprintf("us to mirror %d topics", half), func() error {
		links := usNode.Federation().Links()
		if len(links) == 1 && len(links[0].Mirrors) == half {
			return nil
		}
		return fmt.Errorf("us links: %+v", links)
	})

	// Readers of the 99: each checks it gets "eu-0", "eu-1", ... in order.
	delivered := make([]atomic.Int64, len(topics))
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	var readers sync.WaitGroup
	for i, sub := range subs {
		if i == stalled {
			continue
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				rec, err := sub.Next(readCtx)
				if err != nil {
					if readCtx.Err() == nil {
						t.Errorf("%s after %d records: %v", topics[i], delivered[i].Load(), err)
					}
					return
				}
				if want := fmt.Sprintf("eu-%d", delivered[i].Load()); string(rec.Payload) != want || rec.OriginRegion != "eu" {
					t.Errorf("%s: got %s %q, want eu %q", topics[i], rec.OriginRegion, rec.Payload, want)
					return
				}
				delivered[i].Add(1)
				sub.Ack(rec)
			}
		}()
	}

	// Steady publisher: one record to each of the 99 every interval.
	interval := 50 * time.Millisecond
	published := make([]atomic.Int64, len(topics))
	for i := range published {
		published[i].Store(1)
	}
	stopPub := make(chan struct{})
	var pubWG sync.WaitGroup
	pubWG.Add(1)
	go func() {
		defer pubWG.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for round := 1; ; round++ {
			select {
			case <-stopPub:
				return
			case <-tick.C:
			}
			var fs []*client.Future
			var idx []int
			for i, topic := range topics {
				if i == stalled {
					continue
				}
				f, err := eu.PublishAsync(ctx, client.Message{Topic: topic, Payload: fmt.Appendf(nil, "eu-%d", round)})
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				fs, idx = append(fs, f), append(idx, i)
			}
			for j, f := range fs {
				if _, err := f.Wait(ctx); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				published[idx[j]].Add(1)
			}
		}
	}()

	// lagSample is the publish-to-delivery lag of each of the 99, in records.
	type sample struct {
		at          time.Time
		maxLag      int64 // largest lag of any of the 99
		sumLag      int64
		mirrorLag   float64 // quicmq_mirror_lag_records summed over us's mirrors
		stalledRead int64
	}
	var samples []sample
	takeSample := func() {
		s := sample{at: time.Now(), mirrorLag: fedGauge(t, usNode, "quicmq_mirror_lag_records")}
		for i := range topics {
			if i == stalled {
				continue
			}
			lag := max(published[i].Load()-delivered[i].Load(), 0)
			s.maxLag = max(s.maxLag, lag)
			s.sumLag += lag
		}
		samples = append(samples, s)
	}
	sampleFor := func(d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			testlog.Pause(context.Background(), 100*time.Millisecond) // the sampling interval
			takeSample()
		}
	}
	sampleFor(time.Second) // before the stall matters
	heapBefore, pebbleBefore := heapInUse(t)

	// The firehose into the stalled replay's topic, on its own connection.
	size, total := 16<<10, 32<<20
	if raceEnabled {
		total = 16 << 20
	}
	fire := m.dial("eu")
	fireDone := make(chan time.Duration, 1)
	fireStart := time.Now()
	go func() {
		payload := make([]byte, size)
		var fs []*client.Future
		for sent := 0; sent < total; sent += size {
			f, err := fire.PublishAsync(ctx, client.Message{Topic: topics[stalled], Payload: payload})
			if err != nil {
				t.Errorf("firehose: %v", err)
				break
			}
			fs = append(fs, f)
		}
		for _, f := range fs {
			if _, err := f.Wait(ctx); err != nil {
				t.Errorf("firehose: %v", err)
				break
			}
		}
		fireDone <- time.Since(fireStart)
	}()
	stallStart := len(samples)
	sampleFor(2 * time.Second)
	fireTook := <-fireDone
	sampleFor(2 * time.Second) // the firehose is all at eu, the stalled replay holds its lag
	heapAfter, pebbleAfter := heapInUse(t)
	stallSamples := samples[stallStart:]
	// What the stalled replay has not taken: eu's subscriptions' lag (the stalled one's, the
	// others' being about zero), held in eu's log, not in memory.
	heldBack := fedGauge(t, m.nodes["eu"], "quicmq_subscription_lag_records")

	close(stopPub)
	pubWG.Wait()
	testlog.WaitForErr(t, 30*time.Second, "every record delivered after publishing stopped", func() error {
		for i := range topics {
			if i != stalled && delivered[i].Load() != published[i].Load() {
				return fmt.Errorf("%s: %d of %d records delivered", topics[i], delivered[i].Load(), published[i].Load())
			}
		}
		return nil
	})
	caughtUp := time.Now()
	stopReading()
	readers.Wait()

	// The stalled replay still works: it was held back, not broken.
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	for i := 0; i < 3; i++ {
		rec, err := subs[stalled].Next(nctx)
		if err != nil || rec.Offset != uint64(i) {
			t.Fatalf("stalled replay, record %d: %+v %v", i, rec.Offset, err)
		}
	}
	cancel()

	// Flat: the lag of the 99 in the last second of the stall is no worse than in the second
	// before it began, give or take five publish rounds (timing noise of a loaded machine;
	// coupled to the stalled stream they would fall behind by the whole stall, 40+ rounds).
	quiet := samples[:stallStart]
	worst := func(ss []sample) int64 {
		var w int64
		for _, s := range ss {
			w = max(w, s.maxLag)
		}
		return w
	}
	last := stallSamples[len(stallSamples)-10:]
	maxMirrorLag := 0.0
	for _, s := range stallSamples {
		maxMirrorLag = max(maxMirrorLag, s.mirrorLag)
	}
	var lags []int64
	for _, s := range stallSamples {
		lags = append(lags, s.maxLag)
	}
	slices.Sort(lags)
	rounds := int64(published[0].Load())
	grow := int64(heapAfter) - int64(heapBefore)
	t.Logf("99 streams, %d records each at %v per round; firehose of %d MiB into the stalled replay published in %v",
		rounds, interval, total>>20, fireTook.Round(time.Millisecond))
	t.Logf("lag of the 99 (records, worst stream per 100 ms sample): before the stall max %d; during it median %d max %d; last second max %d; mirror lag metric max %v",
		worst(quiet), lags[len(lags)/2], lags[len(lags)-1], worst(last), maxMirrorLag)
	t.Logf("all 99 caught up %v after publishing stopped; heap in use outside Pebble %d MiB -> %d MiB (%+d KiB; Pebble's besides: %d -> %d MiB) with %d MiB published into the stalled replay (eu subscription lag %v records)",
		caughtUp.Sub(samples[len(samples)-1].at).Round(time.Millisecond), heapBefore>>20, heapAfter>>20, grow>>10,
		pebbleBefore>>20, pebbleAfter>>20, total>>20, heldBack)

	if heldBack < float64(total/size)/2 {
		t.Errorf("eu's subscription lag %v records: the stalled replay was not held back at the origin", heldBack)
	}
	if w := worst(last); w > worst(quiet)+5 {
		t.Errorf("lag of the 99 grew during the stall: %d records at the end, %d before", w, worst(quiet))
	}
	// Bounded: the windows on the stalled path (client stream, link stream, read-ahead) hold
	// a few MiB; buffering the stream would hold all of the held-back firehose.
	if grow > int64(total)*3/4 {
		t.Errorf("heap outside Pebble grew by %d MiB while %d MiB were held back behind a stalled stream: the stream is buffered, not flow-controlled", grow>>20, total>>20)
	}
}
