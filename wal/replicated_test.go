package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// writeReplicated binds topic to group (if needed) and appends recs with
// time ts in one synced batch, as the raft driver's round would; Published
// is left to the caller.
func writeReplicated(t *testing.T, l *Log, w *ReplicaWriter, topic string, ts int64, recs ...Record) uint64 {
	t.Helper()
	b := l.DB().NewBatch()
	defer b.Close()
	if err := w.Bind(b, topic, 7); err != nil {
		t.Fatal(err)
	}
	first, err := w.Append(b, topic, recs, ts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return first
}

func TestReplicatedTopicServedAfterPublished(t *testing.T) {
	l, dir := newTestLog(t, Options{})
	w, err := l.ReplicaWriter()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReplicaWriter(); err == nil {
		t.Fatal("a second ReplicaWriter was handed out")
	}
	wake := make(chan struct{}, 1)
	defer l.Notify("r.a", wake)()

	first := writeReplicated(t, l, w, "r.a", 100,
		Record{Payload: []byte("one"), ProducerID: "p", Sequence: 1, Headers: []Header{{Key: "k", Value: []byte("v")}}},
		Record{Payload: []byte("two")})
	if first != 0 {
		t.Fatalf("first offset %d, want 0", first)
	}
	// Committed to Pebble but not yet published: nothing is served (I3).
	if _, _, ok := l.Bounds("r.a"); ok {
		t.Fatal("an unpublished replicated topic is visible")
	}
	w.Published()
	<-wake
	recs, err := l.Read("r.a", 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || string(recs[0].Payload) != "one" || string(recs[1].Payload) != "two" ||
		recs[0].Time != 100 || recs[1].Offset != 1 || recs[0].ProducerID != "p" || string(recs[0].Headers[0].Value) != "v" {
		t.Fatalf("read %+v", recs)
	}
	if off, err := l.OffsetForTime("r.a", 100); err != nil || off != 0 {
		t.Fatalf("OffsetForTime = %d, %v", off, err)
	}
	if _, err := w.Append(l.DB().NewBatch(), "r.a", []Record{{}}, 99); err == nil {
		t.Fatal("a time before the last record's was accepted")
	}

	// Local writes to the replicated topic are refused, naming the group.
	var re *ReplicatedError
	if err := l.Append(context.Background(), AppendRequest{Topic: "r.a", Records: []Record{{Payload: []byte("x")}}}).Err; !errors.As(err, &re) || re.Group != 7 {
		t.Fatalf("local append to a replicated topic: %v", err)
	}
	if err := l.SetPosition(context.Background(), Position{Name: "c", Topic: "r.a", Value: 1}); !errors.Is(err, ErrReplicated) {
		t.Fatalf("local position of a replicated topic: %v", err)
	}
	// So are the topic and position operations that change replicated state.
	ctx := context.Background()
	if _, err := l.CreateTopic(ctx, "r.a", TopicConfig{}); !errors.Is(err, ErrReplicated) {
		t.Fatalf("create of a replicated topic: %v", err)
	}
	if _, err := l.PurgeTopic(ctx, "r.a"); !errors.Is(err, ErrReplicated) {
		t.Fatalf("purge of a replicated topic: %v", err)
	}
	if _, err := l.DeleteTopic(ctx, "r.a"); !errors.Is(err, ErrReplicated) {
		t.Fatalf("delete of a replicated topic: %v", err)
	}
	if err := l.ResetPositions(ctx, "c", map[string]uint64{"r.a": 0}); !errors.Is(err, ErrReplicated) {
		t.Fatalf("reset of a position of a replicated topic: %v", err)
	}
	// A local topic cannot be bound.
	if err := l.Append(context.Background(), AppendRequest{Topic: "local", Records: []Record{{Payload: []byte("x")}}}).Err; err != nil {
		t.Fatal(err)
	}
	b := l.DB().NewBatch()
	if err := w.Bind(b, "local", 7); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bind of a local topic: %v", err)
	}
	if err := w.Bind(b, "r.a", 8); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bind to a second group: %v", err)
	}
	_ = b.Close()

	// Positions are written and published like records.
	b = l.DB().NewBatch()
	if err := w.SetPosition(b, Position{Name: "mirror/eu", Topic: "r.a", Value: 41}, 100); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := l.Position("mirror/eu", "r.a"); ok {
		t.Fatal("an unpublished position is visible")
	}
	if v, ok := w.Position("mirror/eu", "r.a"); !ok || v != 41 {
		t.Fatalf("the writer does not see its staged position: %d %v", v, ok)
	}
	w.Published()
	if v, ok, _ := l.Position("mirror/eu", "r.a"); !ok || v != 41 {
		t.Fatalf("position %d %v", v, ok)
	}
	_ = b.Close()

	// After a reopen the topic is still replicated and served; the next
	// offset and time carry on.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{Retention: Retention{MaxBytes: 1}})
	if err := l.Append(context.Background(), AppendRequest{Topic: "r.a", Records: []Record{{Payload: []byte("x")}}}).Err; !errors.Is(err, ErrReplicated) {
		t.Fatalf("local append after reopen: %v", err)
	}
	w, err = l.ReplicaWriter()
	if err != nil {
		t.Fatal(err)
	}
	if next, last, ok := w.Next("r.a"); !ok || next != 2 || last != 100 {
		t.Fatalf("after reopen: next %d, last time %d, bound %v", next, last, ok)
	}
	if first := writeReplicated(t, l, w, "r.a", 100, Record{Payload: []byte("three")}); first != 2 {
		t.Fatalf("first offset after reopen %d", first)
	}
	w.Published()
	if _, next, _ := l.Bounds("r.a"); next != 3 {
		t.Fatalf("high-watermark %d after reopen", next)
	}
	// Retention cuts the local topic, not the replicated one.
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := l.Bounds("local"); first != 1 {
		t.Fatalf("retention left the local topic at %d", first)
	}
	if first, _, _ := l.Bounds("r.a"); first != 0 {
		t.Fatalf("retention cut the replicated topic to %d", first)
	}
	checkKeyPrefixes(t, l)
}

