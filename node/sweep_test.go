package node

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// appendOne appends one record to each of the topics through the node's log and waits
// until all are durable.
func appendOne(t *testing.T, n *Node, topics []string, payload func(string) string) {
	t.Helper()
	done := make(chan error, len(topics))
	for _, tp := range topics {
		n.Log().AppendAsync(wal.AppendRequest{Topic: tp, Records: []wal.Record{{Payload: []byte(payload(tp))}}},
			func(r wal.AppendResult) { done <- r.Err })
	}
	for range topics {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// topicReader is readRecords over several calls on one stream: it keeps the TOPIC frames'
// names from call to call.
type topicReader struct {
	s     *rawStream
	names map[uint64]string
}

func newTopicReader(s *rawStream) *topicReader {
	return &topicReader{s: s, names: map[uint64]string{}}
}

// read reads count RECORDs as "topic@offset=payload".
func (r *topicReader) read(t *testing.T, count int) []string {
	t.Helper()
	var out []string
	for len(out) < count {
		switch f := r.s.next().(type) {
		case *wire.Topic:
			r.names[f.Index] = f.Name
		case *wire.Record:
			name, ok := r.names[f.Index]
			if !ok {
				t.Fatalf("RECORD with unbound index %d", f.Index)
			}
			out = append(out, fmt.Sprintf("%s@%d=%s", name, f.Offset, f.Payload))
		case *wire.Gap:
			t.Fatalf("GAP %d-%d of index %d", f.From, f.To, f.Index)
		case *wire.ErrorFrame:
			t.Fatalf("subscription error: %v", f.AsError())
		}
	}
	return out
}

func tailsHeld(n *Node) int {
	return n.tails.Topics()
}

// A wildcard over many idle topics holds nothing per topic (issue 35): no cursor, shared
// tail, log watcher or goroutine per matching topic, from latest or once it has read them
// all from earliest; a publish to one of them reaches it, and costs one cursor.
func TestWildcardOverIdleTopicsHoldsNothingPerTopic(t *testing.T) {
	const topics = 2000
	n := newTestNode(t)
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("idle.%d", i)
	}
	appendOne(t, n, names, func(tp string) string { return tp })
	rc := mustDial(t, n)
	goroutines := runtime.NumGoroutine()

	live := subscribe(t, rc, &wire.Subscribe{Pattern: "idle.>", Start: wire.StartLatest})
	if got := n.wild.Cursors(); got != 0 {
		t.Fatalf("a live wildcard over %d idle topics made %d cursors, want 0", topics, got)
	}
	if got := tailsHeld(n); got != 0 {
		t.Fatalf("a live wildcard over %d idle topics holds %d shared tails, want 0", topics, got)
	}

	all := newTopicReader(subscribe(t, rc, &wire.Subscribe{Pattern: "idle.>", Start: wire.StartEarliest}))
	seen := map[string]bool{}
	for _, r := range all.read(t, topics) {
		if seen[r] {
			t.Fatalf("%s delivered twice", r)
		}
		seen[r] = true
	}
	if got := tailsHeld(n); got != 0 {
		t.Fatalf("a wildcard that read %d topics holds %d shared tails, want 0", topics, got)
	}
	if got := runtime.NumGoroutine() - goroutines; got > 20 {
		t.Fatalf("two wildcard subscriptions over %d topics added %d goroutines", topics, got)
	}
	publishN(t, rc, "idle.7", 0, 1)
	if got := readRecords(t, live, 1)[0]; got != "idle.7@1=m0" { // its first TOPIC frame
		t.Fatalf("live wildcard got %s, want idle.7@1=m0", got)
	}
	if got := all.read(t, 1)[0]; got != "idle.7@1=m0" {
		t.Fatalf("earliest wildcard got %s, want idle.7@1=m0", got)
	}
	// The live one made one cursor (idle.7), the other one per topic it read.
	if got := n.wild.Cursors(); got != topics+1 {
		t.Fatalf("cursors: %d, want %d", got, topics+1)
	}
}

// Records published at random to old and new topics while wildcard subscriptions start
// from earliest, from latest and at an offset reach each in every topic's order, each
// once, and a latest one gets exactly what was published after its set-up.
func TestWildcardSweepRandomSchedule(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.ReadAhead = 4 << 10 }) // many batches
	rnd := testlog.Rand(t, "publishes")
	rc := mustDial(t, n)
	const total = 1200
	published := map[string]int{}
	publish := func(k int) {
		for range k {
			tp := fmt.Sprintf("r.%d.x", rnd.IntN(300))
			published[tp]++
			publishN(t, rc, tp, published[tp]-1, 1)
		}
	}
	publish(total / 3)
	early := subscribe(t, rc, &wire.Subscribe{Pattern: "r.*.x", Start: wire.StartEarliest})
	before := map[string]int{}
	for tp, c := range published {
		before[tp] = c
	}
	late := subscribe(t, rc, &wire.Subscribe{Pattern: "r.>", Start: wire.StartLatest})
	publish(total - total/3)

	check := func(name string, s *rawStream, from func(string) int) {
		t.Helper()
		want := 0
		for tp, c := range published {
			want += c - from(tp)
		}
		next := map[string]int{}
		for _, r := range readRecords(t, s, want) {
			var off, m int
			at := 0
			for i := range r {
				if r[i] == '@' {
					at = i
				}
			}
			tp := r[:at]
			if _, err := fmt.Sscanf(r[at:], "@%d=m%d", &off, &m); err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			if _, ok := next[tp]; !ok {
				next[tp] = from(tp)
			}
			if off != next[tp] || m != off {
				t.Fatalf("%s: %s, want offset %d of %s", name, r, next[tp], tp)
			}
			next[tp]++
		}
	}
	check("earliest", early, func(string) int { return 0 })
	check("latest", late, func(tp string) int { return before[tp] })
}

