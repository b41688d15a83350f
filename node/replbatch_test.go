package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// TestPublishesShareRaftEntries: clients on every node of a replicated region publish,
// pipelined, to 60 topics in turn, so that a round of a group's leader takes publishes to
// many of its topics. Each topic's log is dense and identical on the three replicas, every
// acknowledged publish is in it at its offset with its payload, no offset is acknowledged
// twice; the leaders put the publishes into shared raft entries (replica/batch.go) once
// every node announces that it reads them, and never while one node (of an older build)
// does not. A leader that moves under the load refuses or leaves unanswered the publishes
// in flight (Unavailable): those are counted, not retried, and must stay few.
func TestPublishesShareRaftEntries(t *testing.T) {
	for _, c := range []struct {
		name     string
		older    string // a node announcing no features
		batched  bool
		perTopic int // publishes to each topic from each client
	}{{"every-node-reads-batches", "", true, 20}, {"older-node", "eu-3", false, 5}} {
		t.Run(c.name, func(t *testing.T) {
			m := newRegionMesh(t, []string{"eu"}, 3, func(cfg *Config) {
				cfg.Replicas = 3
				cfg.Raft.BalanceInterval = -1 // leaders stay where elected: the test is about entries
				cfg.noFeatures = cfg.Name == c.older
			})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			const topics, clients = 60, 4
			// Placed first, so that the publishes below are to known topics and the feature
			// check has run (it runs with the first publishes).
			setup := m.dial("eu-1")
			defer setup.Close()
			publishTopics(ctx, t, setup, "bat", topics)
			tally := newPipeTally()
			var wg sync.WaitGroup
			for i := range clients {
				conn := m.dial(m.names[i%len(m.names)])
				defer conn.Close()
				wg.Go(func() {
					msgs := make([]client.Message, topics*c.perTopic)
					for k := range msgs {
						msgs[k] = client.Message{Topic: fmt.Sprintf("bat.%d", (k+i*topics/clients)%topics), Payload: fmt.Appendf(nil, "c%d-%d", i, k)}
					}
					tally.publish(ctx, t, conn, i, msgs)
				})
			}
			wg.Wait()
			acked, unavailable := tally.check(t)
			for _, topic := range []string{"bat.0", "bat.31", "bat.59"} {
				want := 1 + clients*c.perTopic // the placing publish, then every client's
				// Some outcomes unknown: as many as the furthest replica holds.
				if unavailable > 0 {
					want = 0
					for _, n := range m.all() {
						_, next, _ := n.Log().Bounds(topic)
						want = max(want, int(next))
					}
				}
				recs := checkIdentical(t, m.all(), topic, want) // dense, the same on every replica
				for off, payload := range acked[topic] {
					if off >= uint64(len(recs)) || string(recs[off].Payload) != payload {
						t.Fatalf("%s: %q acknowledged at offset %d, not in the log there (%d records)", topic, payload, off, len(recs))
					}
				}
			}
			var batched, props uint64
			for _, n := range m.all() {
				st, err := n.rep.d.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				batched, props = batched+st.Batched, props+st.BatchedProps
			}
			t.Logf("%d shared entries carried %d proposals", batched, props)
			if c.batched && batched == 0 {
				t.Fatal("no leader put publishes to several topics into one raft entry")
			}
			if !c.batched && batched > 0 {
				t.Fatalf("%d shared entries while %s, which does not read them, is a replica", batched, c.older)
			}
		})
	}
}

// pipeTally keeps what pipelined publishes over many topics were answered, for the tests
// that publish from several clients at once and then read every topic's log: each topic's
// acknowledged offsets with their payloads, and how many were answered Unavailable (a
// leader moved under the load: counted, not retried).
type pipeTally struct {
	mu                sync.Mutex
	acked             map[string]map[uint64]string // topic -> offset -> payload
	sent, unavailable int
}

func newPipeTally() *pipeTally { return &pipeTally{acked: map[string]map[uint64]string{}} }

// publish sends msgs pipelined on conn (client number i), then waits for every answer.
func (p *pipeTally) publish(ctx context.Context, t *testing.T, conn *client.Conn, i int, msgs []client.Message) {
	futs := make([]*client.Future, 0, len(msgs))
	for k, msg := range msgs {
		f, err := conn.PublishAsync(ctx, msg)
		if err != nil {
			t.Errorf("client %d publish %d: %v", i, k, err)
			return
		}
		futs = append(futs, f)
	}
	for k, f := range futs {
		ack, err := f.Wait(ctx)
		topic := msgs[k].Topic
		p.mu.Lock()
		p.sent++
		var ce *client.Error
		switch {
		case errors.As(err, &ce) && ce.Code == client.CodeUnavailable:
			p.unavailable++
		case err != nil:
			t.Errorf("client %d publish %d to %s: %v", i, k, topic, err)
		case p.acked[topic][ack.Offset] != "":
			t.Errorf("%s: offset %d acknowledged twice", topic, ack.Offset)
		default:
			if p.acked[topic] == nil {
				p.acked[topic] = map[uint64]string{}
			}
			p.acked[topic][ack.Offset] = string(msgs[k].Payload)
		}
		p.mu.Unlock()
	}
}

// check fails the test when more than a quarter of the publishes were unavailable, and
// returns what was acknowledged and how many were not, once every publish is answered.
func (p *pipeTally) check(t *testing.T) (acked map[string]map[uint64]string, unavailable int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("%d publishes, %d refused or unanswered while a leader moved", p.sent, p.unavailable)
	if p.unavailable > p.sent/4 {
		t.Fatalf("%d of %d publishes unavailable", p.unavailable, p.sent)
	}
	return p.acked, p.unavailable
}
