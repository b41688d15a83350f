package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/internal/testlog"
)

func TestOptionsValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("zero Options: %v", err)
	}
	err := Options{
		MaxBatchRecords: -1,
		MaxBatchBytes:   -2,
		Retention:       Retention{MaxAge: -time.Second, MaxBytes: -1},
		CacheSize:       -1,
	}.Validate()
	if err == nil {
		t.Fatal("invalid Options accepted")
	}
	for _, want := range []string{"MaxBatchRecords", "MaxBatchBytes", "Retention.MaxAge", "Retention.MaxBytes", "CacheSize"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q does not mention %s", err, want)
		}
	}
	if err := (Options{MaxBatchBytes: 64 << 20}).Validate(); err == nil {
		t.Error("MaxBatchBytes larger than a quarter memtable accepted")
	}
	if _, err := Open(t.TempDir(), Options{MaxBatchRecords: -1}); err == nil {
		t.Error("Open accepted invalid Options")
	}
}

func TestAppendReadRoundTrip(t *testing.T) {
	clock := newFakeClock()
	l, _ := newTestLog(t, Options{Now: clock.Now})
	ctx := context.Background()
	in := []Record{
		{Payload: []byte("plain")},
		{Payload: []byte{}, Headers: []Header{{Key: "k", Value: []byte("v")}, {Key: "k", Value: nil}, {Key: "", Value: []byte("x")}}},
		{ProducerID: "p1", Sequence: 7, Payload: []byte("dedupe")},
		{OriginRegion: "eu", OriginOffset: 41, Payload: []byte("mirrored")},
		{Offset: 999, Time: 5, OriginOffset: 3, Payload: bytes.Repeat([]byte{0xab}, 100000)}, // caller's Offset/Time/OriginOffset are ignored
	}
	res := l.Append(ctx, AppendRequest{Topic: "orders.eu", Records: in})
	if res.Err != nil || res.First != 0 || res.Count != len(in) || res.Time != clock.Now().UnixNano() {
		t.Fatalf("Append: %+v", res)
	}
	clock.Advance(time.Second)
	res2 := mustAppend(t, l, "orders.eu", len(in), 3)
	if res2.Time != clock.Now().UnixNano() {
		t.Fatalf("second append Time %d, want %d", res2.Time, clock.Now().UnixNano())
	}
	got := mustReadAll(t, l, "orders.eu", 0)
	if len(got) != len(in)+3 {
		t.Fatalf("read %d records, want %d", len(got), len(in)+3)
	}
	for i, r := range got {
		if r.Offset != uint64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
	for i, want := range in {
		r := got[i]
		if r.Time != res.Time {
			t.Errorf("record %d Time %d, want %d", i, r.Time, res.Time)
		}
		wantOrigin := uint64(i)
		if want.OriginRegion != "" {
			wantOrigin = want.OriginOffset
		}
		if r.OriginRegion != want.OriginRegion || r.OriginOffset != wantOrigin {
			t.Errorf("record %d origin %q/%d, want %q/%d", i, r.OriginRegion, r.OriginOffset, want.OriginRegion, wantOrigin)
		}
		if r.ProducerID != want.ProducerID || r.Sequence != want.Sequence || !bytes.Equal(r.Payload, want.Payload) {
			t.Errorf("record %d = %+v, want %+v", i, r, want)
		}
		if len(r.Headers) != len(want.Headers) {
			t.Fatalf("record %d has %d headers, want %d", i, len(r.Headers), len(want.Headers))
		}
		for j, h := range want.Headers {
			if r.Headers[j].Key != h.Key || !bytes.Equal(r.Headers[j].Value, h.Value) {
				t.Errorf("record %d header %d = %+v, want %+v", i, j, r.Headers[j], h)
			}
		}
	}
	// The records own their bytes: scribbling on one does not change another read.
	got[0].Payload[0] = 'X'
	again, err := l.Read("orders.eu", 0, 1, 0)
	if err != nil || string(again[0].Payload) != "plain" {
		t.Fatalf("re-read: %v %q", err, again[0].Payload)
	}
	// Limits: maxRecords, maxBytes, at least one record even if too large.
	if recs, _ := l.Read("orders.eu", 1, 2, 0); len(recs) != 2 || recs[0].Offset != 1 {
		t.Errorf("maxRecords 2: got %d records", len(recs))
	}
	if recs, _ := l.Read("orders.eu", 4, 10, 10); len(recs) != 1 || recs[0].Offset != 4 {
		t.Errorf("maxBytes below one record: got %d records", len(recs))
	}
	if recs, _ := l.Read("orders.eu", 5, 0, 80); len(recs) < 1 || len(recs) >= 3 {
		t.Errorf("maxBytes 80: got %d records", len(recs))
	}
	if recs, err := l.Read("orders.eu", 8, 10, 0); err != nil || len(recs) != 0 {
		t.Errorf("read at HWM: %v, %d records", err, len(recs))
	}
	if recs, err := l.Read("orders.eu", 100, 10, 0); err != nil || len(recs) != 0 {
		t.Errorf("read past HWM: %v, %d records", err, len(recs))
	}
	if _, err := l.Read("nope", 0, 10, 0); !errors.Is(err, ErrUnknownTopic) {
		t.Errorf("unknown topic: %v", err)
	}
	if first, next, ok := l.Bounds("orders.eu"); !ok || first != 0 || next != 8 {
		t.Errorf("Bounds = %d %d %v", first, next, ok)
	}
	infos := l.Topics()
	if len(infos) != 1 || infos[0].Name != "orders.eu" || infos[0].Next != 8 || infos[0].Records != 8 || infos[0].Bytes < 100000 {
		t.Errorf("Topics = %+v", infos)
	}
	st := l.Stats()
	if st.Records != 8 || st.Appends != 2 || st.Commits < 1 || st.Commits > 2 || st.Fsyncs < 1 || st.LogBytes != infos[0].Bytes {
		t.Errorf("Stats = %+v", st)
	}
}

func TestInvalidRequests(t *testing.T) {
	l, _ := newTestLog(t, Options{MaxBatchRecords: 4, MaxBatchBytes: 1 << 10})
	ctx := context.Background()
	one := []Record{{Payload: []byte("x")}}
	for _, tc := range []struct {
		name string
		req  AppendRequest
		want error
	}{
		{"empty topic", AppendRequest{Records: one}, ErrInvalidRequest},
		{"long topic", AppendRequest{Topic: strings.Repeat("a", 256), Records: one}, ErrInvalidRequest},
		{"nothing", AppendRequest{Topic: "a"}, ErrInvalidRequest},
		{"position without name", AppendRequest{Topic: "a", Records: one, Position: &Position{Topic: "a"}}, ErrInvalidRequest},
		{"position without topic", AppendRequest{Position: &Position{Name: "c"}}, ErrInvalidRequest},
		{"too many records", AppendRequest{Topic: "a", Records: make([]Record, 5)}, ErrTooLarge},
		{"too many bytes", AppendRequest{Topic: "a", Records: []Record{{Payload: make([]byte, 2000)}}}, ErrTooLarge},
	} {
		if res := l.Append(ctx, tc.req); !errors.Is(res.Err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, res.Err, tc.want)
		}
		var got error
		l.AppendAsync(tc.req, func(res AppendResult) { got = res.Err })
		if !errors.Is(got, tc.want) {
			t.Errorf("%s (async): got %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, _, ok := l.Bounds("a"); ok {
		t.Error("a refused request created a topic")
	}
	// The longest allowed topic name works.
	mustAppend(t, l, strings.Repeat("b", 255), 0, 1)
}

func TestAppendAsyncPipelinedOrder(t *testing.T) {
	l, _ := newTestLog(t, Options{MaxBatchRecords: 64})
	const n = 2000
	var mu sync.Mutex
	var results []AppendResult
	var order []int
	var wg sync.WaitGroup
	next := map[string]int{}
	want := make([]uint64, n)
	topics := []string{"a", "b"}
	for i := range n {
		topic := topics[i%3%2] // uneven mix of two topics
		k := 1 + i%3
		recs := make([]Record, k)
		for j := range recs {
			recs[j].Payload = testPayload(topic, next[topic]+j)
		}
		want[i] = uint64(next[topic])
		next[topic] += k
		wg.Add(1)
		l.AppendAsync(AppendRequest{Topic: topic, Records: recs}, func(res AppendResult) {
			mu.Lock()
			results = append(results, res)
			order = append(order, i)
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	for j, i := range order {
		if i != j {
			t.Fatalf("callback %d was for request %d: not in submission order", j, i)
		}
		if results[j].Err != nil || results[j].First != want[i] {
			t.Fatalf("request %d: %+v, want First %d", i, results[j], want[i])
		}
	}
	for _, topic := range topics {
		recs := mustReadAll(t, l, topic, 0)
		if len(recs) != next[topic] {
			t.Fatalf("%s: %d records, want %d", topic, len(recs), next[topic])
		}
		for i, r := range recs {
			if r.Offset != uint64(i) || !bytes.Equal(r.Payload, testPayload(topic, i)) {
				t.Fatalf("%s offset %d: %+v", topic, i, r)
			}
		}
	}
	if st := l.Stats(); st.Commits >= n {
		t.Errorf("no group commit: %d commits for %d pipelined requests", st.Commits, n)
	}
}

// TestConcurrentAppenders: many goroutines append to a shared topic and to
// their own; every offset is assigned exactly once, and each goroutine's
// records keep its order.
func TestConcurrentAppenders(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	const writers, perWriter = 8, 150
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := fmt.Sprintf("own.%d", w)
			for i := range perWriter {
				for _, topic := range []string{"shared", own} {
					res := l.Append(context.Background(), AppendRequest{Topic: topic, Records: []Record{
						{ProducerID: fmt.Sprintf("w%d", w), Sequence: uint64(i), Payload: []byte(topic)},
					}})
					if res.Err != nil {
						t.Errorf("append: %v", res.Err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	shared := mustReadAll(t, l, "shared", 0)
	if len(shared) != writers*perWriter {
		t.Fatalf("shared has %d records, want %d", len(shared), writers*perWriter)
	}
	lastSeq := map[string]int{}
	for i, r := range shared {
		if r.Offset != uint64(i) {
			t.Fatalf("shared offset %d at index %d", r.Offset, i)
		}
		prev, seen := lastSeq[r.ProducerID]
		if seen && int(r.Sequence) != prev+1 || !seen && r.Sequence != 0 {
			t.Fatalf("%s: sequence %d after %d", r.ProducerID, r.Sequence, prev)
		}
		lastSeq[r.ProducerID] = int(r.Sequence)
	}
	for w := range writers {
		own := mustReadAll(t, l, fmt.Sprintf("own.%d", w), 0)
		if len(own) != perWriter {
			t.Fatalf("own.%d has %d records", w, len(own))
		}
		for i, r := range own {
			if r.Offset != uint64(i) || r.Sequence != uint64(i) {
				t.Fatalf("own.%d index %d: offset %d seq %d", w, i, r.Offset, r.Sequence)
			}
		}
	}
	if got := len(l.Topics()); got != writers+1 {
		t.Errorf("%d topics, want %d", got, writers+1)
	}
}

func TestReadFromTimeEarliestLatest(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	l, _ := newTestLog(t, Options{Now: clock.Now})
	// Times: 3 records at t0, 2 at t0+1s, 1 at t0+3s, then the clock goes
	// back 10s: the next record still gets t0+3s.
	mustAppend(t, l, "t", 0, 3)
	clock.Advance(time.Second)
	mustAppend(t, l, "t", 3, 1)
	mustAppend(t, l, "t", 4, 1)
	clock.Advance(2 * time.Second)
	mustAppend(t, l, "t", 5, 1)
	clock.Advance(-10 * time.Second)
	res := mustAppend(t, l, "t", 6, 1)
	if want := t0.Add(3 * time.Second).UnixNano(); res.Time != want {
		t.Fatalf("time went backwards: %d, want %d", res.Time, want)
	}
	for _, tc := range []struct {
		at   time.Time
		want uint64
	}{
		{t0.Add(-time.Hour), 0},
		{t0, 0},
		{t0.Add(1), 3},
		{t0.Add(time.Second), 3},
		{t0.Add(2 * time.Second), 5},
		{t0.Add(3 * time.Second), 5},
		{t0.Add(3*time.Second + 1), 7}, // none: the HWM
	} {
		got, err := l.OffsetForTime("t", tc.at.UnixNano())
		if err != nil || got != tc.want {
			t.Errorf("OffsetForTime(t0%+v) = %d, %v; want %d", tc.at.Sub(t0), got, err, tc.want)
		}
	}
	// Earliest and latest are Bounds.
	first, next, _ := l.Bounds("t")
	if recs, err := l.Read("t", first, 1, 0); err != nil || len(recs) != 1 || recs[0].Offset != 0 {
		t.Errorf("read earliest: %v %v", recs, err)
	}
	if recs, err := l.Read("t", next, 1, 0); err != nil || len(recs) != 0 {
		t.Errorf("read latest: %v %v", recs, err)
	}
	// From a time: the records returned all have Time >= t.
	off, _ := l.OffsetForTime("t", t0.Add(time.Second).UnixNano())
	recs := mustReadAll(t, l, "t", off)
	if len(recs) != 4 || recs[0].Time != t0.Add(time.Second).UnixNano() {
		t.Errorf("read from time: %+v", recs)
	}
	if _, err := l.OffsetForTime("nope", 0); !errors.Is(err, ErrUnknownTopic) {
		t.Errorf("unknown topic: %v", err)
	}
	// Many equal timestamps: the first of the run.
	clock.Set(t0.Add(3 * time.Second))
	for i := range 50 {
		mustAppend(t, l, "eq", i, 1)
	}
	clock.Advance(time.Hour)
	mustAppend(t, l, "eq", 50, 1)
	if got, _ := l.OffsetForTime("eq", t0.Add(3*time.Second).UnixNano()); got != 0 {
		t.Errorf("equal run: got %d, want 0", got)
	}
	if got, _ := l.OffsetForTime("eq", t0.Add(3*time.Second+1).UnixNano()); got != 50 {
		t.Errorf("after equal run: got %d, want 50", got)
	}
}

func TestReopenRecovers(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{Now: clock.Now})
	ctx := context.Background()
	mustAppend(t, l, "a", 0, 5)
	mustAppend(t, l, "b", 0, 2)
	mustAppend(t, l, "c", 0, 1)
	if err := l.SetPosition(ctx, Position{Name: "consumer1", Topic: "a", Value: 3}); err != nil {
		t.Fatal(err)
	}
	res := l.Append(ctx, AppendRequest{Topic: "b", Records: []Record{{Payload: testPayload("b", 2)}},
		Position: &Position{Name: "mirror/us", Topic: "b", Value: 77}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	ids := map[string]uint32{}
	for name, tp := range l.mu.topics {
		ids[name] = tp.id
	}
	before := l.Topics()
	lastTime := res.Time
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read("a", 0, 1, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if _, _, err := l.Position("consumer1", "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Position after Close: %v", err)
	}
	if res := l.Append(ctx, AppendRequest{Topic: "a", Records: []Record{{}}}); !errors.Is(res.Err, ErrClosed) {
		t.Errorf("Append after Close: %v", res.Err)
	}

	clock.Advance(-time.Hour) // the clock is behind the stored times after the restart
	l2 := openTestLog(t, dir, Options{Now: clock.Now})
	after := l2.Topics()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("Topics after reopen = %+v, want %+v", after, before)
	}
	for name, id := range ids {
		if got := l2.mu.topics[name].id; got != id {
			t.Errorf("topic %s id %d after reopen, want %d", name, got, id)
		}
	}
	for _, p := range []Position{{Name: "consumer1", Topic: "a", Value: 3}, {Name: "mirror/us", Topic: "b", Value: 77}} {
		if v, ok, err := l2.Position(p.Name, p.Topic); err != nil || !ok || v != p.Value {
			t.Errorf("Position %+v after reopen: %d %v %v", p, v, ok, err)
		}
	}
	if _, ok, _ := l2.Position("nobody", "a"); ok {
		t.Error("unknown position found")
	}
	res = mustAppend(t, l2, "b", 3, 1)
	if res.Time != lastTime {
		t.Errorf("time after reopen %d, want it not below %d", res.Time, lastTime)
	}
	mustAppend(t, l2, "d", 0, 1)
	if got := l2.mu.topics["d"].id; got <= max(ids["a"], ids["b"], ids["c"]) {
		t.Errorf("new topic reused id %d", got)
	}
	for i, r := range mustReadAll(t, l2, "b", 0) {
		if !bytes.Equal(r.Payload, testPayload("b", i)) {
			t.Errorf("b[%d] = %q", i, r.Payload)
		}
	}
}

func TestNotify(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	hwm := make(chan struct{}, 1)
	other := make(chan struct{}, 1)
	newTopics := make(chan struct{}, 1)
	cancel := l.Notify("later", hwm) // the topic does not exist yet
	defer cancel()
	defer l.Notify("other", other)()
	cancelNew := l.NotifyNewTopics(newTopics)

	expect := func(ch chan struct{}, want bool, what string) {
		t.Helper()
		select {
		case <-ch:
			if !want {
				t.Errorf("%s: unexpected wake-up", what)
			}
		default:
			if want {
				t.Errorf("%s: no wake-up", what)
			}
		}
	}
	mustAppend(t, l, "later", 0, 1) // the callback ran after the wake-up: no wait needed
	expect(hwm, true, "first append")
	expect(newTopics, true, "new topic")
	expect(other, false, "other topic")
	mustAppend(t, l, "later", 1, 1)
	expect(hwm, true, "second append")
	expect(newTopics, false, "existing topic")
	// A full channel does not block the completer.
	mustAppend(t, l, "later", 2, 1)
	mustAppend(t, l, "later", 3, 1)
	expect(hwm, true, "coalesced")
	cancel()
	cancel() // twice is fine
	cancelNew()
	mustAppend(t, l, "later", 4, 1)
	mustAppend(t, l, "new2", 0, 1)
	expect(hwm, false, "after cancel")
	expect(newTopics, false, "after cancel")
}

func TestPositions(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	ctx := context.Background()
	if err := l.SetPosition(ctx, Position{Name: "c", Topic: "t", Value: 5}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetPosition(ctx, Position{Name: "c", Topic: "t", Value: 2}); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := l.Position("c", "t"); err != nil || !ok || v != 2 {
		t.Errorf("Position = %d %v %v", v, ok, err)
	}
	// Same name, other topic; names that could collide without the length prefix.
	_ = l.SetPosition(ctx, Position{Name: "c", Topic: "t2", Value: 9})
	_ = l.SetPosition(ctx, Position{Name: "2c", Topic: "t", Value: 10})
	if v, _, _ := l.Position("c", "t"); v != 2 {
		t.Errorf("Position c/t = %d after writes to other keys", v)
	}
	if v, _, _ := l.Position("c", "t2"); v != 9 {
		t.Errorf("Position c/t2 = %d", v)
	}
	if _, _, ok := l.Bounds("t"); ok {
		t.Error("a position created a topic")
	}
	// Pipelined: the later write wins, also when one rides with records.
	var wg sync.WaitGroup
	wg.Add(2)
	l.AppendAsync(AppendRequest{Topic: "t", Records: []Record{{}}, Position: &Position{Name: "m", Topic: "t", Value: 1}}, func(AppendResult) { wg.Done() })
	l.AppendAsync(AppendRequest{Position: &Position{Name: "m", Topic: "t", Value: 2}}, func(AppendResult) { wg.Done() })
	wg.Wait()
	if v, _, _ := l.Position("m", "t"); v != 2 {
		t.Errorf("Position m/t = %d, want 2", v)
	}
}

func TestMetricsRegisteredAndReleased(t *testing.T) {
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{Registerer: reg})
	mustAppend(t, l, "a", 0, 10)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			got[mf.GetName()] = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			got[mf.GetName()] = m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			got[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
		}
		if len(mf.GetMetric()) != 1 {
			t.Errorf("%s has %d series: no per-topic series wanted", mf.GetName(), len(mf.GetMetric()))
		}
	}
	for name, want := range map[string]float64{
		"quicmq_wal_appended_records_total": 10,
		"quicmq_wal_fsync_seconds":          1,
		"quicmq_wal_records_per_commit":     1,
		"quicmq_wal_topics":                 1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if got["quicmq_wal_log_bytes"] <= 0 || got["quicmq_wal_appended_bytes_total"] != got["quicmq_wal_log_bytes"] {
		t.Errorf("bytes: %v", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The same registry serves a reopened log, which starts from the stored size.
	l2 := openTestLog(t, dir, Options{Registerer: reg})
	if st := l2.Stats(); st.LogBytes != uint64(got["quicmq_wal_log_bytes"]) {
		t.Errorf("LogBytes after reopen %d, want %v", st.LogBytes, got["quicmq_wal_log_bytes"])
	}
}

func TestCloseFailsQueuedAndIsIdempotent(t *testing.T) {
	release := make(chan struct{}) // holds the completer before its first sync wait
	holdCommitter := make(chan struct{})
	applied := make(chan struct{}, 100)
	var applies int
	hooks := &testHooks{
		afterApply: func() {
			applies++ // committer goroutine only
			applied <- struct{}{}
			if applies == 2 {
				<-holdCommitter
			}
		},
		beforeSyncWait: func() { <-release },
	}
	l, _ := newTestLog(t, Options{testHooks: hooks})
	var mu sync.Mutex
	errs := make([]error, 4)
	var order []int
	var wg sync.WaitGroup
	n := 0
	add := func() {
		i := n
		n++
		wg.Add(1)
		l.AppendAsync(AppendRequest{Topic: "a", Records: []Record{{}}}, func(res AppendResult) {
			mu.Lock()
			errs[i] = res.Err
			order = append(order, i)
			mu.Unlock()
			wg.Done()
		})
	}
	add()
	<-applied // batch 0 is in Pebble; the completer is held before its sync wait
	add()
	<-applied // batch 1 is in Pebble; the committer is held
	add()     // request 2 stays queued
	closed := make(chan error)
	go func() { closed <- l.Close() }()
	testlog.WaitFor(t, 10*time.Second, "Close to begin", func() bool {
		l.q.Lock()
		defer l.q.Unlock()
		return l.q.closed
	})
	add() // request 3: after Close began, refused at once
	close(holdCommitter)
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("batches handed to Pebble before Close must complete: %v", errs)
	}
	if !errors.Is(errs[2], ErrClosed) || !errors.Is(errs[3], ErrClosed) {
		t.Errorf("queued and late appends: %v, %v; want ErrClosed", errs[2], errs[3])
	}
	if fmt.Sprint(order) != "[3 0 1 2]" {
		t.Errorf("callback order %v, want [3 0 1 2] (the refused one inline, the rest in order)", order)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestAppendContextCancelWithdraws(t *testing.T) {
	holdCommitter := make(chan struct{})
	holdCompleter := make(chan struct{})
	applied := make(chan struct{}, 10)
	var applies, waits int
	hooks := &testHooks{
		afterApply: func() { // committer goroutine
			applies++
			applied <- struct{}{}
			if applies == 1 {
				<-holdCommitter
			}
		},
		beforeSyncWait: func() { // completer goroutine
			waits++
			if waits == 2 {
				<-holdCompleter
			}
		},
	}
	l, _ := newTestLog(t, Options{testHooks: hooks})
	done := make(chan AppendResult, 1)
	l.AppendAsync(AppendRequest{Topic: "a", Records: []Record{{Payload: []byte("0")}}}, func(r AppendResult) { done <- r })
	<-applied
	// The committer is held: this request stays queued and is withdrawn.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	res := l.Append(ctx, AppendRequest{Topic: "a", Records: []Record{{Payload: []byte("withdrawn")}}})
	if !errors.Is(res.Err, context.DeadlineExceeded) || errors.Is(res.Err, ErrOutcomeUnknown) {
		t.Errorf("queued request: %v", res.Err)
	}
	close(holdCommitter)
	if r := <-done; r.Err != nil || r.First != 0 {
		t.Fatalf("first append: %+v", r)
	}
	// The completer is held at the next batch: this request is taken and
	// applied, so its context ending gives an unknown outcome.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	res = l.Append(ctx2, AppendRequest{Topic: "a", Records: []Record{{Payload: []byte("1")}}})
	if !errors.Is(res.Err, ErrOutcomeUnknown) || !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Errorf("taken request: %v", res.Err)
	}
	close(holdCompleter)
	// A context already done never queues.
	ctx3, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if res := l.Append(ctx3, AppendRequest{Topic: "a", Records: []Record{{}}}); !errors.Is(res.Err, context.Canceled) {
		t.Errorf("done context: %v", res.Err)
	}
	// The withdrawn record got no offset; the unknown-outcome one became
	// durable at offset 1.
	mustAppend(t, l, "a", 2, 1)
	recs := mustReadAll(t, l, "a", 0)
	if len(recs) != 3 || string(recs[1].Payload) != "1" {
		t.Errorf("log after cancellations: %+v", recs)
	}
}

// A log holds a topic struct per topic, most of them idle (a node mirroring 10,000 idle
// topics holds 10,000 more): its pointers lead the struct, so the GC, which scans an object
// up to its last pointer, reads 40 of its bytes at every cycle, not 104 (issue 34's figure 3).
func TestTopicPointersLead(t *testing.T) {
	const most = 40
	if end := pointersEnd(reflect.TypeFor[topic](), 0); end > most {
		t.Fatalf("topic's last pointer ends at byte %d, want at most %d: fields with pointers first", end, most)
	}
}

// pointersEnd is the end of the last word of typ (at offset off) that holds a pointer (0
// when none does).
func pointersEnd(typ reflect.Type, off uintptr) uintptr {
	switch typ.Kind() {
	case reflect.Struct:
		var end uintptr
		for i := range typ.NumField() {
			f := typ.Field(i)
			end = max(end, pointersEnd(f.Type, off+f.Offset))
		}
		return end
	case reflect.Array:
		var end uintptr
		for i := range typ.Len() {
			end = max(end, pointersEnd(typ.Elem(), off+uintptr(i)*typ.Elem().Size()))
		}
		return end
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return off + typ.Size()
	case reflect.String, reflect.Slice:
		return off + reflect.TypeFor[uintptr]().Size() // the data pointer is the first word
	case reflect.Interface:
		return off + typ.Size()
	}
	return 0
}
