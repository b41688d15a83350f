package node

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// TestPublishStreamOpenedWhileDrainingIsAnswered: a publish stream that arrives after its
// session began to drain (the node shutting down) is answered as a draining publisher
// answers (docs/protocol.md "Connections"): each publish of what the node read gets
// PUBLISH_ERROR 11, nothing is appended, the node closes its side and stops reading with
// 0x3. It used to be left without an answer until the connection closed.
func TestPublishStreamOpenedWhileDrainingIsAnswered(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	// The session's drain as shutdown begins it (session.drain), without closing the node,
	// so the stream below is the only thing that happens after it.
	n.mu.Lock()
	var s *session
	for x := range n.mu.sessions {
		s = x
	}
	n.mu.Unlock()
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()

	for _, first := range []wire.Frame{
		&wire.Publish{Seq: 3, Topic: "t", Payload: []byte("x")},
		&wire.PublishBatch{Seq: 7, Topic: "t", Publishes: []wire.Publish{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}}},
	} {
		st := rc.open(first)
		want := []uint64{3}
		if b, ok := first.(*wire.PublishBatch); ok {
			want = []uint64{b.Seq, b.Seq + 1, b.Seq + 2}
		}
		for _, seq := range want {
			pe, ok := st.next().(*wire.PublishError)
			if !ok || pe.Seq != seq || pe.Code != wire.CodeShuttingDown {
				t.Fatalf("%s: answer %+v, want PUBLISH_ERROR 11 for seq %d", first.Type(), pe, seq)
			}
		}
		if f, err := st.read(10 * time.Second); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the answers %v %v, want the node's FIN", first.Type(), f, err)
		}
		// The node stopped reading: the stream's send side ends with its STOP_SENDING 0x3.
		select {
		case <-st.str.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the node never stopped reading the stream", first.Type())
		}
		if se, ok := errors.AsType[*quic.StreamError](context.Cause(st.str.Context())); !ok || se.ErrorCode != wire.AppShutdown {
			t.Fatalf("%s: the send side ended with %v, want STOP_SENDING 0x3", first.Type(), context.Cause(st.str.Context()))
		}
	}
	if _, _, ok := n.wal.Bounds("t"); ok {
		t.Fatal("topic t exists: a publish refused with 11 was appended")
	}
}
