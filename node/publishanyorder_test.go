package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/clienthook"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/features"
)

// holdTopic is a node's holdAppend for one topic: the answers of its appends wait until
// release; appended receives every other topic's completed append.
type holdTopic struct {
	topic    string
	release  chan struct{}
	once     sync.Once
	let      func()        // closes release, once
	held     chan struct{} // closed when the held topic's first append completed
	appended chan string
}

func newHoldTopic(topic string) *holdTopic {
	h := &holdTopic{topic: topic, release: make(chan struct{}), held: make(chan struct{}), appended: make(chan string, 1024)}
	h.let = sync.OnceFunc(func() { close(h.release) })
	return h
}

func (h *holdTopic) hold(topic string) <-chan struct{} {
	if topic == h.topic {
		h.once.Do(func() { close(h.held) })
		return h.release
	}
	h.appended <- topic
	return nil
}

// A client of protocol version 4 asks for answers in any order (PUBLISH_OPEN): while one
// topic's append is held (its group stalled), the publishes to other topics sent after it on
// the same stream are answered. A client of version 3 gets them in order, behind the held
// one, as before.
func TestAnyOrderAnswersPassAStalledTopic(t *testing.T) {
	for _, v := range []uint64{4, 3} {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			h := newHoldTopic("stall.held")
			n := newTestNode(t, func(c *Config) { c.holdAppend = h.hold })
			t.Cleanup(h.let) // before the node stops (cleanups run last first)
			opts := clienthook.OfferVersion(client.Options{Name: "anyorder"}, v).(client.Options)
			c := dialNode(t, n, opts)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			held, err := c.PublishAsync(ctx, client.Message{Topic: "stall.held", Payload: []byte("held")})
			if err != nil {
				t.Fatal(err)
			}
			<-h.held // appended: the writer now waits for its answer (in order) or not
			const others = 50
			var fs []*client.Future
			for i := range others {
				f, err := c.PublishAsync(ctx, client.Message{Topic: fmt.Sprintf("stall.t%d", i%5), Payload: []byte("x")})
				if err != nil {
					t.Fatal(err)
				}
				fs = append(fs, f)
			}
			for range others {
				select {
				case <-h.appended:
				case <-ctx.Done():
					t.Fatal("the other topics' appends did not complete")
				}
			}
			if v >= 4 {
				for i, f := range fs {
					if _, err := f.Wait(ctx); err != nil {
						t.Fatalf("publish %d behind the held topic: %v (answered in order?)", i, err)
					}
				}
				select {
				case <-held.Done():
					t.Fatal("the held publish was answered before its append was released")
				default:
				}
			} else {
				// In order: every later publish is durable, none answered before the held one.
				for i, f := range fs {
					select {
					case <-f.Done():
						t.Fatalf("version 3: publish %d answered before the held publish sent before it", i)
					default:
					}
				}
			}
			h.let()
			if a, err := held.Wait(ctx); err != nil || a.Offset != 0 {
				t.Fatalf("held publish: %+v, %v", a, err)
			}
			next := map[string]uint64{}
			for i, f := range fs {
				a, err := f.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if a.Offset != next[a.Topic] { // per topic, in the order sent
					t.Fatalf("publish %d to %s: offset %d, want %d", i, a.Topic, a.Offset, next[a.Topic])
				}
				next[a.Topic]++
			}
		})
	}
}

// A publish relayed to its topic's leader on another node is answered there in any order
// too (the relay stream begins with PUBLISH_OPEN: every node announces publishopen), so a
// stall of one group on the leader holds back no other topic it leads, for a client of
// version 4 on a node that leads none of them.
func TestAnyOrderRelayPassesAStalledTopic(t *testing.T) {
	h := newHoldTopic("stall.held")
	var holding atomic.Bool
	hold := func(topic string) <-chan struct{} {
		if !holding.Load() {
			return nil
		}
		return h.hold(topic)
	}
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
		c.Raft.BalanceInterval = -1 // leaders stay where they are for the test
		c.Raft.DisableReplicaBalance = true
		c.holdAppend = hold
	})
	t.Cleanup(h.let)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Place the topics (and their groups) first.
	c0 := dialNode(t, m.nodes["eu-1"], client.Options{Idempotent: true, Reconnect: true})
	const candidates = 40
	topics := []string{"stall.held"}
	for i := range candidates {
		topics = append(topics, fmt.Sprintf("stall.c%d", i))
	}
	for _, topic := range topics {
		// A new group may find no leader in time on a loaded machine: published again
		// (Idempotent: stored once).
		testlog.WaitForErr(t, 30*time.Second, "the first publish to "+topic, func() error {
			_, err := c0.Publish(ctx, client.Message{Topic: topic, Payload: []byte("w")})
			return err
		})
	}
	leader := m.nodes["eu-1"].rep.leaderName("stall.held")
	var entry string
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		if name != leader {
			entry = name
			break
		}
	}
	var others []string
	for _, topic := range topics[1:] {
		if m.nodes[entry].rep.leaderName(topic) == leader {
			others = append(others, topic)
		}
	}
	t.Logf("stall.held led by %s; the client on %s; %d other topics led by %s: %v", leader, entry, len(others), leader, others)
	if leader == "" || len(others) == 0 {
		t.Skipf("no other topic of %d led by the held topic's leader %q", candidates, leader)
	}
	if !m.nodes[entry].peerKnows(leader, features.PublishOpen, 1) {
		t.Fatalf("%s does not take %s to read PUBLISH_OPEN", entry, leader)
	}
	c := dialNode(t, m.nodes[entry], client.Options{Idempotent: true})
	holding.Store(true)
	held, err := c.PublishAsync(ctx, client.Message{Topic: "stall.held", Payload: []byte("held")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.held:
	case <-ctx.Done():
		t.Fatal("the held topic's append did not complete")
	}
	var fs []*client.Future
	for i := range 3 * len(others) {
		f, err := c.PublishAsync(ctx, client.Message{Topic: others[i%len(others)], Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	for i, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("publish %d behind the held topic, relayed to %s: %v (answered in order?)", i, leader, err)
		}
	}
	select {
	case <-held.Done():
		t.Fatal("the held publish was answered before its append was released")
	default:
	}
	h.let()
	if a, err := held.Wait(ctx); err != nil || a.Offset != 1 {
		t.Fatalf("held publish: %+v, %v; want offset 1", a, err)
	}
}
