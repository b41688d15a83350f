package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// TestQueuedPublishesWaitWhileTheGroupCommits: clients keep far more publishes in flight to
// one replicated topic than its leader commits within the quorum timeout (500 ms here), so
// the last of each window waits in the leader's queue for several timeouts. None of them
// fails for it: a publish fails with "did not commit" only when its group makes no progress
// for the quorum timeout, not when it waited that long behind others that commit. Every
// acknowledged publish is in the log at its offset, none twice; the test checks that the
// queue did grow past the timeout (else it proved nothing).
func TestQueuedPublishesWaitWhileTheGroupCommits(t *testing.T) {
	// A short quorum timeout, so that a queue of publishes waits longer than it on any
	// machine: a leader holding its group is progress, whatever the wait between applies.
	quorum := 500 * time.Millisecond
	window := 4096 // 8 clients sending a window each at once: 32,768 publishes of 512 bytes in flight
	if raceEnabled {
		// The race detector slows the nodes several times: a quarter of the load, and about the
		// time an election takes under it for the waits for a leader.
		quorum, window = 1500*time.Millisecond, 1024
	}
	m := newRegionMesh(t, []string{"eu"}, 3, func(cfg *Config) {
		cfg.Replicas = 3
		cfg.Raft = TestRaftSettings()
		cfg.Raft.TickInterval = 50 * time.Millisecond // the node's default: elections after 0.5-1 s
		cfg.Raft.QuorumTimeout = quorum
		cfg.Raft.BalanceInterval = -1 // leaders stay where elected
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, clients = "queue.t", 8
	setup := m.dial("eu-1")
	defer setup.Close()
	// Placed first (the region's first placement may take longer than a short quorum
	// timeout while its groups elect leaders: retried).
	for {
		_, err := setup.Publish(ctx, client.Message{Topic: topic, Payload: []byte("first")})
		var ce *client.Error
		if err == nil {
			break
		}
		if !errors.As(err, &ce) || ce.Code != client.CodeUnavailable || ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	payload := strings.Repeat("x", 512)
	var (
		mu         sync.Mutex
		acked      = map[uint64]string{}
		slowest    time.Duration // of the rounds without an election
		timedOut   []string      // failed for the quorum timeout, in rounds without an election
		ended      int           // unanswered because an earlier one ended the stream, likewise
		leaderMove int
		wg         sync.WaitGroup
	)
	// A machine faster than the load assumed drains the queue before the timeout: then the
	// load doubles (at most twice), so that the test proves what it says on any machine. A
	// round during which the group elected a leader (a busy machine starves heartbeats) proves
	// nothing either way: a publish may then rightly fail for the quorum timeout, as its group
	// made no progress. Such a round is counted and run again, at most elected times over.
	published, elected := 0, 0
	const maxElected = 3
	for round := 0; ; round++ {
		term := queueGroupTerm(ctx, t, m, topic)
		var (
			roundSlowest  time.Duration
			roundTimedOut []string
			roundEnded    int
		)
		// Every client of the round is dialled before any publishes, with a long timeout: a
		// handshake that waits behind the nodes' queue of publishes can take longer than
		// dialNode's 5 s under the race detector on a busy machine, which is not what this test
		// is about.
		conns := make([]*client.Conn, clients)
		for i := range conns {
			n := m.nodes[m.names[i%len(m.names)]]
			dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
			c, err := client.Dial(dctx, client.Options{CAFile: n.CAFile(), MaxPendingPublishes: window}, n.Addr().String())
			dcancel()
			if err != nil {
				t.Fatalf("round %d: dial %s: %v", round, n.Name(), err)
			}
			t.Cleanup(func() { c.Close() })
			conns[i] = c
		}
		for i, conn := range conns {
			wg.Go(func() {
				type pending struct {
					f    *client.Future
					at   time.Time
					body string
				}
				futs := make([]pending, 0, window)
				for k := range window {
					body := fmt.Sprintf("c%d-%d-%s", i, k, payload)
					f, err := conn.PublishAsync(ctx, client.Message{Topic: topic, Payload: []byte(body)})
					if err != nil {
						t.Errorf("client %d publish %d: %v", i, k, err)
						return
					}
					futs = append(futs, pending{f, time.Now(), body})
				}
				for _, p := range futs {
					ack, err := p.f.Wait(ctx)
					took := time.Since(p.at)
					mu.Lock()
					roundSlowest = max(roundSlowest, took)
					var ce *client.Error
					switch {
					case err != nil && (strings.Contains(err.Error(), "did not commit") || strings.Contains(err.Error(), "did not answer")):
						roundTimedOut = append(roundTimedOut, fmt.Sprintf("after %v: %v", took.Round(time.Millisecond), err))
					case err != nil && strings.Contains(err.Error(), "canceled by remote"):
						roundEnded++
					case errors.As(err, &ce) && ce.Code == client.CodeUnavailable:
						leaderMove++ // a leader change under the load: counted, not this test's concern
						if leaderMove == 1 {
							t.Logf("first refusal: %v", err)
						}
					case err != nil:
						t.Errorf("client %d: %v", i, err)
					case acked[ack.Offset] != "":
						t.Errorf("offset %d acknowledged twice", ack.Offset)
					default:
						acked[ack.Offset] = p.body
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		published += clients * window
		if after := queueGroupTerm(ctx, t, m, topic); after != term {
			elected++
			t.Logf("round %d: the group elected a leader (term %d to %d); its %d publishes failed for the quorum timeout and %d left unanswered are the election's, not the queue's: the round again (%d of %d)",
				round, term, after, len(roundTimedOut), roundEnded, elected, maxElected)
			if elected == maxElected {
				t.Skipf("every one of %d rounds saw an election (the machine starves the leader's heartbeats): nothing shown about queued publishes", elected)
			}
			continue
		}
		slowest = max(slowest, roundSlowest)
		timedOut = append(timedOut, roundTimedOut...)
		ended += roundEnded
		if slowest >= quorum || len(timedOut) > 0 || ended > 0 || round-elected == 2 {
			break
		}
		t.Logf("round %d: the slowest of %d publishes took %v, under the quorum timeout (%v): again with twice the load", round, clients*window, slowest.Round(time.Millisecond), quorum)
		window *= 2
	}
	t.Logf("%d of %d publishes acknowledged, the slowest after %v (quorum timeout %v); %d refused by a leader change",
		len(acked), published, slowest.Round(time.Millisecond), quorum, leaderMove)
	if len(timedOut) > 0 {
		t.Fatalf("%d publishes failed for the quorum timeout while their group committed the others, %d more left unanswered on the streams that ended; first: %s",
			len(timedOut), ended, timedOut[0])
	}
	if ended > 0 {
		t.Fatalf("%d publishes left unanswered on streams that ended", ended)
	}
	if slowest < quorum {
		t.Fatalf("the slowest publish took %v: the queue never grew past the quorum timeout (%v), so the test proved nothing", slowest, quorum)
	}
	if leaderMove > published/4 {
		t.Fatalf("%d of %d publishes refused by leader changes", leaderMove, published)
	}
	want := 0
	for _, n := range m.all() {
		_, next, _ := n.Log().Bounds(topic)
		want = max(want, int(next))
	}
	recs := checkIdentical(t, m.all(), topic, want)
	for off, body := range acked {
		if off >= uint64(len(recs)) || string(recs[off].Payload) != body {
			t.Fatalf("publish acknowledged at offset %d is not in the log there (%d records)", off, len(recs))
		}
	}
}

// queueGroupTerm is the highest raft term any replica of topic's group knows.
func queueGroupTerm(ctx context.Context, t *testing.T, m *regionMesh, topic string) uint64 {
	t.Helper()
	var term uint64
	for _, n := range m.all() {
		g := n.rep.groupOf(topic)
		if g == 0 {
			continue
		}
		st, err := n.rep.d.Status(ctx, g)
		if err != nil {
			t.Fatalf("status of %s's group %d on %s: %v", topic, g, n.Name(), err)
		}
		term = max(term, st.GetTerm())
	}
	return term
}
