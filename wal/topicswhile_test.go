package wal

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/quicmq/quicmq/internal/testlog"
)

// TopicsWhile lists a log of more topics than one hold of its lock takes while appends go on
// (and create topics): every topic of the registration's instant is listed, and each listed
// topic's head as of the registration is its listed Next or, if it advanced after it, the
// high-watermark before its first reported advance, never both different.
func TestTopicsWhileListsInChunks(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	const topics = 2*topicsChunk + 500
	var wg sync.WaitGroup
	for i := range topics {
		wg.Add(1)
		l.AppendAsync(AppendRequest{Topic: fmt.Sprintf("tw.%d", i), Records: []Record{{Payload: []byte("x")}}}, func(res AppendResult) {
			if res.Err != nil {
				t.Error(res.Err)
			}
			wg.Done()
		})
	}
	wg.Wait()

	rnd := testlog.Rand(t, "appends")
	stop := make(chan struct{})
	appended := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { // appends to random topics, old and new, until the listing is taken
		defer close(done)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			topic := fmt.Sprintf("tw.%d", rnd.IntN(topics+200))
			if res := l.Append(context.Background(), AppendRequest{Topic: topic, Records: []Record{{Payload: []byte("y")}}}); res.Err != nil {
				t.Error(res.Err)
				return
			}
			select {
			case appended <- struct{}{}:
			default:
			}
		}
	}()
	<-appended // the appender runs

	var mu sync.Mutex
	firstFrom := map[string]uint64{} // each topic's first advance after the registration
	atReg := map[string]uint64{}     // each topic's head at the registration
	listed := l.TopicsWhile(func() {
		for name, tp := range l.mu.topics { // under the log's lock, as fn runs
			atReg[name] = tp.hwm
		}
		l.OnAdvance(func(topic string, id uint32, from, to uint64) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := firstFrom[topic]; !ok && from != to {
				firstFrom[topic] = from
			}
		})
	})
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	moved := 0
	for _, lt := range listed {
		seen[lt.Name] = true
		reg, existed := atReg[lt.Name]
		from, advanced := firstFrom[lt.Name]
		switch {
		case !existed && !advanced:
			t.Fatalf("%s listed, neither there at the registration nor created since", lt.Name)
		case advanced && from != reg:
			t.Fatalf("%s: first advance after the registration from %d, head then %d", lt.Name, from, reg)
		case !advanced && lt.Next != reg:
			t.Fatalf("%s: listed at %d, head at the registration %d, and no advance reported", lt.Name, lt.Next, reg)
		case lt.Next != reg:
			moved++
		}
	}
	for name := range atReg {
		if !seen[name] {
			t.Fatalf("%s was there at the registration and is not listed", name)
		}
	}
	t.Logf("%d topics listed, %d of them past their head at the registration", len(listed), moved)
}
