package tail

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// testMember is a parked subscription as the fanout sees it: a cursor, a stream that takes
// everything or nothing (blocked), and a count of pokes.
type testMember struct {
	mu      sync.Mutex
	next    uint64
	blocked bool
	written bytes.Buffer
	pokes   int
}

func (m *testMember) Position() (next, index uint64, batch bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.next, 7, false
}

func (m *testMember) CheckAt(wal.Instance) error { return nil }

func (m *testMember) Delivered(to uint64, records, bytes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next = to
}

func (m *testMember) TryWrite(buf []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.blocked {
		return quic.ErrWouldBlock
	}
	m.written.Write(buf)
	return nil
}

func (m *testMember) Poke() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pokes++
}

func (m *testMember) state() (next uint64, pokes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.next, m.pokes
}

// offsets decodes buf's RECORD frames for index 7 and returns their offsets.
func offsets(t *testing.T, buf []byte) []uint64 {
	t.Helper()
	r := wire.NewReader(bytes.NewReader(buf), wire.DefaultLimits())
	var offs []uint64
	for {
		f, err := r.Read()
		if err != nil {
			return offs
		}
		rec, ok := f.(*wire.Record)
		if !ok || rec.Index != 7 || rec.OriginRegion != "eu" {
			t.Fatalf("frame %#v, want a RECORD of index 7 from eu", f)
		}
		offs = append(offs, rec.Offset)
	}
}

// Without a node: the subscriptions of one connection parked on a topic share one fanout,
// which writes each the new records; one whose stream would block is poked and handed back,
// its records counted as delivered and returned by Unpark for its own writer; the last
// Unpark ends the fanout.
func TestFanoutServesAndHandsBack(t *testing.T) {
	l := openTailLog(t)
	appendN(t, l, "f", 0, 5, 0)
	ts := NewSet(l, Config{Records: 64, Bytes: 1 << 20, ReadAhead: 1 << 20, MaxRead: 4096, Region: "eu"})
	tl := ts.Acquire("f")
	defer ts.Release(tl)
	conn, other := &testConn{}, &testConn{}
	fast, slow, apart := &testMember{next: 5}, &testMember{next: 5, blocked: true}, &testMember{next: 5}
	wFast, wSlow, wApart := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	for _, ch := range []chan struct{}{wFast, wSlow} {
		tl.Watch(conn, ch)
	}
	tl.Watch(other, wApart)
	f := tl.Park(conn, fast, wFast)
	if g := tl.Park(conn, slow, wSlow); g != f {
		t.Fatal("two subscriptions of one connection got two fanouts")
	}
	if g := tl.Park(other, apart, wApart); g == f {
		t.Fatal("two connections share a fanout")
	}

	// Records 5-7 in one append: one advance, one run for every member.
	recs := []wal.Record{{Payload: []byte("p5")}, {Payload: []byte("p6")}, {Payload: []byte("p7")}}
	if res := l.Append(context.Background(), wal.AppendRequest{Topic: "f", Records: recs}); res.Err != nil || res.First != 5 {
		t.Fatalf("append at %d: %v", res.First, res.Err)
	}
	testlog.WaitFor(t, 10*time.Second, "the fanouts to write records 5-7", func() bool {
		n1, _ := fast.state()
		n2, _ := apart.state()
		_, pokes := slow.state()
		return n1 == 8 && n2 == 8 && pokes == 1
	})
	if next, _ := slow.state(); next != 8 {
		t.Fatalf("the blocked member's cursor is at %d, want 8: its records count as delivered", next)
	}
	back := f.Unpark(conn, slow, wSlow)
	if got := offsets(t, back); len(got) != 3 || got[0] != 5 || got[2] != 7 {
		t.Fatalf("handed back %v, want offsets 5-7", got)
	}
	for _, m := range []*testMember{fast, apart} {
		m.mu.Lock()
		got := offsets(t, m.written.Bytes())
		m.mu.Unlock()
		if len(got) != 3 || got[0] != 5 || got[2] != 7 {
			t.Fatalf("written %v, want offsets 5-7", got)
		}
	}
	if back := f.Unpark(conn, fast, wFast); len(back) != 0 {
		t.Fatalf("a served member got %d bytes back", len(back))
	}
	select {
	case <-f.done:
	default:
		t.Fatal("the last Unpark left the fanout running")
	}
	tl.wmu.Lock()
	fans := len(tl.fans)
	tl.wmu.Unlock()
	if fans != 1 {
		t.Fatalf("%d fanouts on the topic, want the other connection's", fans)
	}
	st := ts.Stats()
	if st.Parks != 3 || st.Handbacks != 1 || st.Fanned != 6 {
		t.Fatalf("stats %+v, want 3 parks, 1 handback, 6 records fanned", st)
	}
}
