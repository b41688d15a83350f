package node

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// pipeLoad publishes pipelined (PublishAsync, a window of unanswered publishes on one
// stream) round-robin over topics, each record's payload its topic's sequence number, and
// never publishes anything again: every error a client sees is kept.
type pipeLoad struct {
	topics int
	stop   context.CancelFunc
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		acked []map[uint64]uint64 // per topic: sequence -> offset
		sent  []uint64            // per topic: publishes sent
		errs  []string
		total int
	}
}

func startPipeLoad(t *testing.T, c *client.Conn, prefix string, topics, rate int) *pipeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &pipeLoad{topics: topics, stop: cancel}
	l.mu.acked = make([]map[uint64]uint64, topics)
	l.mu.sent = make([]uint64, topics)
	for i := range l.mu.acked {
		l.mu.acked[i] = map[uint64]uint64{}
	}
	type pending struct {
		f     *client.Future
		topic int
		seq   uint64
	}
	futs := make(chan pending, 4096)
	l.wg.Go(func() {
		for p := range futs {
			wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
			ack, err := p.f.Wait(wctx)
			wcancel()
			l.mu.Lock()
			if err != nil {
				l.mu.errs = append(l.mu.errs, fmt.Sprintf("%s.%d seq %d: %v", prefix, p.topic, p.seq, err))
			} else if _, dup := l.mu.acked[p.topic][p.seq]; dup || ack.Duplicate {
				l.mu.errs = append(l.mu.errs, fmt.Sprintf("%s.%d seq %d acknowledged twice", prefix, p.topic, p.seq))
			} else {
				l.mu.acked[p.topic][p.seq] = ack.Offset
				l.mu.total++
			}
			l.mu.Unlock()
		}
	})
	l.wg.Go(func() {
		defer close(futs)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for range max(1, rate/100) {
				i := n % topics
				n++
				l.mu.Lock()
				l.mu.sent[i]++
				seq := l.mu.sent[i]
				l.mu.Unlock()
				f, err := c.PublishAsync(context.Background(), client.Message{Topic: fmt.Sprintf("%s.%d", prefix, i),
					Payload: []byte(strconv.FormatUint(seq, 10)), ProducerID: "pipe-" + strconv.Itoa(i), Sequence: seq})
				if err != nil {
					l.mu.Lock()
					l.mu.errs = append(l.mu.errs, fmt.Sprintf("%s.%d seq %d: %v", prefix, i, seq, err))
					l.mu.Unlock()
					continue
				}
				futs <- pending{f, i, seq}
			}
		}
	})
	t.Cleanup(func() { cancel(); l.wg.Wait() })
	return l
}

func (l *pipeLoad) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.total
}

// waitMore waits for n more acknowledgements, failing at once on any error a client saw.
func (l *pipeLoad) waitMore(t *testing.T, n int) {
	t.Helper()
	from := l.acked()
	testlog.WaitFor(t, 30*time.Second, fmt.Sprintf("%d more pipelined publishes acknowledged", n), func() bool {
		l.mu.Lock()
		errs := l.mu.errs
		l.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("%d publishes not acknowledged (no publish may be refused across a leadership move): %s", len(errs), errKinds(errs))
		}
		return l.acked() >= from+n
	})
}

// TestDrainUnderPipelinedPublishingRefusesNothing: every node of a region is drained in
// turn (each of its leaderships handed over) and undrained (the balancer hands leaderships
// back) while a client publishes pipelined into many topics through one node: every
// publish is acknowledged, once, none refused or of unknown outcome, and every topic's log
// holds the records in the order they were sent, at dense offsets identical on every
// replica.
func TestDrainUnderPipelinedPublishingRefusesNothing(t *testing.T) {
	m := newDrainMesh(t, 200*time.Millisecond)
	c := dialNode(t, m.nodes["eu-3"], client.Options{})
	defer c.Close()
	const topics = 24
	load := startPipeLoad(t, c, "pipe", topics, 1500)
	load.waitMore(t, 500)
	for round, name := range []string{"eu-1", "eu-2", "eu-3", "eu-1"} {
		testlog.WaitFor(t, 20*time.Second, name+" to lead some groups", func() bool { return m.leads()[name] > 0 })
		if code, body := m.post("eu-2", "/v1/nodes/"+name+"/drain"); code != http.StatusOK {
			t.Fatalf("drain %s: %d %s", name, code, body)
		}
		other := "eu-2"
		if name == other {
			other = "eu-1"
		}
		testlog.WaitFor(t, 20*time.Second, name+" drained and leading nothing", func() bool {
			return m.nodes[name].rep.reloc.Drained(name) && m.leads()[name] == 0 && m.allLedBut(other, name)
		})
		load.waitMore(t, 300)
		if code, body := m.post("eu-1", "/v1/nodes/"+name+"/undrain"); code != http.StatusOK {
			t.Fatalf("undrain %s: %d %s", name, code, body)
		}
		testlog.WaitFor(t, 20*time.Second, name+" undrained and leading again", func() bool {
			return !m.nodes[name].rep.reloc.Drained(name) && m.leads()[name] > 0
		})
		load.waitMore(t, 300)
		t.Logf("round %d (%s): %d publishes acknowledged so far", round, name, load.acked())
	}
	load.stop()
	load.wg.Wait()
	load.mu.Lock()
	defer load.mu.Unlock()
	if len(load.mu.errs) > 0 {
		t.Fatalf("%d publishes not acknowledged: %s", len(load.mu.errs), errKinds(load.mu.errs))
	}
	for i := range topics {
		topic := fmt.Sprintf("pipe.%d", i)
		sent := load.mu.sent[i]
		if got := uint64(len(load.mu.acked[i])); got != sent {
			t.Fatalf("%s: %d sent, %d acknowledged", topic, sent, got)
		}
		recs := checkIdentical(t, m.all(), topic, int(sent))
		for off, r := range recs {
			seq, _ := strconv.ParseUint(string(r.Payload), 10, 64)
			if want := uint64(off) + 1; seq != want {
				t.Fatalf("%s: offset %d holds sequence %q, want %d: lost, duplicated or reordered", topic, off, r.Payload, want)
			}
			if load.mu.acked[i][seq] != uint64(off) {
				t.Fatalf("%s: sequence %d acknowledged at offset %d, stored at %d", topic, seq, load.mu.acked[i][seq], off)
			}
		}
	}
	rerouted := 0.0
	for _, n := range m.all() {
		rerouted += testutil.ToFloat64(n.rep.rerouted)
	}
	t.Logf("%d pipelined publishes into %d topics, each acknowledged once, none refused; %v routed again by a node after a leadership move refused them",
		load.mu.total, topics, rerouted)
}

// errKinds lists the distinct errors of errs (the topic and sequence left out), with counts.
func errKinds(errs []string) string {
	kinds := map[string]int{}
	for _, e := range errs {
		_, rest, _ := strings.Cut(e, ": ")
		kinds[rest]++
	}
	var b strings.Builder
	for k, n := range kinds {
		fmt.Fprintf(&b, "\n  %dx %s", n, k)
	}
	return b.String()
}
