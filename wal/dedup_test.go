package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quicmq/quicmq/internal/testlog"
)

func prec(producer string, seq uint64, payload string) Record {
	return Record{ProducerID: producer, Sequence: seq, Payload: []byte(payload)}
}

func appendRecs(t testing.TB, l *Log, topic string, recs ...Record) AppendResult {
	t.Helper()
	res := l.Append(context.Background(), AppendRequest{Topic: topic, Records: recs})
	if res.Err != nil {
		t.Fatalf("append to %q: %v", topic, res.Err)
	}
	return res
}

// outcomes lists what happened to each record of a request.
func outcomes(res AppendResult, n int) []RecordOutcome {
	out := make([]RecordOutcome, n)
	skip := 0
	for i := range out {
		out[i] = res.Outcome(i, &skip)
	}
	return out
}

// readAll returns every durable record of topic.
func readAll(t testing.TB, l *Log, topic string) []Record {
	t.Helper()
	recs, err := l.Read(topic, 0, 1<<20, 1<<30)
	if err != nil {
		t.Fatalf("read %q: %v", topic, err)
	}
	return recs
}

func wantPayloads(t testing.TB, l *Log, topic string, want ...string) {
	t.Helper()
	recs := readAll(t, l, topic)
	var got []string
	for _, r := range recs {
		got = append(got, string(r.Payload))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%q holds %q, want %q", topic, got, want)
	}
}

// TestDedupDuplicates: a (producer, sequence) appended twice, in one request, in two
// requests of one batch and in separate batches, is stored once; each later copy is
// answered as a duplicate with the first copy's offset and time.
func TestDedupDuplicates(t *testing.T) {
	// The completer can be held before a batch's sync wait, so that requests queue behind it
	// and the committer takes them in one batch.
	var hold atomic.Pointer[chan struct{}]
	holding := make(chan struct{}, 1)
	l, _ := newTestLog(t, Options{testHooks: &testHooks{beforeSyncWait: func() {
		if h := hold.Swap(nil); h != nil {
			holding <- struct{}{}
			<-*h
		}
	}}})
	// One request: the second copy is a duplicate of the first, within the batch.
	res := appendRecs(t, l, "d", prec("p", 1, "a"), prec("p", 1, "a-again"), prec("p", 2, "b"))
	if res.First != 0 || res.Count != 2 || len(res.Skipped) != 1 {
		t.Fatalf("result %+v, want 2 appended from 0 and 1 skipped", res)
	}
	o := outcomes(res, 3)
	if o[0].Offset != 0 || o[0].Duplicate || !o[1].Duplicate || o[1].Offset != 0 || o[1].Time != o[0].Time ||
		o[2].Offset != 1 || o[2].Duplicate {
		t.Fatalf("outcomes %+v", o)
	}
	testlog.WaitFor(t, 5*time.Second, "the clock past the first append's time", func() bool {
		return time.Now().UnixNano() > res.Time+int64(time.Millisecond) // a later append gets a later time
	})
	// A separate batch: answered with the original offset and time.
	res2 := appendRecs(t, l, "d", prec("p", 2, "b-again"), prec("p", 3, "c"))
	o2 := outcomes(res2, 2)
	if !o2[0].Duplicate || o2[0].Offset != 1 || o2[0].Time != res.Time || o2[1].Offset != 2 || o2[1].Duplicate {
		t.Fatalf("outcomes %+v (first result %+v)", o2, res)
	}
	if res2.Time == res.Time {
		t.Fatal("the clock did not move: the time check proves nothing")
	}
	// Two requests committed in one batch: the committer is held while both queue.
	held := make(chan struct{})
	hold.Store(&held)
	var wg sync.WaitGroup
	var r1, r2, r3 AppendResult
	wg.Add(3)
	l.AppendAsync(AppendRequest{Topic: "d", Records: []Record{prec("q", 9, "blocker")}}, func(r AppendResult) { r1 = r; wg.Done() })
	<-holding // the committer applied the blocker and the completer waits in the hook
	l.AppendAsync(AppendRequest{Topic: "d", Records: []Record{prec("p", 4, "d")}}, func(r AppendResult) { r2 = r; wg.Done() })
	l.AppendAsync(AppendRequest{Topic: "d", Records: []Record{prec("p", 4, "d-again")}}, func(r AppendResult) { r3 = r; wg.Done() })
	testlog.WaitFor(t, 5*time.Second, "both requests queued", func() bool {
		l.q.Lock()
		defer l.q.Unlock()
		return len(l.q.reqs) == 2
	})
	close(held)
	wg.Wait()
	if r1.Err != nil || r2.Err != nil || r3.Err != nil || r2.Count != 1 || r3.Count != 0 ||
		len(r3.Skipped) != 1 || r3.Skipped[0].Offset != r2.First || r3.Skipped[0].Time != r2.Time {
		t.Fatalf("results %+v %+v %+v", r1, r2, r3)
	}
	wantPayloads(t, l, "d", "a", "b", "c", "blocker", "d")
	if s := l.Stats(); s.Duplicates != 3 || s.Records != 5 {
		t.Fatalf("stats %+v, want 3 duplicates and 5 records", s)
	}
}

