package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
)

// A wildcard subscription may match topics owned by several nodes of the region. The node
// the client is connected to serves the topics it owns from its log, and opens one upstream
// per other node of the region: a relayed subscription (SUBSCRIBE with this region's name)
// that the other node serves from its own log alone. The subscription's run goroutine
// merges the upstreams' frames into the client's stream, giving each upstream topic an
// index of the client's stream; the ack goroutine forwards the client's ACKs of upstream
// topics to their upstream, where a durable consumer's position is stored (on the owner).
//
// Backpressure stays per stream: an upstream's reader hands one frame at a time to the run
// goroutine over an unbuffered hand-off; when the client stops reading, the run goroutine
// stops taking frames, the upstream's QUIC window fills and the owner's subscription blocks.

// upstream is one relayed part of a subscription. Its reader goroutine owns the reading
// side; mu guards the writing side (the SUBSCRIBE, then ACKs).
type upstream struct {
	node string
	str  *quic.Stream

	mu sync.Mutex
	w  *wire.Writer

	remote map[uint64]uint64 // upstream topic index -> client stream index; run goroutine
}

// upMsg is one frame from an upstream (a TOPIC, RECORD or GAP), or the error that ended it.
type upMsg struct {
	up    *upstream
	frame wire.Frame
	err   error
}

// spansRegion reports whether the subscription must gather topics from other nodes: a
// client's wildcard subscription on a node of a multi-node region.
func (sub *subscription) spansRegion() bool {
	s := sub.s
	return s.n.place != nil && !s.peer && !routing.IsLiteral(sub.req.Pattern)
}

// openUpstreams opens an upstream to every other node of the region that has not left. A
// failed node is skipped only when none of the topics it is known to hold matches: otherwise
// the subscription cannot be served whole, and the error names the node.
func (sub *subscription) openUpstreams() *wire.Error {
	n := sub.s.n
	if err := n.place.waitCatalogs(sub.ctx); err != nil {
		return err
	}
	for _, m := range n.place.members() {
		if m.name == n.cfg.Name || sub.ups[m.name] != nil {
			continue
		}
		if m.status != gossip.StatusAlive {
			if t, ok := n.place.holdsMatching(m.name, sub.req.Pattern); ok {
				return wire.Errorf(wire.CodeUnavailable,
					"node %q of region %q, which owns %q (matching %q), has failed: the subscription cannot be served until it returns",
					m.name, n.cfg.Region, t, sub.req.Pattern)
			}
			continue
		}
		if err := sub.openUpstream(m.name); err != nil {
			return err
		}
	}
	return nil
}

// openUpstream opens the upstream to node and waits for its SUBSCRIBED.
func (sub *subscription) openUpstream(node string) *wire.Error {
	n := sub.s.n
	unavailable := func(err error) *wire.Error {
		return wire.Errorf(wire.CodeUnavailable, "node %q of region %q (owner of some topics matching %q): %v", node, n.cfg.Region, sub.req.Pattern, err)
	}
	str, err := n.fed.OpenStreamTo(sub.ctx, node)
	if err != nil {
		return unavailable(err)
	}
	up := &upstream{node: node, str: str, w: wire.NewWriter(str), remote: make(map[uint64]uint64)}
	fwd := *sub.req
	fwd.Region = n.cfg.Region
	up.mu.Lock()
	err = up.w.Write(&fwd)
	if err == nil {
		err = up.w.Flush()
	}
	up.mu.Unlock()
	if err != nil {
		up.close()
		return unavailable(err)
	}
	r := wire.NewReader(str, n.limits)
	f, err := r.Read()
	if err != nil {
		up.close()
		return unavailable(err)
	}
	switch f := f.(type) {
	case *wire.Subscribed:
	case *wire.ErrorFrame:
		up.close()
		return &wire.Error{Code: f.Code, Message: fmt.Sprintf("node %q of region %q: %s", node, n.cfg.Region, f.Message)}
	default:
		up.close()
		return unavailable(fmt.Errorf("answered SUBSCRIBE with %s", f.Type()))
	}
	sub.ups[node] = up
	sub.upWG.Add(1)
	go func() {
		defer sub.upWG.Done()
		up.read(sub.ctx, r, sub.upCh)
	}()
	return nil
}

