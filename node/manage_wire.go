package node

import (
	"context"
	"errors"
	"io"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/manage"
)

// manage serves a management stream (docs/protocol.md "Management streams"): one request
// frame, answered by CONSUMER_INFO, TOPIC_INFO or DONE frames and FIN, or by ERROR.
func (s *session) manage(str *quic.Stream, req wire.Frame) {
	m := &manage.Manager{
		Request: manage.Request{Ctx: s.ctx, A: s.actor, Peer: s.peer, From: s.peerName},
		Local:   manageLocal{s.n},
		Region:  s.n.place != nil && !s.peer, // a peer's request is served from this node's log alone
	}
	w := wire.NewWriter(str)
	var e *wire.Error
	switch f := req.(type) {
	case *wire.Consumers:
		var cs []manage.Consumer
		if cs, e = m.Consumers(f.Name); e == nil {
			for _, c := range cs {
				// A peer gets the rows of a listing too: the node that asked counts each
				// topic's row once (gather), which summed figures cannot tell.
				if w.Write(c.Info(s.actor, f.Name != "" || s.peer)) != nil {
					return
				}
			}
		}
	case *wire.ConsumerReset:
		var c manage.Consumer
		if c, e = m.Reset(f.Name, f.Start, f.StartValue, f.Flags&wire.ManageForce != 0); e == nil {
			w.Write(c.Info(s.actor, true))
		}
	case *wire.ConsumerDelete:
		var removed int
		if removed, e = m.Remove(f.Name, f.Flags&wire.ManageForce != 0); e == nil {
			w.Write(&wire.Done{Count: uint64(removed)})
		}
	case *wire.TopicCreate:
		var ti wire.TopicInfo
		if ti, e = m.CreateTopic(f); e == nil {
			w.Write(topicInfoFor(s.version, &ti))
		}
	case *wire.TopicRemove:
		var records uint64
		if records, e = m.RemoveTopic(f); e == nil {
			w.Write(&wire.Done{Count: records})
		}
	}
	if e != nil {
		s.failStream(str, e)
		return
	}
	w.Flush()
	str.Close() // the client closed its side after the request
}

// askRegion sends req to every other live node of the region and hands each answer frame to
// fn. A node that cannot be asked fails the request (CodeUnavailable): a consumer's state
// there would be missed or left unchanged.
func (n *Node) askRegion(ctx context.Context, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	for _, m := range n.place.Members() {
		if m.Name == n.cfg.Name || m.Status != gossip.StatusAlive {
			continue
		}
		if e := n.askNode(ctx, m.Name, req, fn); e != nil && e.Code != wire.CodeNotFound {
			return e
		}
	}
	return nil
}

// askNode sends req to node over its link and hands each answer frame to fn until FIN. An
// ERROR answer is returned as it is; a failure to ask is CodeUnavailable.
func (n *Node) askNode(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ManageTimeout)
	defer cancel()
	err := n.streamTo(ctx, node, req, fn)
	var we *wire.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &we):
		return we
	}
	return wire.Errorf(wire.CodeUnavailable, "node %q of this region could not be asked (%s): %v", node, req.Type(), err)
}

// streamTo opens a stream to node, sends req, closes its side and reads the answer frames
// to the end; an ERROR frame comes back as a *wire.Error.
func (n *Node) streamTo(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) error {
	str, err := n.fed.OpenStreamTo(ctx, node)
	if err != nil {
		return err
	}
	defer str.CancelRead(wire.AppCancelled)
	stop := context.AfterFunc(ctx, func() { str.CancelRead(wire.AppCancelled) })
	defer stop()
	if _, err := str.Write(wire.Append(nil, req)); err != nil {
		return err
	}
	str.Close()
	r := wire.NewReader(str, wire.Limits{})
	for {
		f, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ef, ok := f.(*wire.ErrorFrame); ok {
			return ef.AsError()
		}
		if err := fn(f); err != nil {
			return err
		}
	}
}