// TestDedupRacing: copies of one publish racing from many goroutines are stored once, and
// every copy is answered with the same offset.
func TestDedupRacing(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	const copies, seqs = 8, 50
	offs := make([][]uint64, copies)
	var wg sync.WaitGroup
	for c := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range seqs {
				res := appendRecs(t, l, "race", prec("p", uint64(s+1), fmt.Sprint(s)))
				offs[c] = append(offs[c], outcomes(res, 1)[0].Offset)
			}
		}()
	}
	wg.Wait()
	if n := len(readAll(t, l, "race")); n != seqs {
		t.Fatalf("%d records stored, want %d", n, seqs)
	}
	for c := 1; c < copies; c++ {
		if fmt.Sprint(offs[c]) != fmt.Sprint(offs[0]) {
			t.Fatalf("copy %d got offsets %v, copy 0 %v", c, offs[c], offs[0])
		}
	}
}

// TestDedupWindow: new sequences out of order are stored; once the window is full, a
// sequence below it that it does not remember is refused with a *SequenceError (never
// stored, never dropped silently), and one it remembers is still a duplicate.
func TestDedupWindow(t *testing.T) {
	l, _ := newTestLog(t, Options{DedupWindow: 4})
	appendRecs(t, l, "w", prec("p", 5, "5"), prec("p", 3, "3"), prec("p", 4, "4"))
	if o := outcomes(appendRecs(t, l, "w", prec("p", 3, "3-again")), 1)[0]; !o.Duplicate || o.Offset != 1 {
		t.Fatalf("retry of 3: %+v", o)
	}
	appendRecs(t, l, "w", prec("p", 7, "7"), prec("p", 8, "8")) // window now 4 5 7 8: 3 dropped
	res := appendRecs(t, l, "w", prec("p", 3, "3-late"), prec("p", 6, "6"), prec("p", 4, "4-again"), prec("p", 1, "1"))
	o := outcomes(res, 4)
	var se *SequenceError
	if !errors.As(o[0].Err, &se) || !errors.Is(o[0].Err, ErrSequence) || se.Sequence != 3 || se.ProducerID != "p" || se.Topic != "w" {
		t.Fatalf("sequence 3 after it left the window: %+v", o[0])
	}
	t.Logf("refusal: %v", o[0].Err)
	// 6 is newer than the window's floor: stored (it evicts 4, so the retry of 4 is refused).
	if o[1].Err != nil || o[1].Duplicate || o[1].Offset != 5 {
		t.Fatalf("sequence 6: %+v", o[1])
	}
	if !errors.Is(o[2].Err, ErrSequence) || !errors.Is(o[3].Err, ErrSequence) {
		t.Fatalf("sequences 4 and 1: %+v %+v", o[2], o[3])
	}
	wantPayloads(t, l, "w", "5", "3", "4", "7", "8", "6")
	if s := l.Stats(); s.Refused != 3 {
		t.Fatalf("%d refused, want 3", s.Refused)
	}
}

// TestDedupBypass: records without a producer, with sequence 0, and mirrored records (an
// origin region) are never de-duplicated; producers are separate per topic.
func TestDedupBypass(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	for range 2 {
		appendRecs(t, l, "b", Record{Payload: []byte("plain")}, Record{Sequence: 5, Payload: []byte("noproducer")},
			Record{ProducerID: "p", Payload: []byte("seq0")},
			Record{OriginRegion: "eu", OriginOffset: 1, ProducerID: "p", Sequence: 1, Payload: []byte("mirrored")})
		appendRecs(t, l, "b2", prec("p", 1, "other-topic"))
		appendRecs(t, l, "b", prec("p", 1, "published"))
	}
	wantPayloads(t, l, "b", "plain", "noproducer", "seq0", "mirrored", "published", "plain", "noproducer", "seq0", "mirrored")
	wantPayloads(t, l, "b2", "other-topic")
}