// checkKeyPrefixes fails if the log stores a key whose first byte is not in
// KeyPrefixes: another user of the DB relies on the list.
func checkKeyPrefixes(t *testing.T, l *Log) {
	t.Helper()
	it, err := l.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	seen := map[byte]int{}
	for ok := it.First(); ok; ok = it.Next() {
		if !slices.Contains(KeyPrefixes(), it.Key()[0]) {
			t.Errorf("key %q starts with a byte not in KeyPrefixes %q", it.Key(), KeyPrefixes())
		}
		seen[it.Key()[0]]++
	}
	if len(seen) < 4 {
		t.Errorf("only %v key spaces written: the check saw too little", seen)
	}
}

func TestReplicatedBindRacesLocalCreate(t *testing.T) {
	// Local creation (committer) and Bind of many names at once: each name
	// ends up either local or replicated, never both.
	l, _ := newTestLog(t, Options{})
	w, err := l.ReplicaWriter()
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	errs := make([]error, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			errs[i] = l.Append(context.Background(), AppendRequest{Topic: fmt.Sprintf("t%d", i), Records: []Record{{Payload: []byte("x")}}}).Err
		}
	}()
	bound := make([]bool, n)
	for i := range n {
		b := l.DB().NewBatch()
		bound[i] = w.Bind(b, fmt.Sprintf("t%d", i), 1) == nil
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
		_ = b.Close()
	}
	<-done
	w.Published()
	for i := range n {
		local := errs[i] == nil
		if local == bound[i] {
			t.Fatalf("topic t%d: local append %v, bind %v: exactly one must win", i, errs[i], bound[i])
		}
		if !local && !errors.Is(errs[i], ErrReplicated) {
			t.Fatalf("topic t%d: %v", i, errs[i])
		}
	}
	ids := map[string]bool{}
	it, _ := l.DB().NewIter(&pebble.IterOptions{LowerBound: []byte{prefixTopic}, UpperBound: []byte{prefixTopic + 1}})
	for ok := it.First(); ok; ok = it.Next() {
		id := string(bytes.Clone(it.Value()[5:]))
		if ids[id] {
			t.Fatalf("topic ID %x handed out twice", id)
		}
		ids[id] = true
	}
	_ = it.Close()
}

// A local topic leaves the set of those created but not durable yet once its batch is
// durable, and the set goes once empty: a node kept an entry the GC scanned for every
// local topic created since Open (issue 34's figure 3: 35-50 B a topic, the origin's and
// its mirror's). Bind still refuses the topic, by its durable log.
func TestLocalTopicLeavesCreatedSetOnceDurable(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	w, err := l.ReplicaWriter()
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		l.AppendAsync(AppendRequest{Topic: fmt.Sprintf("loc.t%d", i), Records: []Record{{Payload: []byte("x")}}}, func(r AppendResult) {
			if r.Err != nil {
				t.Error(r.Err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	l.repl.mu.RLock()
	left, kept := len(l.repl.local), l.repl.local != nil
	l.repl.mu.RUnlock()
	if left != 0 || kept {
		t.Errorf("%d of %d durable local topics still in the created set (kept: %v)", left, n, kept)
	}
	b := l.DB().NewBatch()
	defer b.Close()
	if err := w.Bind(b, "loc.t7", 1); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bind of a durable local topic: %v, want it refused", err)
	}
}

// Binding a topic allocates its topic and nothing per key (issue 29: a region creating
// topics binds each on every replica; the keys and sealed values it built apart were a
// tenth of a creation's allocations over the region), and writes exactly the keys and
// values topicKey, replicatedKey and sealMeta describe.
func TestBindAllocatesOnlyItsTopic(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	w, err := l.ReplicaWriter()
	if err != nil {
		t.Fatal(err)
	}
	const n = 4000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("bind.t%06d", i)
	}
	b := l.DB().NewBatch()
	defer b.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, name := range names {
		if err := w.Bind(b, name, 9); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	// The topic itself, and the amortized growth of the two maps and the batch.
	per := float64(after.Mallocs-before.Mallocs) / n
	t.Logf("%.2f allocations a bound topic", per)
	if per > 2 {
		t.Errorf("binding a topic allocates %.2f times, want at most 2", per)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	id := binary.BigEndian.AppendUint32(nil, w.bound(names[7]).id)
	for _, kv := range []struct{ key, payload []byte }{
		{topicKey(names[7]), id},
		{replicatedKey(names[7]), binary.LittleEndian.AppendUint64(nil, 9)},
	} {
		v, closer, err := l.DB().Get(kv.key)
		if err != nil {
			t.Fatalf("key %q: %v", kv.key, err)
		}
		if want := sealMeta(kv.key, kv.payload); !bytes.Equal(v, want) {
			t.Errorf("key %q holds %x, want %x", kv.key, v, want)
		}
		closer.Close()
	}
}
