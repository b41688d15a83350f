package node

import (
	"context"
	"strconv"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/subscriptions"
	"github.com/quicmq/quicmq/routing"
)

// The session's side of a subscription stream: a SUBSCRIBE authorized (the tenant's
// namespace, grants, a vector's topics), counted against the connection's limit, and sent to
// a group member, a durable's lock, a pass-through replay, or else made and served by
// node/subscriptions, which owns everything about it from there on.

// authorizeSubscribe checks a SUBSCRIBE for the session's principal and returns the request
// as the node serves it (a tenant's namespace added). Every mapping goes through it, so the
// ablation can never skip a tenant or grant check.
func (s *session) authorizeSubscribe(req *wire.Subscribe) (*wire.Subscribe, *wire.Error) {
	n := s.n
	a := s.actor
	if e := a.CheckTopic(req.Pattern, true); e != nil {
		return nil, e
	}
	if e := a.MaySubscribe(req.Pattern); e != nil {
		return nil, e
	}
	// A sibling relays names in a tenant's namespace.
	if req.Durable != "" && !auth.ValidConsumerName(req.Durable, s.peer) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "durable name %q: want 1-255 characters of [A-Za-z0-9_.-]", req.Durable)
	}
	if req.Start > wire.StartTime {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "start kind %d: want 0 (earliest), 1 (latest), 2 (offset) or 3 (time)", req.Start)
	}
	if e := checkVector(a, n.cfg.Region, req); e != nil { // vector.go
		return nil, e
	}
	if a.Tenant != "" {
		r := *req
		r.Pattern, r.Durable = a.Topic(req.Pattern), a.Durable(req.Durable)
		r.Vector = namespaceVector(a, req.Vector)
		req = &r
		if e := n.here.CheckDurables(a, req.Durable); e != nil {
			return nil, e
		}
	}
	if req.Region != "" && req.Region != n.cfg.Region && s.peer {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "a replay passed through from another region cannot be passed on to region %q", req.Region)
	}
	return req, nil
}

// countSubscription counts a subscription against the connection's limit; the caller
// uncounts it (s.subs.Add(-1)) when it ends. A peer's connection carries the subscriptions
// of many clients (each already counted on its own connection): only QUIC's stream limit
// bounds it.
func (s *session) countSubscription() *wire.Error {
	if got := s.subs.Add(1); got > int64(s.n.cfg.MaxSubscriptionsPerConn) && !s.peer {
		s.subs.Add(-1)
		return wire.Errorf(wire.CodeLimit, "%d subscriptions open on this connection, the limit is %d", got-1, s.n.cfg.MaxSubscriptionsPerConn)
	}
	return nil
}

// subscribe serves a subscription stream (the product mapping: a stream of its own) until
// it ends.
func (s *session) subscribe(str *quic.Stream, r *wire.Reader, req *wire.Subscribe) {
	n := s.n
	refuse := func(e *wire.Error) {
		n.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(e.Code), 10)).Inc()
		s.failStream(str, e)
	}
	req, e := s.authorizeSubscribe(req)
	if e == nil {
		e = s.countSubscription()
	}
	if e != nil {
		refuse(e)
		return
	}
	defer s.subs.Add(-1)
	if req.Group != nil {
		s.serveMember(str, r, req, refuse) // member.go: a member of a shared consumer group (node/groups)
		return
	}
	var release func() // an exclusive durable's lock (durables.go, node/subscriptions)
	if req.Durable != "" && !s.peer {
		release, e = n.lockDurable(s, req.Durable, s.actor.ClientDurable(req.Durable), req.Flags&wire.SubscribeStandby != 0, str.Context().Done())
		if e != nil || release == nil {
			if e != nil {
				refuse(e)
			}
			return
		}
		defer release()
	}
	if req.Region != "" && req.Region != n.cfg.Region {
		s.passThrough(str, r, req, n.regionTarget(req.Region), refuse)
		return
	}
	// RUNS frames never on a shared stream (the ablation's index is not a stream-local
	// number) nor to a peer: a peer link speaks wire.PeerVersion, and a region replay's
	// stream is passed through to a client of any version.
	sub, e := s.newSubscription(s.ctx, req, subscriptions.OwnStream{Str: str}, s.version >= wire.RunsVersion && !s.peer)
	if e != nil {
		refuse(e)
		return
	}
	defer sub.Cancel()
	ackDone := make(chan struct{})
	if release != nil {
		// A durable's subscription leaves the node (its members as management counts them,
		// its lock) before the node ends its side, once the ack reader has stored the ACKs it
		// read: a client that sees the FIN (or ERROR) may subscribe again, or remove the
		// consumer, at once.
		sub.BeforeEnd(func() {
			sub.Cancel() // the ack reader may still wait for the set-up
			<-ackDone
			n.subs.Remove(sub)
			release()
		})
	}
	go func() {
		defer close(ackDone)
		sub.ServeAcks(r)
	}()
	s.serveSubscription(sub)
	<-ackDone
}

