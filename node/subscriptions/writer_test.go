package subscriptions

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

// gatedStream is a stream whose writes wait for the test to let each one through (gate),
// optionally failing it, and which records what it wrote.
type gatedStream struct {
	gate    chan error // one value per write: its result
	mu      sync.Mutex
	writing int // writes started and not finished
	most    int
	batches [][]byte
}

func (g *gatedStream) Write(b []byte) error {
	g.mu.Lock()
	g.writing++
	g.most = max(g.most, g.writing)
	g.batches = append(g.batches, append([]byte(nil), b...))
	g.mu.Unlock()
	err := <-g.gate
	g.mu.Lock()
	g.writing--
	g.mu.Unlock()
	return err
}
func (g *gatedStream) Index(n uint64) uint64      { return n }
func (g *gatedStream) SetWriteDeadline(time.Time) {}
func (g *gatedStream) StopReading()               {}
func (g *gatedStream) Finish(*wire.Error)         {}
func (g *gatedStream) started() int               { g.mu.Lock(); defer g.mu.Unlock(); return len(g.batches) }

// TestWriterHoldsTwoBatches: the run goroutine buffers one batch while the writer writes the
// previous one, never more (I5); a failed write is seen by the next flush or wait; every
// batch is written whole and in order.
func TestWriterHoldsTwoBatches(t *testing.T) {
	g := &gatedStream{gate: make(chan error)}
	wr := NewWriter(g)
	w := wire.NewWriter(WriterFunc(g.Write))
	const batches = 5
	flushed := make(chan error, batches+1)
	go func() {
		for i := range batches {
			w.Buffer(&wire.Gap{Index: uint64(i), From: 0, To: 1})
			flushed <- wr.Flush(w, false, func() { t.Error("released with nothing held") })
		}
		flushed <- wr.Wait(false, nil)
	}()
	fail := errors.New("stream reset")
	for i := range batches {
		if err := <-flushed; err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
		testlog.WaitFor(t, 10*time.Second, "the batch's write to start", func() bool { return g.started() == i+1 })
		// Flush i has returned and batch i is being written: the run goroutine may buffer
		// the next, but its flush waits for this write.
		select {
		case err := <-flushed:
			t.Fatalf("flush %d returned (%v) while batch %d was still being written", i+1, err, i)
		default:
		}
		var res error
		if i == batches-1 {
			res = fail // seen by the wait after it, as a flush sees its previous batch's
		}
		g.gate <- res
	}
	if err := <-flushed; !errors.Is(err, fail) {
		t.Fatalf("wait after a failed write: %v, want the write's error", err)
	}
	wr.Close(false, nil)
	if g.most != 1 || len(g.batches) != batches {
		t.Fatalf("%d batches, at most %d writes at once: want %d, 1", len(g.batches), g.most, batches)
	}
	for i, b := range g.batches {
		r := wire.NewReader(bytes.NewReader(b), wire.Limits{})
		f, err := r.Read()
		if gap, ok := f.(*wire.Gap); err != nil || !ok || gap.Index != uint64(i) {
			t.Fatalf("batch %d: %v %v, want the GAP of index %d", i, f, err, i)
		}
	}
}

// TestWriterReleasesHeldIterators: a wait for a slow write lets go of the log iterators the
// run goroutine holds (release) after scanHold, and never when it holds none.
func TestWriterReleasesHeldIterators(t *testing.T) {
	for _, holding := range []bool{true, false} {
		g := &gatedStream{gate: make(chan error)}
		wr := NewWriter(g)
		w := wire.NewWriter(WriterFunc(g.Write))
		w.Buffer(&wire.Gap{To: 1})
		if err := wr.Flush(w, holding, nil); err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		waited := make(chan error)
		go func() { waited <- wr.Wait(holding, func() { close(released) }) }()
		if holding {
			<-released // the write is still gated: only scanHold can have released them
		}
		g.gate <- nil
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		select {
		case <-released:
			if !holding {
				t.Fatal("released iterators it did not hold")
			}
		default:
		}
		wr.Close(holding, nil)
	}
}
