package subscriptions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
// A client's subscription to one topic that another node owns is the same with a single
// upstream, to the owner, and nothing from this node's log.
//
// An upstream that fails (its node failed, restarted or left, or the link broke) is given up
// without ending the subscription: the other nodes' topics keep flowing, and when the node is
// back (a placement change: it is alive and its catalog arrived again) a new upstream resumes
// its topics. They keep their indexes on the client's stream, what the client already has is
// not sent again (records below a topic's delivered offset are dropped), and ACKs of those
// topics made meanwhile are forwarded to the new upstream. A durable consumer resumes at its
// stored positions; other subscriptions ask again from their original start, except that
// start=latest becomes "records stored since the subscription began" (less a second for the
// clocks of two nodes), so that a topic first created during the outage is not missed.
//
// Backpressure stays per stream: an upstream's reader hands one frame at a time to the run
// goroutine over an unbuffered hand-off; when the client stops reading, the run goroutine
// stops taking frames, the upstream's QUIC window fills and the owner's subscription blocks.

// upstream is one relayed part of a subscription. Its reader goroutine owns the reading
// side; mu guards the writing side (the SUBSCRIBE, then ACKs).
type upstream struct {
	node string
	str  *quic.Stream
	gone atomic.Bool // given up by the run goroutine: its topics wait for the next upstream

	mu sync.Mutex
	w  *wire.Writer

	remote map[uint64]uint64 // upstream topic index -> client stream index; run goroutine
	// skip: upstream topic indexes whose records this subscription takes from elsewhere (a
	// replica here, in a region larger than Replicas); run goroutine.
	skip map[uint64]bool
}

// upMsg is one frame from an upstream (a TOPIC, RECORD, GAP or CAUGHT_UP), or the error
// that ended it.
type upMsg struct {
	up    *upstream
	frame wire.Frame
	err   error
}

// spansRegion reports whether the subscription must gather topics from other nodes: a
// client's wildcard subscription on a node of a multi-node region, or its subscription to a
// topic another node of the region owns (sub.owner).
func (sub *Subscription) spansRegion() bool {
	// In a replicated region of Replicas nodes every node holds every topic: a wildcard is
	// served from this node's own logs. In a larger one (wide) topics are spread: a wildcard
	// gathers the others' topics too, a topic held here served from here (takeUpstream).
	// A topic another node serves (sub.owner) is only ever set in a mesh.
	wildcard := !routing.IsLiteral(sub.req.Pattern) && sub.h.topics.Spread()
	return !sub.peer && (sub.owner != "" || wildcard)
}

// serves reports whether node may hold topics of the subscription: any other node of the
// region for a wildcard, the owner alone for a topic another node owns.
func (sub *Subscription) serves(node string) bool {
	return node != sub.h.cfg.Name && (sub.owner == "" || node == sub.owner)
}

// ownerMoved ends a subscription to a topic another node serves when that node no longer
// does (Region.Moved: a single-copy topic placed elsewhere, a replicated topic's durable
// now led by another node): the client subscribes again and is sent to the new one. A
// failed or restarting owner is no move: its topics wait for it. Run goroutine.
func (sub *subRun) ownerMoved() *wire.Error {
	if sub.owner == "" {
		return nil
	}
	return sub.h.topics.Moved(sub.req.Pattern, sub.owner, sub.req.Durable != "")
}

// openUpstreams opens an upstream to every other node of the region that has not left. A
// failed node is skipped only when none of the topics it is known to hold matches: otherwise
// the subscription cannot be served whole, and the error names the node.
func (sub *subRun) openUpstreams() *wire.Error {
	n := sub.h
	if err := n.place.WaitCatalogs(sub.ctx); err != nil {
		return err
	}
	for _, m := range n.place.Members() {
		if !sub.serves(m.Name) || sub.ups[m.Name] != nil {
			continue
		}
		if m.Status != gossip.StatusAlive {
			if t, ok := n.place.HoldsMatching(m.Name, sub.req.Pattern); ok {
				return wire.Errorf(wire.CodeUnavailable,
					"node %q of region %q, which owns %q (matching %q), has failed: the subscription cannot be served until it returns",
					m.Name, n.cfg.Region, t, sub.req.Pattern)
			}
			continue
		}
		if err := sub.openUpstream(m.Name); err != nil {
			return err
		}
	}
	return nil
}

