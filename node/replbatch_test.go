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
			var mu sync.Mutex
			acked := map[string]map[uint64]string{} // topic -> offset -> payload
			unavailable, sent := 0, 0
			var wg sync.WaitGroup
			for i := range clients {
				conn := m.dial(m.names[i%len(m.names)])
				defer conn.Close()
				wg.Go(func() {
					n := topics * c.perTopic
					futs := make([]*client.Future, 0, n)
					msgs := make([]client.Message, 0, n)
					for k := range n {
						msg := client.Message{Topic: fmt.Sprintf("bat.%d", (k+i*topics/clients)%topics), Payload: fmt.Appendf(nil, "c%d-%d", i, k)}
						f, err := conn.PublishAsync(ctx, msg)
						if err != nil {
							t.Errorf("client %d publish %d: %v", i, k, err)
							return
						}
						futs, msgs = append(futs, f), append(msgs, msg)
					}
					for k, f := range futs {
						ack, err := f.Wait(ctx)
						mu.Lock()
						sent++
						var ce *client.Error
						switch {
						case errors.As(err, &ce) && ce.Code == client.CodeUnavailable:
							unavailable++
						case err != nil:
							t.Errorf("client %d publish %d to %s: %v", i, k, msgs[k].Topic, err)
						case acked[msgs[k].Topic][ack.Offset] != "":
							t.Errorf("%s: offset %d acknowledged twice", msgs[k].Topic, ack.Offset)
						default:
							if acked[msgs[k].Topic] == nil {
								acked[msgs[k].Topic] = map[uint64]string{}
							}
							acked[msgs[k].Topic][ack.Offset] = string(msgs[k].Payload)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			t.Logf("%d publishes, %d refused or unanswered while a leader moved", sent, unavailable)
			if unavailable > sent/4 {
				t.Fatalf("%d of %d publishes unavailable", unavailable, sent)
			}
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
