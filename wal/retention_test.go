package wal

import (
	"errors"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

func TestRetentionByAge(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{Now: clock.Now, Retention: Retention{MaxAge: time.Hour}})
	// 10 records per minute for 90 minutes.
	for m := range 90 {
		mustAppend(t, l, "aged", m*10, 10)
		clock.Advance(time.Minute)
	}
	mustAppend(t, l, "kept", 0, 5) // override below keeps it forever
	mustSetRetention(t, l, "kept", Retention{})
	clock.Advance(2 * time.Hour)
	mustAppend(t, l, "kept", 5, 1)
	clock.Advance(-2 * time.Hour)
	// now = start+90m: records older than start+30m go.
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	first, next, _ := l.Bounds("aged")
	if first != 300 || next != 900 {
		t.Fatalf("Bounds after retention = %d %d, want 300 900", first, next)
	}
	_, err := l.Read("aged", 299, 10, 0)
	var oor *OffsetOutOfRangeError
	if !errors.As(err, &oor) || !errors.Is(err, ErrOffsetOutOfRange) || oor.First != 300 || oor.Topic != "aged" {
		t.Fatalf("read before first: %v", err)
	}
	if recs, err := l.Read("aged", 300, 1, 0); err != nil || recs[0].Offset != 300 {
		t.Fatalf("read at first: %v %v", recs, err)
	}
	if off, _ := l.OffsetForTime("aged", 0); off != 300 {
		t.Errorf("OffsetForTime(0) = %d, want the first retained 300", off)
	}
	if first, _, _ := l.Bounds("kept"); first != 0 {
		t.Errorf("override ignored: kept starts at %d", first)
	}
	// The first offset is durable, and the byte count follows.
	info := l.Topics()[0]
	if info.Records != 600 {
		t.Errorf("Topics = %+v", info)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{Now: clock.Now})
	if got := l.Topics()[0]; got != info {
		t.Errorf("after reopen %+v, want %+v", got, info)
	}
	// Everything expires: the log is empty, but offsets go on.
	clock.Advance(10 * time.Hour)
	mustSetRetention(t, l, "aged", Retention{MaxAge: time.Hour})
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if first, next, _ := l.Bounds("aged"); first != 900 || next != 900 {
		t.Fatalf("all expired: Bounds %d %d", first, next)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{Now: clock.Now})
	if first, next, _ := l.Bounds("aged"); first != 900 || next != 900 {
		t.Fatalf("all expired, reopened: Bounds %d %d", first, next)
	}
	if info := l.Topics()[0]; info.Bytes != 0 || info.Records != 0 {
		t.Errorf("empty log: %+v", info)
	}
	mustAppend(t, l, "aged", 900, 1)
	if _, err := l.Read("aged", 0, 1, 0); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Errorf("read 0: %v", err)
	}
}

func TestRetentionByBytes(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	payload := make([]byte, 1000)
	for i := range 200 {
		res := l.Append(t.Context(), AppendRequest{Topic: "big", Records: []Record{{Payload: payload}}})
		if res.Err != nil || res.First != uint64(i) {
			t.Fatalf("append: %+v", res)
		}
	}
	mustAppend(t, l, "small", 0, 3)
	before := l.Topics()
	perRecord := before[0].Bytes / 200
	mustSetRetention(t, l, "big", Retention{MaxBytes: int64(50*perRecord + perRecord/2)})
	mustSetRetention(t, l, "small", Retention{MaxBytes: 1 << 20})
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	after := l.Topics()
	if after[0].First != 150 || after[0].Records != 50 || after[0].Bytes != 50*perRecord {
		t.Errorf("big after retention: %+v (record %d bytes)", after[0], perRecord)
	}
	if after[1].Config.Retention.MaxBytes != 1<<20 {
		t.Errorf("small's config: %+v", after[1].Config)
	}
	after[1].Config = before[1].Config
	if after[1] != before[1] {
		t.Errorf("small changed: %+v -> %+v", before[1], after[1])
	}
	if st := l.Stats(); st.LogBytes != after[0].Bytes+after[1].Bytes {
		t.Errorf("Stats.LogBytes %d", st.LogBytes)
	}
	var oor *OffsetOutOfRangeError
	if _, err := l.Read("big", 0, 1, 0); !errors.As(err, &oor) || oor.First != 150 {
		t.Errorf("read 0: %v", err)
	}
	if recs := mustReadAll(t, l, "big", 150); len(recs) != 50 {
		t.Errorf("read rest: %d", len(recs))
	}
	// A second pass deletes nothing more.
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := l.Bounds("big"); first != 150 {
		t.Errorf("second pass moved first to %d", first)
	}
}

// TestRetentionLoop: the loop runs by itself at its interval.
func TestRetentionLoop(t *testing.T) {
	clock := newFakeClock()
	l, _ := newTestLog(t, Options{Now: clock.Now, Retention: Retention{MaxAge: time.Minute}, RetentionInterval: 5 * time.Millisecond})
	mustAppend(t, l, "a", 0, 3)
	clock.Advance(time.Hour)
	mustAppend(t, l, "a", 3, 1)
	testlog.WaitFor(t, 5*time.Second, "the retention loop to cut the log", func() bool {
		first, _, _ := l.Bounds("a")
		return first == 3
	})
}

// TestRetentionConcurrentReaders: readers racing retention see records or
// OffsetOutOfRange, never a missing durable record.
func TestRetentionConcurrentReaders(t *testing.T) {
	clock := newFakeClock()
	l, _ := newTestLog(t, Options{Now: clock.Now})
	for i := range 100 {
		mustAppend(t, l, "r", i*20, 20)
		clock.Advance(time.Second)
	}
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				first, _, _ := l.Bounds("r")
				for _, from := range []uint64{first, first + 10} {
					if _, err := l.Read("r", from, 50, 0); err != nil && !errors.Is(err, ErrOffsetOutOfRange) {
						errs <- err
						return
					}
					if _, err := l.OffsetForTime("r", 0); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	mustSetRetention(t, l, "r", Retention{MaxAge: 100 * time.Second})
	for range 15 {
		clock.Advance(6 * time.Second)
		if err := l.EnforceRetention(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("reader: %v", err)
		}
	}
	if first, _, _ := l.Bounds("r"); first != 1800 {
		t.Errorf("first = %d, want 1800", first)
	}
}
