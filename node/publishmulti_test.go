package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/clienthook"
	"github.com/quicmq/quicmq/internal/wire"
)

// multiAnswer is one publish's answer, flattened from PUBLISH_ACK, PUBLISH_ACKS and
// PUBLISH_ERROR.
type multiAnswer struct {
	seq, offset uint64
	code        wire.Code
	dup         bool
}

// readAnswers reads n answers from s, in the order they come.
func readAnswers(t *testing.T, s *rawStream, n int) []multiAnswer {
	t.Helper()
	var got []multiAnswer
	for len(got) < n {
		switch f := s.next().(type) {
		case *wire.PublishAcks:
			for k := range f.Count {
				got = append(got, multiAnswer{seq: f.Seq + k, offset: f.Offset + k})
			}
		case *wire.PublishAck:
			got = append(got, multiAnswer{seq: f.Seq, offset: f.Offset, dup: f.Flags&wire.AckDuplicate != 0})
		case *wire.PublishError:
			got = append(got, multiAnswer{seq: f.Seq, code: f.Code})
		default:
			t.Fatalf("unexpected %#v", f)
		}
	}
	return got
}

func multi(seq uint64, ps ...wire.Publish) *wire.PublishMulti {
	return &wire.PublishMulti{Seq: seq, Publishes: ps}
}

func pub(topic, payload string) wire.Publish {
	return wire.Publish{Topic: topic, Payload: []byte(payload)}
}

func payloadsOf(t *testing.T, n *Node, topic string) string {
	t.Helper()
	recs, err := n.Log().Read(topic, 0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Payload))
	}
	return fmt.Sprint(out)
}

// PUBLISH_MULTI: each publish is answered in the order sent, as a PUBLISH of its seq would
// be. A run whose topic is invalid is refused entry by entry, an entry over a limit alone, and
// the runs around them are stored; a topic's publishes keep their order across runs and
// frames; a retried (producer, sequence) is answered as a duplicate with the stored offset.
func TestPublishMulti(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxPayload = 64 })
	rc := mustDial(t, n)
	big := string(make([]byte, 65))
	idem := wire.Publish{Topic: "pm.b", ProducerID: "p1", Sequence: 7, Payload: []byte("b-idem")}
	s := rc.open(
		multi(1, pub("pm.a", "a0"), pub("pm.a", "a1"), pub("pm.b", "b0"), pub("pm..bad", "x"), pub("pm..bad", "y"), pub("pm.a", "a2")),
		multi(7, pub("pm.b", "b1"), pub("pm.a", big), pub("pm.a", "a3"), idem),
		&wire.PublishBatch{Seq: 11, Topic: "pm.a", Publishes: []wire.Publish{{Seq: 11, Topic: "pm.a", Payload: []byte("a4")}}},
		multi(12, idem, pub("pm.c", "c0")), // the same producer and sequence again
		&wire.Publish{Seq: 14, Topic: "pm.b", Payload: []byte("b2")},
	)
	s.str.Close()
	got := readAnswers(t, s, 14)
	inv, big5 := wire.CodeInvalidTopic, wire.CodeTooLarge
	want := []multiAnswer{{1, 0, 0, false}, {2, 1, 0, false}, {3, 0, 0, false}, {4, 0, inv, false}, {5, 0, inv, false}, {6, 2, 0, false},
		{7, 1, 0, false}, {8, 0, big5, false}, {9, 3, 0, false}, {10, 2, 0, false},
		{11, 4, 0, false}, {12, 2, 0, true}, {13, 0, 0, false}, {14, 3, 0, false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers\n got %v\nwant %v", got, want)
	}
	for topic, want := range map[string]string{"pm.a": "[a0 a1 a2 a3 a4]", "pm.b": "[b0 b1 b-idem b2]", "pm.c": "[c0]"} {
		if got := payloadsOf(t, n, topic); got != want {
			t.Errorf("%s holds %v, want %v", topic, got, want)
		}
	}
}