// checkVector validates a SUBSCRIBE's vector block (client names) for principal p, on a node
// of region: a subscription relayed by a sibling of the region (region set to its own) takes
// one as a client's does.
func checkVector(p *auth.Principal, region string, req *wire.Subscribe) *wire.Error {
	if req.Vector == nil {
		return nil
	}
	switch {
	case req.Group != nil:
		return wire.Errorf(wire.CodeInvalidArgument, "a vector position is not taken by a group member (group %q): groups keep their positions on the node", req.Group.Name)
	case req.Region != "" && req.Region != region && req.Region != ablationSharedRegion:
		return wire.Errorf(wire.CodeInvalidArgument, "a vector position applies to this region's log, not to a replay of region %q", req.Region)
	}
	for _, tv := range req.Vector {
		if e := p.CheckTopic(tv.Topic, false); e != nil {
			return wire.Errorf(e.Code, "vector position of topic %q: %s", tv.Topic, e.Message)
		}
		if !routing.Match(req.Pattern, tv.Topic) {
			return wire.Errorf(wire.CodeInvalidArgument, "vector position of topic %q: the pattern %q does not match it", tv.Topic, req.Pattern)
		}
	}
	return nil
}

// namespaceVector is v with p's namespace added to its topics.
func namespaceVector(p *auth.Principal, v []wire.TopicVector) []wire.TopicVector {
	if v == nil {
		return nil
	}
	out := make([]wire.TopicVector, len(v))
	for i, tv := range v {
		out[i] = wire.TopicVector{Topic: p.Topic(tv.Topic), Origins: tv.Origins}
	}
	return out
}

// newSubscription makes a subscription authorized by authorizeSubscribe for the session, on
// mapping out, its context a child of parent (node/subscriptions). runs: the mapping may
// carry RUNS frames.
func (s *session) newSubscription(parent context.Context, req *wire.Subscribe, out subscriptions.Stream, runs bool) (*subscriptions.Subscription, *wire.Error) {
	return subscriptions.New(s.n.subs, subscriptions.Params{Conn: s, Actor: s.actor, Peer: s.peer, Parent: parent, Req: req, Out: out, Runs: runs})
}

// serveSubscription runs sub on the calling goroutine until it ends, tracked by the session
// so that a drain ends it.
func (s *session) serveSubscription(sub *subscriptions.Subscription) {
	h := subHandler{sub}
	if !s.track(h) {
		sub.Refuse(wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		return
	}
	defer s.untrack(h)
	sub.Serve()
}

// subHandler is a subscription as the session's streamHandler.
type subHandler struct{ sub *subscriptions.Subscription }

func (h subHandler) drain() { h.sub.Drain() }

// ConnectionStats are the connection's, for a fanout's estimate of what it has sent: the
// session is the tail.Conn its subscriptions' wake-ups and fanouts are grouped by.
func (s *session) ConnectionStats() quic.ConnectionStats { return s.conn.ConnectionStats() }

// endWriteTimeout bounds the write of a stream's last frames (its ERROR) to a client that
// does not read (subscriptions.EndWriteTimeout).
const endWriteTimeout = subscriptions.EndWriteTimeout

// maxReadRecords bounds the records of one read (subscriptions.MaxReadRecords).
const maxReadRecords = subscriptions.MaxReadRecords