// A durable wildcard consumer over many topics resumes exactly after a restart of its node:
// what it acknowledged is not sent again, the rest is, and a topic with nothing new costs
// it no cursor.
func TestWildcardDurableResumesAfterRestart(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "n1", Region: "test", Logger: testLogger(t)}
	n, stop := startStoppable(t, cfg)
	const topics = 500
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("dw.%d", i)
	}
	appendOne(t, n, names, func(string) string { return "m0" })
	appendOne(t, n, names[:topics/2], func(string) string { return "m1" })

	rc := mustDial(t, n)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "dw.>", Durable: "d"})
	index := map[uint64]string{}
	got := 0
	for got < topics+topics/2 {
		switch f := s.next().(type) {
		case *wire.Topic:
			index[f.Index] = f.Name
		case *wire.Record:
			got++
			// Acknowledge everything but the second record of dw.0 .. dw.9.
			var i int
			fmt.Sscanf(index[f.Index], "dw.%d", &i)
			if f.Offset == 0 || i >= 10 {
				s.send(&wire.Ack{Index: f.Index, Offset: f.Offset})
			}
		case *wire.ErrorFrame:
			t.Fatal(f.AsError())
		}
	}
	s.str.Close()
	for { // the node's FIN: every ACK is stored
		if _, err := s.read(10 * time.Second); err != nil {
			if err != io.EOF {
				t.Fatalf("first subscription: %v, want the node's FIN", err)
			}
			break
		}
	}
	stop()

	n = startNode(t, cfg)
	rc = mustDial(t, n)
	s = subscribe(t, rc, &wire.Subscribe{Pattern: "dw.>", Durable: "d"})
	want := map[string]bool{}
	for i := range 10 {
		want[fmt.Sprintf("dw.%d@1=m1", i)] = true
	}
	for _, r := range readRecords(t, s, 10) {
		if !want[r] {
			t.Fatalf("resumed with %s, want only the second records of dw.0 .. dw.9", r)
		}
		delete(want, r)
	}
	if got := n.wild.Cursors(); got != 10 {
		t.Fatalf("the resumed durable made %d cursors, want 10 (the topics with records to read)", got)
	}
	publishN(t, rc, "dw.400", 0, 1)
	if got := readRecords(t, s, 1)[0]; got != "dw.400@1=m0" {
		t.Fatalf("after the resume: %s, want dw.400@1=m0", got)
	}
}