// TestDedupOff: DedupWindow < 0 turns de-duplication off.
func TestDedupOff(t *testing.T) {
	off, _ := newTestLog(t, Options{DedupWindow: -1})
	appendRecs(t, off, "b", prec("p", 1, "x"))
	appendRecs(t, off, "b", prec("p", 1, "x"))
	wantPayloads(t, off, "b", "x", "x")
}

// TestDedupLimits: past DedupMaxProducers or DedupMaxEntries the least recently used state is
// dropped, and an idle state after DedupIdle; a retry for a dropped state is stored again
// (the documented cost of bounded memory).
func TestDedupLimits(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(1000)) }
	l, _ := newTestLog(t, Options{DedupMaxProducers: 2, DedupMaxEntries: 5, DedupIdle: time.Minute, Now: clock})
	appendRecs(t, l, "l", prec("p1", 1, "p1"))
	appendRecs(t, l, "l", prec("p2", 1, "p2"))
	appendRecs(t, l, "l", prec("p1", 1, "p1-dup")) // p1 is now the most recent
	appendRecs(t, l, "l", prec("p3", 1, "p3"))     // drops p2, the least recently used
	if s := l.Stats(); s.DedupStates != 2 || s.DedupEntries != 2 {
		t.Fatalf("states %d entries %d, want 2 and 2", s.DedupStates, s.DedupEntries)
	}
	appendRecs(t, l, "l", prec("p1", 1, "p1-dup"))   // still remembered
	appendRecs(t, l, "l", prec("p2", 1, "p2-again")) // forgotten: stored again (and drops p3)
	wantPayloads(t, l, "l", "p1", "p2", "p3", "p2-again")

	// The entry cap: p1 with 5 entries alone fills it; p2's next one drops p1.
	appendRecs(t, l, "l", prec("p1", 2, "a"), prec("p1", 3, "b"), prec("p1", 4, "c"), prec("p1", 5, "d"))
	if s := l.Stats(); s.DedupStates != 1 || s.DedupEntries != 5 {
		t.Fatalf("states %d entries %d, want p1 alone with 5", s.DedupStates, s.DedupEntries)
	}

	// Idle: after DedupIdle without a publish, p1's state goes.
	now.Add(int64(2 * time.Minute))
	appendRecs(t, l, "l", prec("p9", 1, "wake"))
	if s := l.Stats(); s.DedupStates != 1 {
		t.Fatalf("%d states after the idle time, want only p9's", s.DedupStates)
	}
	appendRecs(t, l, "l", prec("p1", 5, "d-again"))
	recs := readAll(t, l, "l")
	if got := string(recs[len(recs)-1].Payload); got != "d-again" {
		t.Fatalf("last record %q: an idle producer's retry should be stored again", got)
	}
}

