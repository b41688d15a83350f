package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/clienthook"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/features"
)

// TestPublishMultiRegion: SDK clients on every node of a region publish, pipelined, over many
// topics in turn, so that their publishes arrive in PUBLISH_MULTI frames (one client says
// version 4 and sends PUBLISH_BATCH) and are relayed to each topic's owner or leader, as
// PUBLISH_MULTI to a node that announces publishmulti and as PUBLISH_BATCH to one that does
// not. Every topic's log is dense (identical on the replicas), every acknowledged publish is
// at its offset, and each client's records of a topic are in the order it sent them. A
// leader that moves under the load refuses or leaves unanswered the publishes in flight
// (Unavailable): counted, not retried, and they must stay few.
func TestPublishMultiRegion(t *testing.T) {
	for _, c := range []struct {
		name     string
		replicas int
		older    string // a node announcing no features
	}{{"replicated", 3, ""}, {"single-copy-older-node", 0, "eu-3"}} {
		t.Run(c.name, func(t *testing.T) {
			m := newRegionMesh(t, []string{"eu"}, 3, func(cfg *Config) {
				cfg.Replicas = c.replicas
				cfg.Raft.BalanceInterval = -1
				cfg.noFeatures = cfg.Name == c.older
			})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			const topics, clients, perTopic = 40, 3, 8
			setup := m.dial("eu-1")
			defer setup.Close()
			publishTopics(ctx, t, setup, "pm", topics) // placed, so the feature checks have run
			waitMultiFeatures(t, m, c.older)
			tally := newPipeTally()
			var wg sync.WaitGroup
			for i := range clients {
				opts := client.Options{}
				if i == 2 {
					opts = clienthook.OfferVersion(opts, 4).(client.Options) // an older client
				}
				conn := dialNode(t, m.nodes[m.names[i%len(m.names)]], opts)
				wg.Go(func() {
					msgs := make([]client.Message, topics*perTopic)
					for k := range msgs {
						msgs[k] = client.Message{Topic: fmt.Sprintf("pm.%d", (k+i*7)%topics), Payload: fmt.Appendf(nil, "c%d-%04d", i, k)}
					}
					tally.publish(ctx, t, conn, i, msgs)
				})
			}
			wg.Wait()
			acked, unavailable := tally.check(t)
			for i := range topics {
				topic := fmt.Sprintf("pm.%d", i)
				var recs []string
				if c.replicas > 0 {
					want := 1 + clients*perTopic
					if unavailable > 0 {
						want = 0
						for _, n := range m.all() {
							_, next, _ := n.Log().Bounds(topic)
							want = max(want, int(next))
						}
					}
					for _, r := range checkIdentical(t, m.all(), topic, want) {
						recs = append(recs, string(r.Payload))
					}
				} else {
					for _, n := range m.all() {
						if _, next, ok := n.Log().Bounds(topic); ok && next > 0 {
							got := strings.Fields(strings.Trim(payloadsOf(t, n, topic), "[]"))
							recs = append(recs, got...)
						}
					}
				}
				for off, payload := range acked[topic] {
					if off >= uint64(len(recs)) || recs[off] != payload {
						t.Fatalf("%s: %q acknowledged at offset %d, not in the log there (%d records)", topic, payload, off, len(recs))
					}
				}
				last := map[string]string{} // per client, its last record of the topic
				for _, p := range recs {
					cl, _, _ := strings.Cut(p, "-")
					if p <= last[cl] {
						t.Fatalf("%s: %s after %s: a client's records out of order", topic, p, last[cl])
					}
					last[cl] = p
				}
			}
		})
	}
}

// waitMultiFeatures waits until every node but older takes every other but older to read
// PUBLISH_MULTI on a relay (gossip carries the features), then checks that none takes older
// to.
func waitMultiFeatures(t *testing.T, m *regionMesh, older string) {
	t.Helper()
	for _, n := range m.all() {
		if n.Name() == older {
			continue // knows no features: relays PUBLISH_BATCH to every node
		}
		for _, peer := range m.names {
			if peer == n.Name() || peer == older {
				continue
			}
			testlog.WaitFor(t, 15*time.Second, n.Name()+" takes "+peer+" to read PUBLISH_MULTI", func() bool {
				return n.peerKnows(peer, features.PublishMulti, 1)
			})
		}
		if older != "" && n.peerKnows(older, features.PublishMulti, 1) {
			t.Fatalf("%s takes %s, which announces no features, to read PUBLISH_MULTI", n.Name(), older)
		}
	}
}
