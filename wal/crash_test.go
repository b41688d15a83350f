package wal

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

var (
	crashPoints = flag.Int("wal.crashpoints", 0, "crash points of TestCrashRecovery (0: $WAL_CRASH_POINTS, else 300)")
	crashSeed   = flag.Uint64("wal.crashseed", 0, "seed of TestCrashRecovery (0: $WAL_CRASH_SEED, else time)")
)

func envInt(name string) uint64 {
	v, _ := strconv.ParseUint(os.Getenv(name), 10, 64)
	return v
}

// TestCrashRecovery appends from several goroutines (blocking and pipelined,
// with positions in the same batches and alone) to a Pebble on
// vfs.NewCrashableMem, takes crash clones at random moments while the writes
// go on, reopens each clone and checks I1/I2/I7:
//   - every record acknowledged before the clone is there, at its offset,
//     with its payload;
//   - every log is dense from 0, every record present is whole (the payload
//     checks itself), the decoder never fails, each writer's order is kept;
//   - a position set alone is at least its acknowledged value; a position
//     written with records is exactly consistent with the records present
//     (atomic batch);
//   - the recovered log accepts appends at the next offset.
//
// 300 crash points by default (60 with -short); more with -wal.crashpoints=N or
// WAL_CRASH_POINTS=N.
func TestCrashRecovery(t *testing.T) {
	points := *crashPoints
	if points == 0 {
		points = int(envInt("WAL_CRASH_POINTS"))
	}
	if points == 0 {
		points = 300
		if testing.Short() {
			points = 60
		}
	}
	seed := crashTestSeed()
	t.Logf("crash points %d, seed %d (rerun with -wal.crashseed=%d)", points, seed, seed)
	const perSession = 15
	var stats crashStats
	for s := 0; points > 0; s++ {
		n := min(points, perSession)
		points -= n
		runCrashSession(t, seed+uint64(s), n, &stats, nil)
		if t.Failed() {
			t.Fatalf("session %d (seed %d) failed", s, seed+uint64(s))
		}
	}
	t.Logf("verified %d crash clones: %d acknowledged records checked, %d records recovered beyond the acknowledged ones, %d positions checked",
		stats.clones, stats.acked, stats.extra, stats.positions)
	if stats.acked == 0 || stats.clones == 0 {
		t.Fatal("the crash test checked nothing")
	}
}

// crashTestSeed is -wal.crashseed, else $WAL_CRASH_SEED, else the time.
func crashTestSeed() uint64 {
	seed := *crashSeed
	if seed == 0 {
		seed = envInt("WAL_CRASH_SEED")
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return seed
}

// crashFS works around a deadlock in pebble v2.1.7's MemFS: ReuseForWrite
// (WAL recycling) holds cloneMu.RLock and calls Rename, which takes it
// again; a CrashClone waiting for cloneMu.Lock between the two blocks both
// forever. ReuseForWrite's contract allows removing the recycled file and
// creating the new one instead, each under its own lock.
type crashFS struct{ *vfs.MemFS }

func (fs crashFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.Remove(oldname); err != nil {
		return nil, err
	}
	return fs.Create(newname, category)
}

// crashT is what the crash session needs of a test: *testing.T, or a recorder
// for the test that expects the checker to fail.
type crashT interface {
	Errorf(format string, args ...any)
	Failed() bool
	Context() context.Context
}

type crashStats struct {
	clones, acked, extra, positions int
}

const crashWriters = 4

var crashTopics = []string{"t0", "t1", "t2"}

// id names one record: writer and per-writer sequence number.
type id struct {
	w   int
	seq uint64
}

// crashPayload is deterministic in (w, seq): a header, then words of a
// splitmix64 sequence seeded with it, so a recovered payload proves itself
// whole.
func crashPayload(w int, seq uint64) []byte {
	x := uint64(w)<<56 ^ seq*0x9e3779b97f4a7c15
	n := 16 + int(splitmix(&x)%500)
	b := make([]byte, n+7)
	binary.LittleEndian.PutUint32(b, uint32(w))
	binary.LittleEndian.PutUint64(b[4:], seq)
	binary.LittleEndian.PutUint32(b[12:], uint32(n))
	for i := 16; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], splitmix(&x))
	}
	return b[:n]
}

