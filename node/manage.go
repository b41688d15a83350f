package node

import (
	"context"
	"net/http"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/replica"
)

// Management's assembly (docs/operations.md "Managing consumers and topics"): node/manage
// serves the management streams' requests and the admin API, over this node's log, its live
// subscriptions and groups (manage.Here); what it needs of the rest of the node is given
// here, once, in manage.HereConfig and manage.AdminConfig.

// newHere makes this node's side of management (New, once the log, the placement and the
// replicated path exist).
func (n *Node) newHere() *manage.Here {
	cfg := manage.HereConfig{
		Name: n.cfg.Name, Region: n.cfg.Region, Log: n.log, Wal: n.wal,
		InRegion:             n.place != nil,
		Replicated:           n.rep != nil,
		MaxDurablesPerTenant: n.cfg.MaxDurablesPerTenant,
		Subscriptions:        n.liveSubscriptions,
		Groups:               &n.cons,
		// A group's state of a replicated topic is replicated state (grouprepl.go), except
		// in the broken build that keeps it on the serving node only.
		ReplicatedGroupTopic: func(topic string) bool { return !groupStateLocalOnly && n.topics.IsReplicated(topic) },
		SetGroup: func(ctx context.Context, name, topic string, op *replica.GroupOp) *wire.Error {
			_, e := n.rep.setGroup(ctx, name, topic, op)
			return e
		},
		Holders:          n.topicHolders,
		RemoveReplicated: n.removeReplicated, // replretain.go
		ForgetTopic:      n.metrics.topic.forget,
		AskNode:          n.askNode,
	}
	if n.place != nil {
		cfg.Owner = n.place.Owner
		cfg.Peers = func() []string {
			var peers []string
			for _, m := range n.place.Members() {
				if m.Name != n.cfg.Name && m.Status == gossip.StatusAlive {
					peers = append(peers, m.Name)
				}
			}
			return peers
		}
	}
	return manage.NewHere(cfg)
}

// manage serves a management stream (docs/protocol.md "Management streams"): one request
// frame, answered by CONSUMER_INFO, TOPIC_INFO or DONE frames and FIN, or by ERROR.
func (s *session) manage(str *quic.Stream, req wire.Frame) {
	w := wire.NewWriter(str)
	r := manage.Request{Ctx: s.ctx, A: s.actor, Peer: s.peer, From: s.peerName}
	e, ok := s.n.here.Serve(r, s.version, w, req)
	switch {
	case e != nil:
		s.failStream(str, e)
	case ok:
		w.Flush()
		str.Close() // the client closed its side after the request
	}
}

// AdminHandler serves /metrics (Prometheus) and the admin API (manage.Admin says what it
// serves). Its state-changing endpoints are served only with Config.AdminAPI. Bind it to
// an address only operators reach.
func (n *Node) AdminHandler() http.Handler {
	cfg := manage.AdminConfig{
		Here: n.here, Metrics: n.MetricsHandler(), QUICTag: tagQUIC,
		StateChanging: n.cfg.AdminAPI, MigrateTimeout: n.cfg.MigrateTimeout,
	}
	// Set only when there: an interface holding a nil pointer is not nil.
	if n.gossip != nil {
		cfg.Gossip = n.gossip
	}
	if n.fed != nil {
		cfg.Links = n.fed
	}
	if n.rep != nil {
		cfg.Nodes = n.rep.reloc.Nodes()
	}
	return manage.Admin(cfg)
}
