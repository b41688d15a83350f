package wal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPurgeDeleteUnderLoad purges and then deletes a topic while writers
// append to it and readers tail it: no offset is reused within the topic's
// life, every append acknowledged after the delete is in the new log at its
// offset, readers see only whole records and learn of the purge (out of
// range) and of the delete (ErrTopicDeleted), never a corrupt record.
func TestPurgeDeleteUnderLoad(t *testing.T) {
	l, _ := newTestLog(t, Options{MaxBatchRecords: 16})
	const topic = "x"
	const writers, readers = 3, 2
	type ack struct {
		off uint64
		seq int
	}
	var (
		stop atomic.Bool
		// phase: 0 before the purge, 1 during it, 2 after it, 3 during the
		// delete, 4 after it. Appends acknowledged across a change of phase,
		// or during an operation, are not checked.
		phase   atomic.Int32
		mu      sync.Mutex
		acked   [writers][3][]ack // by writer and by the phase when the append was acknowledged
		wg      sync.WaitGroup
		started = make(chan struct{}, writers)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; !stop.Load(); seq++ {
				before := phase.Load()
				res := l.Append(context.Background(), AppendRequest{Topic: topic,
					Records: []Record{{Payload: fmt.Appendf(nil, "w%d/%d", w, seq)}}})
				if res.Err != nil {
					t.Errorf("append: %v", res.Err)
					return
				}
				mu.Lock()
				if before == phase.Load() && before%2 == 0 {
					acked[w][before/2] = append(acked[w][before/2], ack{res.First, seq})
				}
				mu.Unlock()
				if seq == 20 {
					started <- struct{}{}
				}
			}
		}()
	}
	sawDelete := make(chan struct{}, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wake := make(chan struct{}, 1)
			defer l.Notify(topic, wake)()
			sc := l.NewScanner(topic)
			defer func() { sc.Release() }()
			var next uint64
			deleted := false
			for !stop.Load() {
				_, err := sc.ReadFunc(next, 64, 0, func(r *Record) error {
					var w, seq int
					if _, err := fmt.Sscanf(string(r.Payload), "w%d/%d", &w, &seq); err != nil || r.Offset != next {
						return fmt.Errorf("offset %d (want %d): payload %q", r.Offset, next, r.Payload)
					}
					next++
					return nil
				})
				var oor *OffsetOutOfRangeError
				switch {
				case err == nil:
				case errors.As(err, &oor):
					next = oor.First
					continue
				case errors.Is(err, ErrTopicDeleted) && !deleted:
					// The log it read is gone: a new Scanner reads the next one.
					deleted = true
					sawDelete <- struct{}{}
					sc.Release()
					sc, next = l.NewScanner(topic), 0
					continue
				case errors.Is(err, ErrTopicDeleted), errors.Is(err, ErrUnknownTopic):
					// Not created again yet: wait for it.
				default:
					t.Errorf("reader: %v", err)
					return
				}
				<-wake
			}
		}()
	}
	for range writers {
		<-started
	}
	phase.Store(1)
	res, err := l.PurgeTopic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	phase.Store(2)
	waitForNext(t, l, topic, res.Next+50)
	phase.Store(3)
	n, err := l.DeleteTopic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	phase.Store(4)
	for range readers {
		<-sawDelete
	}
	waitForNext(t, l, topic, 50)
	stop.Store(true)
	// Wake readers waiting for records.
	mustAppend2(t, l, topic)
	wg.Wait()
	t.Logf("purged %d records, deleted %d", res.Records, n)

	recs := mustReadAll(t, l, topic, 0)
	byOff := make(map[uint64]string, len(recs))
	for i, r := range recs {
		if r.Offset != uint64(i) {
			t.Fatalf("new log not dense: offset %d at %d", r.Offset, i)
		}
		byOff[r.Offset] = string(r.Payload)
	}
	for w := range writers {
		var last uint64
		for p := range 2 {
			for i, a := range acked[w][p] {
				if (p > 0 || i > 0) && a.off <= last {
					t.Errorf("writer %d: offset %d after %d in the deleted topic's life: reused", w, a.off, last)
				}
				last = a.off
				if p == 1 && a.off < res.Next {
					t.Errorf("writer %d: offset %d after a purge that ended at %d", w, a.off, res.Next)
				}
			}
		}
		for _, a := range acked[w][2] {
			if got := byOff[a.off]; got != fmt.Sprintf("w%d/%d", w, a.seq) {
				t.Errorf("writer %d seq %d acknowledged at %d after the delete; the log holds %q", w, a.seq, a.off, got)
			}
		}
	}
}

// waitForNext waits (on Notify, not on time) until topic's high-watermark is
// at least next.
func waitForNext(t *testing.T, l *Log, topic string, next uint64) {
	t.Helper()
	wake := make(chan struct{}, 1)
	defer l.Notify(topic, wake)()
	for {
		if _, n, ok := l.Bounds(topic); ok && n >= next {
			return
		}
		select {
		case <-wake:
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
}

func mustAppend2(t *testing.T, l *Log, topic string) {
	t.Helper()
	if res := l.Append(t.Context(), AppendRequest{Topic: topic, Records: []Record{{Payload: []byte("w0/999999")}}}); res.Err != nil {
		t.Fatal(res.Err)
	}
}
