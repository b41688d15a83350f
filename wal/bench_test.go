package wal

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Benchmarks, each beside its baseline (run them in one go test invocation):
//
//	go test -run '^$' -bench 'Append|RawPebbleSyncedBatch|Replay|RawPebbleScan' -benchtime 5s ./wal
//
// BenchmarkAppend/pipelined-1 must run before
// BenchmarkRawPebbleSyncedBatch/pipelined-1 (source order does that), which
// takes its batch size from it.

var (
	replayRecords = flag.Int("wal.replay", 200_000, "records (1 KiB) in the replay data set; -wal.replay=1000000 for 1M")
	rawBatch      = flag.Int("wal.rawbatch", 0, "records per synced batch of BenchmarkRawPebbleSyncedBatch/pipelined-1 (0: the records per commit BenchmarkAppend/pipelined-1 achieved in this run, else 64)")
)

const (
	benchRecordSize = 1024
	benchWindow     = 256 // unacknowledged appends of the pipelining appender
)

// measuredPerCommit is the batch size BenchmarkAppend/pipelined-1 achieved.
var measuredPerCommit atomic.Int64

func benchPayload() []byte {
	p := make([]byte, benchRecordSize)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func benchOpts() Options {
	return Options{Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1}
}

// reportAppend reports throughput and batching, and returns records per
// commit.
func reportAppend(b *testing.B, l *Log, elapsed time.Duration) float64 {
	st := l.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	perCommit := 0.0
	if st.Commits > 0 {
		perCommit = float64(st.Records) / float64(st.Commits)
		b.ReportMetric(perCommit, "records/commit")
	}
	if st.Fsyncs > 0 {
		b.ReportMetric(float64(st.Records)/float64(st.Fsyncs), "records/fsync")
	}
	return perCommit
}

// BenchmarkAppend: 1 KiB records through the WAL on disk: one appender
// pipelining benchWindow single-record AppendAsync calls, and 16 appenders
// each blocking in Append with one record.
func BenchmarkAppend(b *testing.B) {
	payload := benchPayload()
	b.Run("pipelined-1", func(b *testing.B) {
		l := openTestLog(b, b.TempDir(), benchOpts())
		window := make(chan struct{}, benchWindow)
		var wg sync.WaitGroup
		var failed atomic.Bool
		b.SetBytes(benchRecordSize)
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			window <- struct{}{}
			wg.Add(1)
			l.AppendAsync(AppendRequest{Topic: "bench", Records: []Record{{Payload: payload}}}, func(res AppendResult) {
				if res.Err != nil {
					failed.Store(true)
				}
				<-window
				wg.Done()
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		b.StopTimer()
		if failed.Load() {
			b.Fatal("append failed")
		}
		if per := reportAppend(b, l, elapsed); b.N >= 1000 {
			measuredPerCommit.Store(int64(per + 0.5))
		}
	})
	b.Run("concurrent-16", func(b *testing.B) {
		l := openTestLog(b, b.TempDir(), benchOpts())
		b.SetBytes(benchRecordSize)
		elapsed := runConcurrent(b, 16, func() error {
			return l.Append(context.Background(), AppendRequest{Topic: "bench", Records: []Record{{Payload: payload}}}).Err
		})
		reportAppend(b, l, elapsed)
	})
}

// runConcurrent runs b.N calls of op on n goroutines.
func runConcurrent(b *testing.B, n int, op func() error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := op(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	return elapsed
}

// rawDB opens Pebble with the options the WAL uses.
func rawDB(b *testing.B) *pebble.DB {
	db, err := pebble.Open(b.TempDir(), &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       DefaultMemTableSize,
		CacheSize:          DefaultCacheSize,
		Logger:             pebbleLogger{slog.New(slog.DiscardHandler)},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return db
}

// BenchmarkRawPebbleSyncedBatch is the baseline of BenchmarkAppend: the same
// 1 KiB values (same key and value sizes as the WAL stores) written with
// raw synced Pebble batches, no queue, no offsets, no callbacks.
//   - pipelined-1: one goroutine committing batches of as many records as
//     the WAL put in each commit (measured by BenchmarkAppend/pipelined-1 in
//     the same run; -wal.rawbatch overrides).
//   - concurrent-16: 16 goroutines each committing one record per synced
//     batch: the 16 WAL appenders each have one record in flight, and the
//     WAL's commits hold about one record each in that case too (see its
//     records/commit); Pebble merges concurrent syncs for both.
func BenchmarkRawPebbleSyncedBatch(b *testing.B) {
	value := make([]byte, recordFixedLen+benchRecordSize)
	copy(value[recordFixedLen:], benchPayload())
	b.Run("pipelined-1", func(b *testing.B) {
		batch := *rawBatch
		if batch == 0 {
			batch = int(measuredPerCommit.Load())
		}
		if batch == 0 {
			batch = 64
		}
		db := rawDB(b)
		b.SetBytes(benchRecordSize)
		b.ResetTimer()
		start := time.Now()
		var off uint64
		for off < uint64(b.N) {
			bt := db.NewBatch()
			for i := 0; i < batch && off < uint64(b.N); i++ {
				_ = bt.Set(recordKey(1, off), value, nil)
				off++
			}
			if err := bt.Commit(pebble.Sync); err != nil {
				b.Fatal(err)
			}
			_ = bt.Close()
		}
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
		b.ReportMetric(float64(batch), "records/commit")
	})
	b.Run("concurrent-16", func(b *testing.B) {
		db := rawDB(b)
		var off atomic.Uint64
		b.SetBytes(benchRecordSize)
		elapsed := runConcurrent(b, 16, func() error {
			bt := db.NewBatch()
			_ = bt.Set(recordKey(1, off.Add(1)), value, nil)
			err := bt.Commit(pebble.Sync)
			_ = bt.Close()
			return err
		})
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
		b.ReportMetric(1, "records/commit")
	})
}

// replaySet is one log of *replayRecords 1 KiB records, built once and
// shared by BenchmarkReplay and BenchmarkRawPebbleScan so that both read the
// same keys from the same store.
var replaySet struct {
	once sync.Once
	dir  string
	l    *Log
	id   uint32
	n    int
	err  error
}

func replayLog(b *testing.B) (*Log, uint32, int) {
	replaySet.once.Do(func() {
		replaySet.dir, replaySet.err = os.MkdirTemp("", "wal-replay-")
		if replaySet.err != nil {
			return
		}
		l, err := Open(replaySet.dir, benchOpts())
		if err != nil {
			replaySet.err = err
			return
		}
		replaySet.l, replaySet.n = l, *replayRecords
		payload := benchPayload()
		const per = 512
		recs := make([]Record, per)
		for i := range recs {
			recs[i].Payload = payload
		}
		var wg sync.WaitGroup
		window := make(chan struct{}, 8)
		start := time.Now()
		for off := 0; off < replaySet.n; off += per {
			window <- struct{}{}
			wg.Add(1)
			l.AppendAsync(AppendRequest{Topic: "replay", Records: recs[:min(per, replaySet.n-off)]}, func(res AppendResult) {
				if res.Err != nil {
					replaySet.err = res.Err
				}
				<-window
				wg.Done()
			})
		}
		wg.Wait()
		replaySet.id = l.mu.topics["replay"].id
		// Settle: flush the memtable and let compactions finish, so that
		// both benchmarks read sstables in the same shape.
		if err := l.pdb.Flush(); err != nil {
			replaySet.err = err
		}
		fmt.Fprintf(os.Stderr, "replay set: %d records written in %v\n", replaySet.n, time.Since(start).Round(time.Millisecond))
	})
	if replaySet.err != nil {
		b.Fatal(replaySet.err)
	}
	return replaySet.l, replaySet.id, replaySet.n
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if replaySet.l != nil {
		_ = replaySet.l.Close()
	}
	if replaySet.dir != "" {
		_ = os.RemoveAll(replaySet.dir)
	}
	os.Exit(code)
}

// BenchmarkReplay reads the whole replay set from offset 0 with Read
// (1024 records or 4 MiB per call): checksums verified, records decoded,
// bytes copied out.
func BenchmarkReplay(b *testing.B) {
	l, _, n := replayLog(b)
	b.SetBytes(int64(n) * benchRecordSize)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var from uint64
		for {
			recs, err := l.Read("replay", from, 1024, 4<<20)
			if err != nil {
				b.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			from += uint64(len(recs))
		}
		if from != uint64(n) {
			b.Fatalf("read %d records, want %d", from, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/time.Since(start).Seconds(), "records/s")
}

// BenchmarkRawPebbleScan is the baseline of BenchmarkReplay: one iterator
// over the same keys, copying each value out (as any reader that keeps a
// record past Next must), into the same kind of shared chunks Read uses.
func BenchmarkRawPebbleScan(b *testing.B) {
	l, id, n := replayLog(b)
	b.SetBytes(int64(n) * benchRecordSize)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		it, err := l.pdb.NewIter(&pebble.IterOptions{LowerBound: recordKey(id, 0), UpperBound: recordKey(id, uint64(n))})
		if err != nil {
			b.Fatal(err)
		}
		var s slab
		count := 0
		for ok := it.First(); ok; ok = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				b.Fatal(err)
			}
			_ = s.copy(v)
			count++
		}
		if err := it.Close(); err != nil {
			b.Fatal(err)
		}
		if count != n {
			b.Fatalf("scanned %d records, want %d", count, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/time.Since(start).Seconds(), "records/s")
}
