package wal

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// Many topics read as one (issue 35), each beside its baseline in the same run:
//
//	go test -run '^$' -bench 'Sweep|PositionsMemory' -benchtime 3x ./wal
//
// BenchmarkSweep reads 100,000 topics of one 100 B record each with one Sweep, in ID order
// ("sweep/topics"), then a topic of 100,000 such records with one Scanner in batches of
// 4,096 ("scanner/one-topic"), which reports "sweep/one": the first's records/s over its own.
// BenchmarkPositionsMemory opens a log of 100,000 topics and measures the heap it holds,
// then the same log with one durable consumer's position on every topic: "positions-MiB"
// beside "topics-MiB".

const sweepTopics = 100_000

func sweepLog(b *testing.B) (dir string) {
	dir = b.TempDir()
	l := openTestLog(b, dir, benchOpts())
	payload := make([]byte, 100)
	done := make(chan error, 512)
	inflight := 0
	wait := func() {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		inflight--
	}
	cb := func(r AppendResult) { done <- r.Err }
	recs := make([]Record, 512)
	for i := range recs {
		recs[i].Payload = payload
	}
	for off := 0; off < sweepTopics; off += len(recs) {
		l.AppendAsync(AppendRequest{Topic: "one.topic", Records: recs[:min(len(recs), sweepTopics-off)]}, cb)
		if inflight++; inflight == cap(done) {
			wait()
		}
	}
	for i := range sweepTopics {
		l.AppendAsync(AppendRequest{Topic: fmt.Sprintf("many.%d", i), Records: recs[:1]}, cb)
		if inflight++; inflight == cap(done) {
			wait()
		}
	}
	for inflight > 0 {
		wait()
	}
	if err := l.pdb.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	return dir
}

func BenchmarkSweep(b *testing.B) {
	dir := sweepLog(b)
	l := openTestLog(b, dir, benchOpts())
	var many []Instance
	for _, t := range l.TopicsWhile(func() {}) {
		if t.Name != "one.topic" {
			many = append(many, t.Instance)
		}
	}
	slices.SortFunc(many, func(a, b Instance) int { return int(int64(a.ID()) - int64(b.ID())) })
	var sweepRate float64
	b.Run("sweep/topics", func(b *testing.B) {
		fn := func(*Record) error { return nil }
		var got int
		b.ResetTimer()
		for range b.N {
			sw := l.NewSweep()
			for _, in := range many {
				n, _, err := sw.ReadFunc(in, 0, 4096, 256<<10, fn)
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
			sw.Release()
		}
		if got != len(many)*b.N {
			b.Fatalf("read %d records, want %d", got, len(many)*b.N)
		}
		sweepRate = float64(got) / b.Elapsed().Seconds()
		b.ReportMetric(sweepRate, "records/s")
	})
	b.Run("scanner/one-topic", func(b *testing.B) {
		fn := func(*Record) error { return nil }
		var got int
		b.ResetTimer()
		for range b.N {
			sc := l.NewScanner("one.topic")
			for next := uint64(0); next < sweepTopics; {
				n, err := sc.ReadFunc(next, 4096, 256<<10, fn)
				if err != nil {
					b.Fatal(err)
				}
				next += uint64(n)
				got += n
			}
			sc.Release()
		}
		rate := float64(got) / b.Elapsed().Seconds()
		b.ReportMetric(rate, "records/s")
		if sweepRate > 0 {
			b.ReportMetric(sweepRate/rate, "sweep/one")
		}
	})
}

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func BenchmarkPositionsMemory(b *testing.B) {
	dir := sweepLog(b)
	mib := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / (1 << 20) }
	for range b.N {
		before := heapNow()
		l := openTestLog(b, dir, benchOpts())
		topics := mib(before, heapNow())
		resume := make(map[string]uint64, sweepTopics)
		for i := range sweepTopics {
			resume[fmt.Sprintf("many.%d", i)] = 1
		}
		if err := l.ResetPositions(context.Background(), "durable", resume); err != nil {
			b.Fatal(err)
		}
		resume = nil
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		before = heapNow()
		l = openTestLog(b, dir, benchOpts())
		both := mib(before, heapNow())
		if r, ok, err := l.Resume("durable", "many.7"); err != nil || !ok || r != 1 {
			b.Fatalf("resume of many.7: %d %v %v", r, ok, err)
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(topics, "topics-MiB")
		b.ReportMetric(both-topics, "positions-MiB")
		// The log was opened twice and its data set reset each time: drop the positions for
		// the next iteration.
		l = openTestLog(b, dir, benchOpts())
		if _, err := l.DeletePosition(context.Background(), "durable"); err != nil {
			b.Fatal(err)
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
