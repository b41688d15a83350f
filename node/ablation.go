package node

import (
	"context"
	"strconv"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/sharedstream"
	"github.com/quicmq/quicmq/node/subscriptions"
)

// The session's side of the shared-stream ablation (node/sharedstream): a measurement aid,
// off by default (Config.AblationSharedStream).

// ablationSharedRegion marks a SUBSCRIBE that opens a shared stream.
const ablationSharedRegion = sharedstream.Region

// serveShared serves a shared stream whose first frame is first, if the node allows it.
func (s *session) serveShared(str *quic.Stream, r *wire.Reader, first *wire.Subscribe) {
	n := s.n
	if !n.cfg.AblationSharedStream {
		s.failStream(str, wire.Errorf(wire.CodeForbidden, "the shared-stream ablation is off on this node (a measurement aid: Config.AblationSharedStream, --ablation-shared-stream)"))
		return
	}
	h := sharedHandler{sharedstream.New(sharedSession{s}, s.ctx, str, r)}
	if !s.track(h) {
		s.failStream(str, wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		return
	}
	defer s.untrack(h)
	e, drained := h.Serve(first)
	if e != nil && !drained {
		n.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(e.Code), 10)).Inc()
	}
	h.End(e)
}

// sharedHandler is a shared stream as the session's streamHandler.
type sharedHandler struct{ *sharedstream.Stream }

func (h sharedHandler) drain() { h.Drain() }

// sharedSession is a session as a shared stream sees it: its subscriptions go through the
// same authorization, limits, core and tracking as one on a stream of its own.
type sharedSession struct{ s *session }

func (a sharedSession) Subscribe(ctx context.Context, req *wire.Subscribe, out subscriptions.Stream) (*subscriptions.Subscription, *wire.Error) {
	s := a.s
	auth, e := s.authorizeSubscribe(req)
	if e != nil {
		return nil, e
	}
	if e := s.countSubscription(); e != nil {
		return nil, e
	}
	sub, e := s.newSubscription(ctx, auth, out, false)
	if e != nil {
		s.subs.Add(-1)
		return nil, e
	}
	return sub, nil
}

func (a sharedSession) Serve(sub *subscriptions.Subscription) {
	defer a.s.subs.Add(-1)
	a.s.serveSubscription(sub)
}
