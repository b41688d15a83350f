package node

import (
	"context"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/wal"
)

// manageLocal is this node's side of management (manage.Local): the consumers and topics of
// its log (manage.go, manage_groups.go, replretain.go) and its links to the region's other
// nodes (manage_wire.go). node/manage composes it into what a client, a peer or the
// operator asks of the region.
type manageLocal struct{ n *Node }

var _ manage.Local = manageLocal{}

func (l manageLocal) Consumers(a *auth.Principal, name string) ([]manage.Consumer, *wire.Error) {
	return l.n.consumers(a, name)
}

func (l manageLocal) ResetConsumer(ctx context.Context, a *auth.Principal, name string, kind wire.StartKind, value uint64, force bool) (manage.Consumer, *wire.Error) {
	return l.n.resetConsumer(ctx, a, name, kind, value, force)
}

func (l manageLocal) DeleteConsumer(ctx context.Context, a *auth.Principal, name string, force bool) (int, *wire.Error) {
	return l.n.deleteConsumer(ctx, a, name, force)
}

func (l manageLocal) CheckMembers(ctx context.Context, a *auth.Principal, c manage.Consumer, op string, force bool) *wire.Error {
	return l.n.checkMembers(ctx, a, c, op, force)
}

// CreateTopic answers with every field a listing's row has (protocol.md: one rule for both
// answers).
func (l manageLocal) CreateTopic(ctx context.Context, a *auth.Principal, stored string, cfg wal.TopicConfig, update bool) (wire.TopicInfo, *wire.Error) {
	ti, e := l.n.createTopic(ctx, a, stored, cfg, update)
	if e != nil {
		return wire.TopicInfo{}, e
	}
	info := manage.TopicInfo(ti)
	info.Leader, info.Replicas = l.n.topicHolders(ti.Name)
	return info, nil
}

func (l manageLocal) RemoveTopic(ctx context.Context, a *auth.Principal, stored string, op byte, force bool) (uint64, *wire.Error) {
	return l.n.removeTopic(ctx, a, stored, op, force)
}

func (l manageLocal) RemoveReplicated(r manage.Request, stored string, f *wire.TopicRemove) (uint64, bool, *wire.Error) {
	return l.n.removeReplicated(r, stored, f) // replretain.go
}

func (l manageLocal) Owner(ctx context.Context, stored string) (string, *wire.Error) {
	o, e := l.n.place.Owner(ctx, stored)
	if e != nil || o == l.n.cfg.Name {
		return "", e
	}
	return o, nil
}

func (l manageLocal) AskRegion(ctx context.Context, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	return l.n.askRegion(ctx, req, fn)
}

func (l manageLocal) AskNode(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	return l.n.askNode(ctx, node, req, fn)
}

func (l manageLocal) Replicated() (string, bool) { return l.n.cfg.Region, l.n.rep != nil }