// openUpstream opens the upstream to node and waits for its SUBSCRIBED.
func (sub *subRun) openUpstream(node string) *wire.Error {
	n := sub.h
	unavailable := func(err error) *wire.Error {
		return wire.Errorf(wire.CodeUnavailable, "node %q of region %q (owner of some topics matching %q): %v", node, n.cfg.Region, sub.req.Pattern, err)
	}
	str, err := n.fed.OpenStreamTo(sub.ctx, node)
	if err != nil {
		return unavailable(err)
	}
	up := &upstream{node: node, str: str, w: wire.NewWriter(str), remote: make(map[uint64]uint64), skip: make(map[uint64]bool)}
	fwd := *sub.req
	fwd.Region = n.cfg.Region
	if sub.caughtUp {
		fwd.Flags = wire.SubscribeCaughtUp // the owner says when its topics are caught up
	}
	if sub.resumes(node) && fwd.Start == wire.StartLatest && fwd.Durable == "" {
		fwd.Start, fwd.StartValue = wire.StartTime, uint64(sub.started.Add(-clockSkew).UnixNano())
	}
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
	// The reader gets what it uses, not the subscription: the run goroutine owns the rest.
	wg, ctx, out := &sub.upWG, sub.ctx, sub.upCh
	wg.Add(1)
	go func() {
		defer wg.Done()
		up.read(ctx, r, out)
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
		case *wire.Topic, *wire.Record, *wire.Gap, *wire.CaughtUp:
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
func (sub *subRun) takeUpstream(m upMsg) *wire.Error {
	n := sub.h
	up := m.up
	if m.err != nil {
		if sub.ctx.Err() != nil {
			return nil
		}
		var we *wire.Error
		if errors.As(m.err, &we) && we.Code != wire.CodeUnavailable && we.Code != wire.CodeShuttingDown {
			return wire.Errorf(we.Code, "node %q of region %q, which owns topics matching %q: %s", up.node, n.cfg.Region, sub.req.Pattern, we.Message)
		}
		sub.giveUp(up, m.err)
		return nil
	}
	// local gives the subscription's number for up's topic index i; skip for a topic served
	// from this node's log.
	local := func(i uint64) (idx uint64, skip bool, err *wire.Error) {
		if up.skip[i] {
			return 0, true, nil
		}
		idx, ok := up.remote[i]
		if !ok {
			return 0, false, wire.Errorf(wire.CodeInternal, "node %q sent a record of topic index %d before its TOPIC", up.node, i)
		}
		return idx, false, nil
	}
	switch f := m.frame.(type) {
	case *wire.Topic:
		if _, here := sub.byTopic[f.Name]; here {
			up.skip[f.Index] = true // a replica of a replicated topic: served from this node's log
			return nil
		}
		if idx, ok := sub.upIndex[f.Name]; ok {
			sub.rebind(idx, up, f.Index)
			return nil
		}
		sub.mu.Lock()
		idx := uint64(len(sub.mu.bound))
		sub.mu.bound = append(sub.mu.bound, boundTopic{name: f.Name, up: up, remoteIndex: f.Index})
		sub.mu.Unlock()
		up.remote[f.Index] = idx
		sub.upIndex[f.Name] = idx
		sub.w.Buffer(&wire.Topic{Index: sub.out.Index(idx), Name: sub.actor.ClientName(f.Name)})
	case *wire.Record:
		idx, skip, err := local(f.Index)
		if skip || err != nil {
			return err
		}
		f.Index = sub.out.Index(idx)
		sub.mu.Lock()
		if f.Offset < sub.mu.bound[idx].delivered {
			sub.mu.Unlock()
			return nil // a resumed upstream sends again what the client already has
		}
		sub.mu.bound[idx].delivered = f.Offset + 1
		sub.mu.Unlock()
		sub.series.records.Inc()
		sub.series.bytes.Add(float64(len(f.Payload)))
		sub.w.Buffer(f)
	case *wire.Gap:
		idx, skip, err := local(f.Index)
		if skip || err != nil {
			return err
		}
		f.Index = sub.out.Index(idx)
		sub.mu.Lock()
		if f.To <= sub.mu.bound[idx].delivered {
			sub.mu.Unlock()
			return nil
		}
		f.From = max(f.From, sub.mu.bound[idx].delivered)
		sub.mu.bound[idx].delivered = f.To
		sub.mu.Unlock()
		sub.w.Buffer(f)
	case *wire.CaughtUp:
		// Counted once per node: a resumed upstream says it again.
		if sub.upWait[up.node] {
			delete(sub.upWait, up.node)
			sub.upTopics += f.Topics
		}
	}
	return nil
}

// clockSkew is how far the clocks of two nodes of a region are assumed to differ at most:
// a resumed start=latest upstream asks for records stored since the subscription began, less
// this much.
const clockSkew = time.Second

// resumes reports whether an upstream to node would resume topics of an earlier one. Run
// goroutine.
func (sub *subRun) resumes(node string) bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for _, bt := range sub.mu.bound {
		if bt.up != nil && bt.up.node == node {
			return true
		}
	}
	return false
}

// giveUp ends a failed upstream without ending the subscription: its topics resume when
// addUpstreams opens a new one to the node. Run goroutine.
func (sub *subRun) giveUp(up *upstream, err error) {
	up.gone.Store(true)
	up.close()
	if sub.ups[up.node] == up {
		delete(sub.ups, up.node)
	}
	sub.upRetry[up.node] = true
	sub.h.log.Warn("subscription: upstream node stopped serving its topics; they resume when it is back",
		"node", up.node, "pattern", sub.req.Pattern, "err", err)
}

// retryLater makes addUpstreams run again in a second, by a placement change. The return
// of a node is such a change; this is for an upstream to a node that is alive and linked
// but could not be opened, which would otherwise wait for the next unrelated change.
func (sub *subRun) retryLater() {
	p := sub.h.place
	t := time.AfterFunc(time.Second, p.MembersChanged)
	context.AfterFunc(sub.ctx, func() { t.Stop() })
}

// rebind moves the client stream's topic idx to a new upstream (remote index remote) and
// forwards the ACK the client made while it had none. Run goroutine.
func (sub *subRun) rebind(idx uint64, up *upstream, remote uint64) {
	up.remote[remote] = idx
	sub.mu.Lock()
	bt := &sub.mu.bound[idx]
	bt.up, bt.remoteIndex = up, remote
	unsent := bt.unsentAck
	bt.unsentAck = 0
	sub.mu.Unlock()
	if unsent > 0 {
		sub.forwardAck(idx, boundTopic{up: up, remoteIndex: remote}, unsent-1)
	}
}

// forwardAck sends the client's ACK of topic idx (bound as bt) to its upstream. If that
// upstream failed, the ACK waits in the topic's unsentAck for the next one (rebind), unless
// the topic was rebound meanwhile: then it goes to the new upstream.
func (sub *Subscription) forwardAck(idx uint64, bt boundTopic, offset uint64) {
	for {
		if !bt.up.gone.Load() && bt.up.ack(bt.remoteIndex, offset) == nil {
			return
		}
		sub.mu.Lock()
		cur := &sub.mu.bound[idx]
		if cur.up != bt.up && !cur.up.gone.Load() {
			bt = *cur
			sub.mu.Unlock()
			continue
		}
		cur.unsentAck = max(cur.unsentAck, offset+1)
		sub.mu.Unlock()
		return
	}
}

// takeUpstreams takes the upstream frames that are ready, without waiting, and returns how
// many it buffered. Run goroutine.
func (sub *subRun) takeUpstreams() (int, *wire.Error) {
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
func (sub *subRun) addUpstreams() {
	n := sub.h
	failed := false
	for _, m := range n.place.Members() {
		if !sub.serves(m.Name) || sub.ups[m.Name] != nil || m.Status != gossip.StatusAlive || !n.fed.Connected(m.Name) {
			continue
		}
		if err := sub.openUpstream(m.Name); err != nil {
			n.log.Debug("subscription: upstream not opened yet", "node", m.Name, "pattern", sub.req.Pattern, "err", err)
			failed = true
			continue
		}
		if sub.upRetry[m.Name] {
			delete(sub.upRetry, m.Name)
			n.log.Info("subscription: upstream node serves its topics again", "node", m.Name, "pattern", sub.req.Pattern)
		}
	}
	if failed {
		sub.retryLater()
	}
}

// closeUpstreams ends the subscription's context and every upstream, and waits for their
// readers. Run goroutine, at the end.
func (sub *subRun) closeUpstreams() {
	sub.cancel()
	// FIN first, so that ACKs already forwarded reach the owners (a durable consumer's last
	// positions); each owner then ends its side. Cut the streams only if that takes long.
	for _, up := range sub.ups {
		up.mu.Lock()
		up.str.Close()
		up.mu.Unlock()
	}
	done, wg := make(chan struct{}), &sub.upWG
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	for _, up := range sub.ups {
		up.close()
	}
	<-done
}