// TestDedupAfterReopen: the state is rebuilt from the log after Close and Open, so a retry
// after a restart is a duplicate with the original offset and time; with a rebuild that sees
// only part of a producer's records, older unseen sequences are refused rather than stored.
func TestDedupAfterReopen(t *testing.T) {
	l, dir := newTestLog(t, Options{})
	var first AppendResult
	for s := uint64(1); s <= 10; s++ {
		res := appendRecs(t, l, "r", prec("p", s, fmt.Sprint(s)), prec("q", s, fmt.Sprint("q", s)))
		if s == 5 {
			first = res
		}
	}
	appendRecs(t, l, "other", Record{Payload: []byte("x")})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	// A publish to another topic does not need r's state.
	appendRecs(t, l, "other", prec("p", 5, "y"))
	if s := l.Stats(); s.Rebuilt != 1 {
		t.Fatalf("rebuild scanned %d records of other, want 1", s.Rebuilt)
	}
	o := outcomes(appendRecs(t, l, "r", prec("p", 5, "5-again"), prec("p", 11, "11")), 2)
	if !o[0].Duplicate || o[0].Offset != first.First || o[0].Time != first.Time || o[1].Duplicate || o[1].Offset != 20 {
		t.Fatalf("after reopen: %+v, want a duplicate at %d and 11 at 20", o, first.First)
	}
	if s := l.Stats(); s.Rebuilt != 21 {
		t.Fatalf("rebuild scanned %d records, want 21", s.Rebuilt)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// A rebuild limited to the last 6 records sees p 9..11 and q 8..10.
	l = openTestLog(t, dir, Options{DedupRebuildRecords: 6})
	o = outcomes(appendRecs(t, l, "r", prec("p", 10, "dup"), prec("p", 3, "unseen"), prec("q", 12, "new")), 3)
	if !o[0].Duplicate || o[0].Offset != 18 || !errors.Is(o[1].Err, ErrSequence) || o[2].Duplicate || o[2].Err != nil {
		t.Fatalf("after a partial rebuild: %+v", o)
	}
}

// TestDedupRebuildOffCommitter: the read of a recovered topic's tail runs on the caller that
// needs it, not on the committer. While it is held, appends to other topics (with producers
// too) and producer-less appends to the same topic complete; callers with producers for that
// topic wait for it; and once it is done a retry of a record stored before the reopen is a
// duplicate, with the records appended meanwhile kept.
func TestDedupRebuildOffCommitter(t *testing.T) {
	l, dir := newTestLog(t, Options{})
	for s := uint64(1); s <= 5; s++ {
		appendRecs(t, l, "a", prec("p", s, fmt.Sprint(s)))
	}
	appendRecs(t, l, "b", prec("p", 1, "b1"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	scanning, release := make(chan struct{}), make(chan struct{})
	hooks := &testHooks{beforeTailScan: func(topic string) {
		if topic == "a" {
			close(scanning)
			<-release
		}
	}}
	l = openTestLog(t, dir, Options{testHooks: hooks})
	type result struct {
		o   []RecordOutcome
		err error
	}
	retried := make(chan result, 2)
	retry := func(seq uint64, payload string) {
		res := l.Append(context.Background(), AppendRequest{Topic: "a", Records: []Record{prec("p", seq, payload)}})
		retried <- result{outcomes(res, 1), res.Err}
	}
	go retry(3, "3-again")
	<-scanning
	go retry(6, "6")
	// Held: a's tail is being read. Everything else goes through the committer.
	done := make(chan struct{})
	go func() {
		defer close(done)
		appendRecs(t, l, "b", prec("p", 2, "b2"))
		appendRecs(t, l, "b", prec("p", 1, "b1-again"))
		appendRecs(t, l, "a", Record{Payload: []byte("plain")})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("appends to other topics waited for a's tail scan")
	}
	select {
	case r := <-retried:
		t.Fatalf("a publish with a producer to a passed a's unfinished scan: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	got := map[string]RecordOutcome{}
	for range 2 {
		r := <-retried
		if r.err != nil {
			t.Fatal(r.err)
		}
		got[fmt.Sprint(r.o[0].Duplicate)] = r.o[0]
	}
	if d := got["true"]; d.Offset != 2 {
		t.Fatalf("retry of p/3: %+v, want a duplicate at offset 2", got)
	}
	if n := got["false"]; n.Duplicate || n.Err != nil || n.Offset < 6 {
		t.Fatalf("p/6: %+v, want stored after the plain record", got)
	}
	wantPayloads(t, l, "a", "1", "2", "3", "4", "5", "plain", "6")
	wantPayloads(t, l, "b", "b1", "b2")
}

// TestDedupRebuildHorizon: the rebuild after Open skips records older than DedupIdle (a
// producer idle that long would have been forgotten anyway), and a topic whose last record is
// that old costs no scan at all.
func TestDedupRebuildHorizon(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(1000)) }
	opts := Options{Now: clock, DedupIdle: time.Minute}
	l, dir := newTestLog(t, opts)
	appendRecs(t, l, "old", prec("p", 1, "1"), prec("p", 2, "2"))
	appendRecs(t, l, "mixed", prec("p", 1, "p1"))
	now.Add(int64(50 * time.Second))
	appendRecs(t, l, "mixed", prec("q", 1, "q1"))
	now.Add(int64(20 * time.Second)) // at the reopen q1 is 20 s old, the p records 70 s
	appendRecs(t, l, "mixed", prec("q", 2, "q2"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, opts)
	if o := outcomes(appendRecs(t, l, "old", prec("p", 1, "1-again")), 1)[0]; o.Duplicate {
		t.Fatalf("a retry older than DedupIdle: %+v, want it stored again", o)
	}
	if s := l.Stats(); s.Rebuilt != 0 {
		t.Fatalf("the rebuild of a topic idle for longer than DedupIdle scanned %d records", s.Rebuilt)
	}
	o := outcomes(appendRecs(t, l, "mixed", prec("q", 1, "q1-again"), prec("q", 2, "q2-again"), prec("p", 1, "p1-again")), 3)
	if !o[0].Duplicate || !o[1].Duplicate || o[2].Duplicate || o[2].Err != nil {
		t.Fatalf("retries within DedupIdle (q) and older (p): %+v", o)
	}
	if s := l.Stats(); s.Rebuilt != 3 {
		t.Fatalf("the rebuild of mixed scanned %d records, want 3", s.Rebuilt)
	}
}

// TestDedupAfterCrash: after a simulated power loss (vfs crash clone), every publish that was
// acknowledged is remembered: its retry is a duplicate.
func TestDedupAfterCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := Options{FS: crashFS{fs}, Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1}
	l, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]uint64{}
	for s := uint64(1); s <= 30; s++ {
		res := appendRecs(t, l, "c", prec("p", s, fmt.Sprint(s)))
		acked[s] = res.First
	}
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(1, 2))})
	l.Close()
	opts.FS = crashFS{clone}
	l2, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	for s := uint64(1); s <= 30; s++ {
		o := outcomes(appendRecs(t, l2, "c", prec("p", s, "retry")), 1)[0]
		if !o.Duplicate || o.Offset != acked[s] {
			t.Fatalf("retry of acknowledged sequence %d after the crash: %+v, want duplicate at %d", s, o, acked[s])
		}
	}
	if n := len(readAll(t, l2, "c")); n != 30 {
		t.Fatalf("%d records after the retries, want 30", n)
	}
}

