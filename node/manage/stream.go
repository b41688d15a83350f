package manage

import "github.com/quicmq/quicmq/internal/wire"

// Serve answers a management stream's request (docs/protocol.md "Management streams"): one
// request frame, answered by CONSUMER_INFO, TOPIC_INFO or DONE frames on w, for a client of
// protocol version, or a peer (r.Peer). It returns the error to end the stream with instead
// (the caller sends it as ERROR), or ok false when a write failed (the stream is gone);
// otherwise the caller flushes w and closes its side.
func (h *Here) Serve(r Request, version uint64, w *wire.Writer, req wire.Frame) (e *wire.Error, ok bool) {
	m := h.Manager(r)
	switch f := req.(type) {
	case *wire.Consumers:
		var cs []Consumer
		if cs, e = m.Consumers(f.Name); e == nil {
			for _, c := range cs {
				// A peer gets the rows of a listing too: the node that asked counts each
				// topic's row once (gather), which summed figures cannot tell.
				if w.Write(c.Info(r.A, f.Name != "" || r.Peer)) != nil {
					return nil, false
				}
			}
		}
	case *wire.ConsumerReset:
		var c Consumer
		if c, e = m.Reset(f.Name, f.Start, f.StartValue, f.Flags&wire.ManageForce != 0); e == nil {
			w.Write(c.Info(r.A, true))
		}
	case *wire.ConsumerDelete:
		var removed int
		if removed, e = m.Remove(f.Name, f.Flags&wire.ManageForce != 0); e == nil {
			w.Write(&wire.Done{Count: uint64(removed)})
		}
	case *wire.TopicCreate:
		var ti wire.TopicInfo
		if ti, e = m.CreateTopic(f); e == nil {
			w.Write(TopicInfoFor(version, &ti))
		}
	case *wire.TopicRemove:
		var records uint64
		if records, e = m.RemoveTopic(f); e == nil {
			w.Write(&wire.Done{Count: records})
		}
	}
	return e, true
}

// TopicInfoFor is t as protocol version v carries it: version 1's TOPIC_INFO has no flags,
// leader or replicas, and its retention fields only for a topic with retention of its own
// (the encoder writes them so when Leader and Replicas are empty); version 2 has them all.
func TopicInfoFor(v uint64, t *wire.TopicInfo) *wire.TopicInfo {
	if v >= 2 || t.Leader == "" && len(t.Replicas) == 0 {
		return t
	}
	c := *t
	c.Leader, c.Replicas = "", nil
	return &c
}
