package wal

import (
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/timeline"
)

// A log with a timeline records its store's flushes (and compactions) there, for the grow
// campaign's episode timeline.
func TestTimelineRecordsFlushes(t *testing.T) {
	tl := timeline.New(64)
	l, _ := newTestLog(t, Options{Timeline: tl})
	start := time.Now()
	if res := l.Append(t.Context(), AppendRequest{Topic: "t", Records: []Record{{Payload: []byte("x")}}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if err := l.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	for _, ev := range tl.Since(start) {
		if ev.Kind == timeline.Flush && ev.N > 0 && ev.Dur > 0 {
			return
		}
	}
	t.Fatalf("no flush with its bytes and time among %+v", tl.Since(start))
}