// A durable wildcard behind a purge gets a GAP for the records it had not reached, then
// goes on.
func TestWildcardSweepGap(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "gp.a", 0, 5)
	publishN(t, rc, "gp.b", 0, 1)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "gp.*", Durable: "g"})
	readRecords(t, s, 6)
	// gp.a is index 0 (its ID is the lower: it is read first), gp.b index 1.
	s.send(&wire.Ack{Index: 0, Offset: 1}, &wire.Ack{Index: 1, Offset: 0})
	s.str.Close()
	for {
		if _, err := s.read(10 * time.Second); err != nil {
			break
		}
	}
	if _, err := n.Log().PurgeTopic(context.Background(), "gp.a"); err != nil {
		t.Fatal(err)
	}
	publishN(t, rc, "gp.a", 0, 1)
	s = subscribe(t, rc, &wire.Subscribe{Pattern: "gp.*", Durable: "g"})
	r := newTopicReader(s)
	var gap *wire.Gap
	for gap == nil {
		switch f := s.next().(type) {
		case *wire.Topic:
			r.names[f.Index] = f.Name
		case *wire.Gap:
			gap = f
		case *wire.Record:
			t.Fatalf("record at %d before the GAP", f.Offset)
		}
	}
	if gap.From != 2 || gap.To != 5 {
		t.Fatalf("GAP %d-%d, want 2-5", gap.From, gap.To)
	}
	if got := r.read(t, 1)[0]; got != "gp.a@5=m0" {
		t.Fatalf("after the GAP: %s, want gp.a@5=m0", got)
	}
}

// A wildcard from latest set up while records are appended at random to many topics gets,
// of each topic, a dense run of offsets up to its head: nothing acknowledged before the
// SUBSCRIBE was sent, everything appended after SUBSCRIBED came, and no hole between (the
// listing at set-up and the advances the subscription is told of neither overlap nor leave
// a gap).
func TestWildcardLatestSetUpRacesAppends(t *testing.T) {
	n := newTestNode(t)
	rnd := testlog.Rand(t, "appends")
	const topics = 200
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("race.%d", i)
	}
	appendOne(t, n, names, func(string) string { return "m" })
	rc := mustDial(t, n)

	var mu sync.Mutex
	acked := map[string][]uint64{} // offsets, in the order their appends were acknowledged
	// firstAfter: of each topic, the first offset whose append began after SUBSCRIBED came
	// (an append acknowledged before then but noted here after it may rightly be left out,
	// so what is judged is when the append began).
	firstAfter := map[string]uint64{}
	var subscribed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		seed := rnd.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				tp := names[r.IntN(topics)]
				began := subscribed.Load()
				res := n.Log().Append(context.Background(), wal.AppendRequest{Topic: tp, Records: []wal.Record{{Payload: []byte("m")}}})
				if res.Err != nil {
					t.Error(res.Err)
					return
				}
				mu.Lock()
				acked[tp] = append(acked[tp], res.First)
				if _, ok := firstAfter[tp]; began && !ok {
					firstAfter[tp] = res.First
				}
				mu.Unlock()
			}
		}()
	}
	testlog.WaitFor(t, 10*time.Second, "appends", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > topics/2 })
	mu.Lock()
	before := map[string]uint64{} // 1 + the highest offset acknowledged before the SUBSCRIBE
	for tp, offs := range acked {
		before[tp] = offs[len(offs)-1] + 1
	}
	mu.Unlock()
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "race.>", Start: wire.StartLatest})
	subscribed.Store(true)
	testlog.WaitFor(t, 10*time.Second, "appends after the set-up", func() bool {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, offs := range acked {
			k += len(offs)
		}
		return k > 2000
	})
	close(stop)
	wg.Wait()
	appendOne(t, n, names, func(string) string { return "fence" }) // every topic has a record after the set-up
	heads := map[string]uint64{}
	want := 0
	for _, tp := range names {
		_, heads[tp], _ = n.Log().Bounds(tp)
	}
	// Read until every topic reached its head: a topic's first delivered offset is not known
	// in advance (records appended during the set-up may or may not come), so read what comes
	// and check it.
	got := map[string][]uint64{}
	r := newTopicReader(s)
	done := func() bool {
		for _, tp := range names {
			offs := got[tp]
			if len(offs) == 0 || offs[len(offs)-1]+1 != heads[tp] {
				return false
			}
		}
		return true
	}
	for !done() {
		rec := r.read(t, 1)[0]
		var off uint64
		at := strings.LastIndexByte(rec, '@')
		tp := rec[:at]
		if _, err := fmt.Sscanf(rec[at:], "@%d=", &off); err != nil {
			t.Fatalf("%s: %v", rec, err)
		}
		if prev := got[tp]; len(prev) > 0 && prev[len(prev)-1]+1 != off {
			t.Fatalf("%s: offset %d after %d: a hole or a repeat", tp, off, prev[len(prev)-1])
		}
		if off < before[tp] {
			t.Fatalf("%s: offset %d was acknowledged before the SUBSCRIBE was sent (up to %d)", tp, off, before[tp]-1)
		}
		got[tp] = append(got[tp], off)
		want++
	}
	for tp, off := range firstAfter {
		if got[tp][0] > off {
			t.Fatalf("%s: offset %d, appended after SUBSCRIBED came, was not delivered (the first was %d)", tp, off, got[tp][0])
		}
	}
	t.Logf("%d records of %d topics after the set-up", want, len(got))
}