func splitmix(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func checkPayload(b []byte) (id, error) {
	if len(b) < 16 {
		return id{}, fmt.Errorf("payload of %d bytes", len(b))
	}
	x := id{w: int(binary.LittleEndian.Uint32(b)), seq: binary.LittleEndian.Uint64(b[4:])}
	if x.w >= crashWriters || string(crashPayload(x.w, x.seq)) != string(b) {
		return id{}, fmt.Errorf("payload of writer %d seq %d is not whole", x.w, x.seq)
	}
	return x, nil
}

// acks is what the writers were told, recorded after each append returned.
type acks struct {
	mu        sync.Mutex
	records   map[string]map[uint64]id // topic -> offset -> record
	positions map[posName]uint64       // positions set alone (monotone per name)
}

type snapshot struct {
	records   map[string]map[uint64]id
	positions map[posName]uint64
	fs        *vfs.MemFS
}

func runCrashSession(t crashT, seed uint64, clones int, stats *crashStats, hooks *testHooks) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	fs := vfs.NewCrashableMem()
	opts := Options{
		FS:                crashFS{fs},
		Logger:            slog.New(slog.DiscardHandler),
		MaxBatchRecords:   8 + rng.IntN(56),
		MaxBatchBytes:     64 << 10,
		MemTableSize:      512 << 10, // small: flushes and compactions happen under the crashes
		CacheSize:         1 << 20,
		RetentionInterval: -1,
		testHooks:         hooks,
	}
	l, err := Open("db", opts)
	if err != nil {
		t.Errorf("open: %v", err)
		return
	}
	a := &acks{records: map[string]map[uint64]id{}, positions: map[posName]uint64{}}
	for _, topic := range crashTopics {
		a.records[topic] = map[uint64]id{}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range crashWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			crashWriter(t, l, a, w, seed, w%2 == 1, &stop)
		}()
	}
	var snaps []snapshot
	for range clones {
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) // the seeded crash schedule: when to clone is the test
		s := snapshot{records: map[string]map[uint64]id{}, positions: map[posName]uint64{}}
		a.mu.Lock()
		for topic, m := range a.records {
			s.records[topic] = make(map[uint64]id, len(m))
			for off, x := range m {
				s.records[topic][off] = x
			}
		}
		for k, v := range a.positions {
			s.positions[k] = v
		}
		a.mu.Unlock()
		pct := []int{0, 0, 10, 50, 90, 100}[rng.IntN(6)]
		s.fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, rng.Uint64()))})
		snaps = append(snaps, s)
	}
	stop.Store(true)
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Errorf("close: %v", err)
		return
	}
	for i, s := range snaps {
		verifyCrashClone(t, fmt.Sprintf("seed %d clone %d", seed, i), s, stats)
		if t.Failed() {
			return
		}
	}
}

// crashWriter appends until stop: requests of 1-8 records to a random topic,
// each carrying the position "w<w>" on that topic = its last sequence number,
// and now and then a position set alone. Pipelined writers keep up to 8
// requests in flight with AppendAsync.
func crashWriter(t crashT, l *Log, a *acks, w int, seed uint64, pipelined bool, stop *atomic.Bool) {
	rng := rand.New(rand.NewPCG(seed, uint64(w)))
	var seq uint64
	var inflight sync.WaitGroup
	window := make(chan struct{}, 8)
	defer inflight.Wait()
	for !stop.Load() {
		if rng.IntN(10) == 0 {
			p := Position{Name: fmt.Sprintf("consumer%d", w), Topic: crashTopics[0], Value: seq}
			if err := l.SetPosition(t.Context(), p); err != nil {
				t.Errorf("SetPosition: %v", err)
				return
			}
			a.mu.Lock()
			a.positions[posName{name: p.Name, topic: p.Topic}] = p.Value
			a.mu.Unlock()
			continue
		}
		topic := crashTopics[rng.IntN(len(crashTopics))]
		recs := make([]Record, 1+rng.IntN(8))
		ids := make([]id, len(recs))
		for i := range recs {
			seq++
			ids[i] = id{w: w, seq: seq}
			recs[i].Payload = crashPayload(w, seq)
			recs[i].ProducerID = "w"
		}
		req := AppendRequest{Topic: topic, Records: recs,
			Position: &Position{Name: fmt.Sprintf("w%d", w), Topic: topic, Value: seq}}
		done := func(res AppendResult) {
			if res.Err != nil {
				t.Errorf("append: %v", res.Err)
				return
			}
			a.mu.Lock()
			for i, x := range ids {
				a.records[topic][res.First+uint64(i)] = x
			}
			a.mu.Unlock()
		}
		if !pipelined {
			done(l.Append(t.Context(), req))
			continue
		}
		window <- struct{}{}
		inflight.Add(1)
		l.AppendAsync(req, func(res AppendResult) {
			done(res)
			<-window
			inflight.Done()
		})
	}
}