// BenchmarkDedupRebuild measures the tail scan that rebuilds producer state after Open:
// DefaultDedupRebuildRecords records of 128 B and of 1 KiB from 16 producers, then the first
// publish with a producer after reopening (the scan holds the committer).
func BenchmarkDedupRebuild(b *testing.B) {
	for _, size := range []int{128, 1024} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) { benchRebuild(b, size) })
	}
}

func benchRebuild(b *testing.B, size int) {
	const n = DefaultDedupRebuildRecords
	dir := b.TempDir()
	l := openTestLog(b, dir, Options{Logger: slog.New(slog.DiscardHandler)})
	payload := make([]byte, size)
	recs := make([]Record, 512)
	for off := 0; off < n; off += len(recs) {
		for i := range recs {
			recs[i] = Record{ProducerID: fmt.Sprintf("producer-%02d", (off+i)%16), Sequence: uint64(off+i)/16 + 1, Payload: payload}
		}
		appendRecs(b, l, "rb", recs...)
	}
	l.Close()
	b.ResetTimer()
	var scanned uint64
	var took time.Duration
	for range b.N {
		l := openTestLog(b, dir, Options{Logger: slog.New(slog.DiscardHandler)})
		appendRecs(b, l, "rb", prec("producer-00", 1, "dup"))
		s := l.Stats()
		if s.Rebuilt != n || s.Duplicates != 1 {
			b.Fatalf("rebuild scanned %d records and found %d duplicates", s.Rebuilt, s.Duplicates)
		}
		scanned += s.Rebuilt
		took += s.RebuildTime
		l.Close()
	}
	b.ReportMetric(float64(scanned)/took.Seconds(), "records/s")
	b.ReportMetric(float64(took.Microseconds())/float64(b.N), "us/rebuild")
}

// BenchmarkAppendDedup: the committer's cost of the check, records of 128 B in requests of
// 64, without and with a producer.
func BenchmarkAppendDedup(b *testing.B) {
	for _, producer := range []string{"", "p"} {
		b.Run(fmt.Sprintf("producer=%t", producer != ""), func(b *testing.B) {
			l, _ := newTestLog(b, Options{Logger: slog.New(slog.DiscardHandler)})
			payload := make([]byte, 128)
			var seq uint64
			var wg sync.WaitGroup
			window := make(chan struct{}, 64)
			b.ResetTimer()
			for i := 0; i < b.N; i += 64 {
				recs := make([]Record, min(64, b.N-i))
				for j := range recs {
					seq++
					recs[j] = Record{ProducerID: producer, Sequence: seq, Payload: payload}
				}
				window <- struct{}{}
				wg.Add(1)
				l.AppendAsync(AppendRequest{Topic: "a", Records: recs}, func(res AppendResult) {
					if res.Err != nil || len(res.Skipped) > 0 {
						b.Errorf("append: %+v", res)
					}
					<-window
					wg.Done()
				})
			}
			wg.Wait()
		})
	}
}
