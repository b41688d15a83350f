package wal

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestHWMHidesUnsyncedRecords holds the completer before it waits for a
// batch's sync. Pebble already shows the batch to its readers (the record is
// in the memtable), but Read, Bounds, OffsetForTime, Topics and Position stay
// at the durable high-watermark until the sync returned and Append returns.
func TestHWMHidesUnsyncedRecords(t *testing.T) {
	release := make(chan struct{})
	applied := make(chan struct{}, 10)
	holding := make(chan struct{})
	// The first two batches (setup) pass; the third is held before its sync
	// wait. Only the completer touches waits.
	waits := 0
	hooks := &testHooks{
		afterApply: func() { applied <- struct{}{} },
		beforeSyncWait: func() {
			waits++
			if waits == 3 {
				holding <- struct{}{}
				<-release
			}
		},
	}
	clock := newFakeClock()
	l, _ := newTestLog(t, Options{Now: clock.Now, testHooks: hooks})
	mustAppend(t, l, "t", 0, 1)
	<-applied
	if err := l.SetPosition(context.Background(), Position{Name: "c", Topic: "t", Value: 1}); err != nil {
		t.Fatal(err)
	}
	<-applied

	clock.Advance(time.Second)
	done := make(chan AppendResult, 1)
	l.AppendAsync(AppendRequest{Topic: "t", Records: []Record{{Payload: []byte("new")}},
		Position: &Position{Name: "c", Topic: "t", Value: 2}}, func(r AppendResult) { done <- r })
	<-applied
	<-holding

	// Pebble shows the record...
	val, closer, err := l.pdb.Get(recordKey(l.mu.topics["t"].id, 1))
	if err != nil {
		t.Fatalf("record not applied to Pebble yet: %v", err)
	}
	_ = closer.Close()
	if len(val) == 0 {
		t.Fatal("empty value")
	}
	// ...the log does not, and the append has not returned.
	for range 3 {
		if recs, err := l.Read("t", 1, 10, 0); err != nil || len(recs) != 0 {
			t.Fatalf("Read past the HWM: %v %v", recs, err)
		}
		if recs, err := l.Read("t", 0, 10, 0); err != nil || len(recs) != 1 {
			t.Fatalf("Read up to the HWM: %d records, %v", len(recs), err)
		}
		if _, next, _ := l.Bounds("t"); next != 1 {
			t.Fatalf("Bounds next = %d before the sync", next)
		}
		if off, err := l.OffsetForTime("t", clock.Now().UnixNano()); err != nil || off != 1 {
			t.Fatalf("OffsetForTime = %d, %v before the sync", off, err)
		}
		if info := l.Topics(); info[0].Next != 1 {
			t.Fatalf("Topics = %+v before the sync", info)
		}
		if v, _, _ := l.Position("c", "t"); v != 1 {
			t.Fatalf("Position = %d before the sync", v)
		}
		select {
		case r := <-done:
			t.Fatalf("append completed before its sync: %+v", r)
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(release)
	r := <-done
	if r.Err != nil || r.First != 1 {
		t.Fatalf("append: %+v", r)
	}
	recs, err := l.Read("t", 1, 10, 0)
	if err != nil || len(recs) != 1 || string(recs[0].Payload) != "new" {
		t.Fatalf("Read after the sync: %v %v", recs, err)
	}
	if v, _, _ := l.Position("c", "t"); v != 2 {
		t.Fatalf("Position = %d after the sync", v)
	}
}

// TestNewTopicInvisibleUntilDurable: a topic's first batch, held before its
// sync, does not make the topic known.
func TestNewTopicInvisibleUntilDurable(t *testing.T) {
	release := make(chan struct{})
	holding := make(chan struct{})
	l, _ := newTestLog(t, Options{testHooks: &testHooks{beforeSyncWait: func() {
		holding <- struct{}{}
		<-release
	}}})
	newTopics := make(chan struct{}, 1)
	defer l.NotifyNewTopics(newTopics)()
	done := make(chan AppendResult, 1)
	l.AppendAsync(AppendRequest{Topic: "fresh", Records: []Record{{}}}, func(r AppendResult) { done <- r })
	<-holding
	if _, _, ok := l.Bounds("fresh"); ok {
		t.Error("topic known before its first sync")
	}
	if _, err := l.Read("fresh", 0, 1, 0); !errors.Is(err, ErrUnknownTopic) {
		t.Errorf("Read: %v", err)
	}
	if len(l.Topics()) != 0 {
		t.Error("Topics lists a topic before its first sync")
	}
	select {
	case <-newTopics:
		t.Error("NotifyNewTopics before the sync")
	default:
	}
	close(release)
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
	<-newTopics
	if _, next, ok := l.Bounds("fresh"); !ok || next != 1 {
		t.Errorf("Bounds after sync: %d %v", next, ok)
	}
}
