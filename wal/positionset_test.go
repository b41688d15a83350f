package wal

import (
	"fmt"
	"sync"
	"testing"

	"github.com/quicmq/quicmq/internal/testlog"
)

// TestPositionSetScansLessPerCursor bounds what a mirror cursor (one position of one name
// on each of many topics, as federation stores with each mirrored record) adds to the heap
// the GC scans at every cycle (issue 34's figure 3): n topics are created, then a cursor
// is written on each. Measured 2026-12-07 at 4,000: 166-197 B with positions keyed by
// (name, topic) and a second index of topics by name, 116 B with positionSet.
func TestPositionSetScansLessPerCursor(t *testing.T) {
	if raceEnabled {
		t.Skip("measures the heap: the race detector's shadow allocations swamp it")
	}
	const n = 4000
	l, _ := newTestLog(t, Options{})
	write := func(prefix string, records, cursor bool) {
		appendEach(t, l, n, func(i int) AppendRequest {
			topic := fmt.Sprintf("%s.t%05d", prefix, i)
			req := AppendRequest{Topic: topic}
			if records {
				req.Records = []Record{{Payload: []byte("x")}}
			}
			if cursor {
				req.Position = &Position{Name: "mirror/us", Topic: topic, Value: 0}
			}
			return req
		})
	}
	write("warm", true, true) // the cursor's name and the log's own buffers in place
	write("m", true, false)
	s0 := testlog.ScanHeap()
	write("m", false, true)
	s1 := testlog.ScanHeap()
	cursor := (float64(s1) - float64(s0)) / n
	t.Logf("a cursor adds %.0f B to the scanned heap (%d topics)", cursor, n)
	if got, ok, err := l.Position("mirror/us", "m.t00007"); err != nil || !ok || got != 0 {
		t.Fatalf("cursor of m.t00007: %d %v, %v", got, ok, err)
	}
	if cursor > 130 {
		t.Errorf("a cursor adds %.0f B the GC scans, want at most 130", cursor)
	}
}

// appendEach appends req(i) for i in [0, n) at once (AppendAsync) and waits for every one.
func appendEach(t *testing.T, l *Log, n int, req func(i int) AppendRequest) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		l.AppendAsync(req(i), func(r AppendResult) {
			if r.Err != nil {
				t.Error(r.Err)
			}
			wg.Done()
		})
	}
	wg.Wait()
}