// A framing fault in a PUBLISH_MULTI (here a run of 0) stores nothing of the frame: the
// publishes read before it are answered, then ERROR 1 ends the stream.
func TestPublishMultiMalformedEndsStream(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	bad := wire.Append(nil, multi(2, pub("pm.m", "x")))
	bad = bad[:len(bad)-4] // cut into the entry: the run's count says 1, the body ends
	bad[4] -= 4            // the frame's length, so the frame itself is whole
	s := rc.open(&wire.Publish{Seq: 1, Topic: "pm.m", Payload: []byte("first")})
	if _, err := s.str.Write(bad); err != nil {
		t.Fatal(err)
	}
	if a, ok := s.next().(*wire.PublishAck); !ok || a.Seq != 1 {
		t.Fatalf("first answer %#v", a)
	}
	if e := s.expectError(); e.Code != wire.CodeProtocol {
		t.Fatalf("got %v, want ERROR 1", e)
	}
	if got := payloadsOf(t, n, "pm.m"); got != "[first]" {
		t.Fatalf("pm.m holds %v", got)
	}
}

// Tenants: a run's topic is in the tenant's namespace, and a run outside the credential's
// publish grant is refused entry by entry (PUBLISH_ERROR 3) while the runs around it are
// stored in the tenant's own logs.
func TestPublishMultiTenant(t *testing.T) {
	n := tenantNode(t)
	rc, err := dialRaw(t, n, acmeToken)
	if err != nil {
		t.Fatal(err)
	}
	s := rc.open(multi(1, pub("orders.a", "o0"), pub("billing.x", "no"), pub("billing.x", "no"), pub("orders.b", "o1")))
	s.str.Close()
	got := readAnswers(t, s, 4)
	want := []multiAnswer{{1, 0, 0, false}, {2, 0, wire.CodeForbidden, false}, {3, 0, wire.CodeForbidden, false}, {4, 0, 0, false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers\n got %v\nwant %v", got, want)
	}
	if got := payloadsOf(t, n, "acme.orders.a"); got != "[o0]" {
		t.Fatalf("acme's orders.a holds %v", got)
	}
	if _, _, ok := n.Log().Bounds("orders.a"); ok {
		t.Fatal("a tenant's run was stored outside its namespace")
	}
}

// Versions: an SDK client publishing over many topics, pipelined, gets every record stored in
// order at dense offsets whether it and the node speak version 5 (PUBLISH_MULTI), the client
// says 4 (an older client: PUBLISH_BATCH), or the node answers 4 (an older node: the client
// sends no PUBLISH_MULTI, which that node would end the stream for).
func TestPublishMultiVersions(t *testing.T) {
	for _, c := range []struct {
		name          string
		offer, nodeAt uint64
		want          uint64 // the version of the connection
	}{{"both-5", 0, 0, 5}, {"older-client", 4, 0, 4}, {"older-node", 0, 4, 4}} {
		t.Run(c.name, func(t *testing.T) {
			n := newTestNode(t, func(cfg *Config) { cfg.maxVersion = c.nodeAt })
			opts := client.Options{}
			if c.offer != 0 {
				opts = clienthook.OfferVersion(opts, c.offer).(client.Options)
			}
			conn := dialNode(t, n, opts)
			if v := connVersion(t, n); v != c.want {
				t.Fatalf("connection of version %d, want %d", v, c.want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const topics, rounds = 50, 8
			futs := make([]*client.Future, 0, topics*rounds)
			for k := range topics * rounds {
				f, err := conn.PublishAsync(ctx, client.Message{Topic: fmt.Sprintf("pv.%d", k%topics), Payload: fmt.Appendf(nil, "%d", k/topics)})
				if err != nil {
					t.Fatal(err)
				}
				futs = append(futs, f)
			}
			for k, f := range futs {
				a, err := f.Wait(ctx)
				if err != nil || a.Offset != uint64(k/topics) {
					t.Fatalf("publish %d: %+v, %v; want offset %d", k, a, err, k/topics)
				}
			}
			for _, topic := range []string{"pv.0", "pv.49"} {
				if got := payloadsOf(t, n, topic); got != "[0 1 2 3 4 5 6 7]" {
					t.Fatalf("%s holds %v", topic, got)
				}
			}
		})
	}
}

// connVersion is the protocol version of n's one client connection.
func connVersion(t *testing.T, n *Node) uint64 {
	t.Helper()
	n.mu.Lock()
	var found *session
	for s := range n.mu.sessions {
		if !s.peer {
			found = s
		}
	}
	n.mu.Unlock()
	if found == nil {
		t.Fatal("no client session")
	}
	<-found.ready // version is set before
	return found.version
}