// read is the upstream's reader goroutine: it hands each frame to the run goroutine.
func (up *upstream) read(ctx context.Context, r *wire.Reader, out chan<- upMsg) {
	send := func(m upMsg) bool {
		select {
		case out <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		f, err := r.Read()
		if err != nil {
			send(upMsg{up: up, err: err})
			return
		}
		switch f := f.(type) {
		case *wire.Topic, *wire.Record, *wire.Gap:
			if !send(upMsg{up: up, frame: f}) {
				return
			}
		case *wire.ErrorFrame:
			send(upMsg{up: up, err: f.AsError()})
			return
		default:
			send(upMsg{up: up, err: fmt.Errorf("unexpected %s", f.Type())})
			return
		}
	}
}

// ack forwards the client's ACK of an upstream topic. Called by the ack goroutine.
func (up *upstream) ack(index, offset uint64) error {
	up.mu.Lock()
	defer up.mu.Unlock()
	if err := up.w.Write(&wire.Ack{Index: index, Offset: offset}); err != nil {
		return err
	}
	return up.w.Flush()
}

func (up *upstream) close() {
	up.str.CancelRead(wire.AppCancelled)
	up.str.CancelWrite(wire.AppCancelled)
}

// takeUpstream writes one upstream frame to the client's stream buffer, renumbering its
// topic index. Called by the run goroutine.
func (sub *subscription) takeUpstream(m upMsg) *wire.Error {
	n := sub.s.n
	up := m.up
	if m.err != nil {
		return wire.Errorf(wire.CodeUnavailable,
			"node %q of region %q, which owns topics matching %q, stopped serving them: %v; resubscribe (a durable consumer resumes where it acked)",
			up.node, n.cfg.Region, sub.req.Pattern, m.err)
	}
	bad := func(i uint64) *wire.Error {
		return wire.Errorf(wire.CodeInternal, "node %q sent a record of topic index %d before its TOPIC", up.node, i)
	}
	switch f := m.frame.(type) {
	case *wire.Topic:
		sub.mu.Lock()
		idx := uint64(len(sub.mu.bound))
		sub.mu.bound = append(sub.mu.bound, boundTopic{name: f.Name, up: up, remoteIndex: f.Index})
		sub.mu.Unlock()
		up.remote[f.Index] = idx
		sub.w.Buffer(&wire.Topic{Index: idx, Name: sub.s.actor.clientName(f.Name)})
	case *wire.Record:
		idx, ok := up.remote[f.Index]
		if !ok {
			return bad(f.Index)
		}
		f.Index = idx
		sub.mu.Lock()
		sub.mu.bound[idx].delivered = f.Offset + 1
		sub.mu.Unlock()
		sub.series.records.Inc()
		sub.series.bytes.Add(float64(len(f.Payload)))
		sub.w.Buffer(f)
	case *wire.Gap:
		idx, ok := up.remote[f.Index]
		if !ok {
			return bad(f.Index)
		}
		f.Index = idx
		sub.mu.Lock()
		sub.mu.bound[idx].delivered = max(sub.mu.bound[idx].delivered, f.To)
		sub.mu.Unlock()
		sub.w.Buffer(f)
	}
	return nil
}

// takeUpstreams takes the upstream frames that are ready, without waiting, and returns how
// many it buffered. Run goroutine.
func (sub *subscription) takeUpstreams() (int, *wire.Error) {
	for i := 0; i < 1024; i++ {
		select {
		case m := <-sub.upCh:
			if err := sub.takeUpstream(m); err != nil {
				return i, err
			}
		default:
			return i, nil
		}
	}
	return 1024, nil
}

// addUpstreams opens upstreams to nodes that joined or returned since the subscription
// began. A node that cannot be reached yet is tried again at the next placement change.
func (sub *subscription) addUpstreams() {
	n := sub.s.n
	for _, m := range n.place.members() {
		if m.name == n.cfg.Name || sub.ups[m.name] != nil || m.status != gossip.StatusAlive || !n.fed.Connected(m.name) {
			continue
		}
		if err := sub.openUpstream(m.name); err != nil {
			n.log.Debug("wildcard subscription: upstream not opened yet", "node", m.name, "pattern", sub.req.Pattern, "err", err)
		}
	}
}

// closeUpstreams ends the subscription's context and every upstream, and waits for their
// readers. Run goroutine, at the end.
func (sub *subscription) closeUpstreams() {
	sub.cancel()
	// FIN first, so that ACKs already forwarded reach the owners (a durable consumer's last
	// positions); each owner then ends its side. Cut the streams only if that takes long.
	for _, up := range sub.ups {
		up.mu.Lock()
		up.str.Close()
		up.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { sub.upWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	for _, up := range sub.ups {
		up.close()
	}
	<-done
}