// Under a live wildcard, a purge of a quiet topic costs it nothing (no cursor) and the topic
// goes on at its next offset; a delete of a topic it has read ends it with CodeTopicDeleted,
// as for a subscription with a cursor per topic.
func TestWildcardSweepPurgeAndDelete(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "pd.quiet", 0, 3)
	publishN(t, rc, "pd.read", 0, 1)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "pd.*", Start: wire.StartLatest})
	r := newTopicReader(s)
	ctx := context.Background()
	if _, err := n.Log().PurgeTopic(ctx, "pd.quiet"); err != nil {
		t.Fatal(err)
	}
	publishN(t, rc, "pd.read", 1, 1)
	if got := r.read(t, 1)[0]; got != "pd.read@1=m1" {
		t.Fatalf("got %s, want pd.read@1=m1", got)
	}
	if got := n.wild.Cursors(); got != 1 {
		t.Fatalf("cursors after a purge of a quiet topic: %d, want 1 (pd.read)", got)
	}
	publishN(t, rc, "pd.quiet", 3, 1)
	if got := r.read(t, 1)[0]; got != "pd.quiet@3=m3" {
		t.Fatalf("got %s, want pd.quiet@3=m3", got)
	}
	if _, err := n.Log().DeleteTopic(ctx, "pd.read"); err != nil {
		t.Fatal(err)
	}
	if e := s.expectError(); e.Code != wire.CodeTopicDeleted {
		t.Fatalf("after the delete of a topic it read: %v, want CodeTopicDeleted", e)
	}
}

// A wildcard over topics with nothing to read from its start (from latest) says CAUGHT_UP
// at once when asked to: its set-up made no cursor, so there is nothing to wait for.
func TestWildcardNothingToReadIsCaughtUpAtOnce(t *testing.T) {
	n := newTestNode(t)
	names := make([]string, 50)
	for i := range names {
		names[i] = fmt.Sprintf("calm.%d", i)
	}
	appendOne(t, n, names, func(tp string) string { return tp })
	rc := mustDial(t, n)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "calm.>", Start: wire.StartLatest, Flags: wire.SubscribeCaughtUp})
	cu, ok := s.next().(*wire.CaughtUp)
	if !ok {
		t.Fatalf("a wildcard from latest over %d idle topics: got %T, want CAUGHT_UP", len(names), cu)
	}
	if cu.Topics != uint64(len(names)) {
		t.Fatalf("CAUGHT_UP of %d topics, want %d", cu.Topics, len(names))
	}
	publishN(t, rc, "calm.3", 0, 1)
	if got := readRecords(t, s, 1)[0]; got != "calm.3@1=m0" {
		t.Fatalf("got %s, want calm.3@1=m0", got)
	}
}
