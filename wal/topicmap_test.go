package wal

import (
	"fmt"
	"testing"

	"github.com/quicmq/quicmq/internal/testlog"
)

// TestTopicScansOneMapEntry bounds what an idle topic leaves for the GC to scan in the log
// (issue 34's figure 3: a region mirroring 10,000 idle topics holds 10,000 more, and each GC
// marks them while a hot topic waits): its struct, its name, and one map entry. The
// committer once kept a second map of every topic beside the readers' one (about 40 B more a
// topic: 169 B a topic here, 114-117 B with one map). n topics are created by one record
// each, then the heap the GC scans is read.
func TestTopicScansOneMapEntry(t *testing.T) {
	if raceEnabled {
		t.Skip("measures the heap: the race detector's shadow allocations swamp it")
	}
	const n = 8000
	l, _ := newTestLog(t, Options{})
	create := func(prefix string) {
		appendEach(t, l, n, func(i int) AppendRequest {
			return AppendRequest{Topic: fmt.Sprintf("%s.t%05d", prefix, i), Records: []Record{{Payload: []byte("x")}}}
		})
	}
	create("warm") // the log's own buffers in place, and maps grown past n once
	s0 := testlog.ScanHeap()
	create("m")
	s1 := testlog.ScanHeap()
	per := (float64(s1) - float64(s0)) / n
	t.Logf("a topic adds %.0f B to the scanned heap (%d topics)", per, n)
	if per > 140 {
		t.Errorf("a topic adds %.0f B the GC scans, want at most 140", per)
	}
}