func verifyCrashClone(t crashT, name string, s snapshot, stats *crashStats) {
	l, err := Open("db", Options{FS: crashFS{s.fs}, Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1,
		MaxBatchBytes: 64 << 10, MemTableSize: 256 << 10, CacheSize: 1 << 20})
	if err != nil {
		t.Errorf("%s: reopen: %v", name, err)
		return
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Errorf("%s: close: %v", name, err)
		}
	}()
	stats.clones++
	infos := map[string]TopicInfo{}
	for _, info := range l.Topics() {
		infos[info.Name] = info
	}
	for _, topic := range crashTopics {
		acked := s.records[topic]
		info, ok := infos[topic]
		if !ok {
			if len(acked) > 0 {
				t.Errorf("%s: topic %s with %d acknowledged records lost", name, topic, len(acked))
			}
			continue
		}
		if info.First != 0 || info.Records == 0 || info.Next != info.Records {
			t.Errorf("%s: %s bounds %+v", name, topic, info)
		}
		recs := make([]Record, 0, info.Records)
		for from := uint64(0); from < info.Next; {
			got, err := l.Read(topic, from, 500, 0)
			if err != nil || len(got) == 0 {
				t.Errorf("%s: read %s at %d of %d: %v", name, topic, from, info.Next, err)
				return
			}
			recs = append(recs, got...)
			from += uint64(len(got))
		}
		maxSeq := map[int]uint64{}
		for i, r := range recs {
			if r.Offset != uint64(i) {
				t.Errorf("%s: %s: offset %d at index %d: not dense", name, topic, r.Offset, i)
				return
			}
			x, err := checkPayload(r.Payload)
			if err != nil {
				t.Errorf("%s: %s offset %d: %v", name, topic, r.Offset, err)
				return
			}
			if x.seq <= maxSeq[x.w] {
				t.Errorf("%s: %s offset %d: writer %d seq %d after %d: order lost", name, topic, r.Offset, x.w, x.seq, maxSeq[x.w])
			}
			maxSeq[x.w] = x.seq
			if want, ok := acked[r.Offset]; ok {
				if want != x {
					t.Errorf("%s: %s offset %d holds %+v, acknowledged %+v", name, topic, r.Offset, x, want)
				}
				stats.acked++
			} else {
				stats.extra++
			}
		}
		for off := range acked {
			if off >= uint64(len(recs)) {
				t.Errorf("%s: %s: acknowledged offset %d lost (recovered %d records)", name, topic, off, len(recs))
				return
			}
		}
		// Positions written with records are exactly as recent as the
		// records (same batch).
		for w := range crashWriters {
			v, ok, err := l.Position(fmt.Sprintf("w%d", w), topic)
			if err != nil {
				t.Errorf("%s: position: %v", name, err)
				return
			}
			if ok != (maxSeq[w] > 0) || v != maxSeq[w] {
				t.Errorf("%s: position w%d of %s = %d (%v), but its last record present has seq %d", name, w, topic, v, ok, maxSeq[w])
			}
			stats.positions++
		}
		// The recovered log goes on at its next offset.
		res := l.Append(t.Context(), AppendRequest{Topic: topic, Records: []Record{{Payload: []byte("after")}}})
		if res.Err != nil || res.First != info.Next {
			t.Errorf("%s: append after recovery to %s: %+v, want offset %d", name, topic, res, info.Next)
		}
	}
	for k, want := range s.positions {
		v, ok, _ := l.Position(k.name, k.topic)
		if !ok || v < want {
			t.Errorf("%s: position %s of %s = %d (%v), acknowledged %d", name, k.name, k.topic, v, ok, want)
		}
		stats.positions++
	}
}
