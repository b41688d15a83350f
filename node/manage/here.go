package manage

import (
	"context"
	"log/slog"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/node/subscriptions"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/wal"
)

// HereConfig is what this node's side of management needs of the node, given once by
// node.New: the log, the live subscriptions and groups, and the few things only the
// node's assembly knows (where a topic is served, the replicated path, its links).
type HereConfig struct {
	Name   string // the node's name
	Region string // its region's name
	Log    *slog.Logger
	Wal    *wal.Log
	// InRegion: the node is one of a region of several (it has gossip), so that a client's
	// or the operator's request may concern the other nodes too (Manager.Region).
	InRegion bool
	// Replicated: the region replicates its topics (Config.Replicas > 1).
	Replicated bool
	// MaxDurablesPerTenant caps a tenant's durables and groups stored on this node.
	MaxDurablesPerTenant int

	// Subscriptions are the subscriptions served now (not group members).
	Subscriptions func() []*subscriptions.Subscription
	// Groups is the node's table of live consumer groups.
	Groups LiveGroups
	// ReplicatedGroupTopic reports whether a group's state of topic is replicated state,
	// which a reset or removal changes through SetGroup.
	ReplicatedGroupTopic func(topic string) bool
	// SetGroup proposes op on group name's state of a replicated topic to the topic's raft
	// group, and returns once it is committed (only called for a ReplicatedGroupTopic).
	SetGroup func(ctx context.Context, name, topic string, op *replica.GroupOp) *wire.Error
	// Holders names a topic's leader and replicas (empty for a single-copy topic).
	Holders func(topic string) (leader string, replicas []string)
	// RemoveReplicated is Local.RemoveReplicated (only called when Replicated).
	RemoveReplicated func(r Request, stored string, f *wire.TopicRemove) (records uint64, ok bool, e *wire.Error)
	// ForgetTopic deletes a deleted topic's series of the node's own (publish counts).
	ForgetTopic func(topic string)
	// Owner names the node of the region serving topic stored (only called InRegion).
	Owner func(ctx context.Context, stored string) (string, *wire.Error)
	// Peers names the region's other live nodes (only called InRegion).
	Peers func() []string
	// AskNode is Local.AskNode.
	AskNode func(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) *wire.Error
}

// LiveGroups is the node's table of live consumer groups (node/groups.go), as management
// reads and fences it.
type LiveGroups interface {
	// Group is the live group name (stored) on this node, or nil.
	Group(name string) *groups.Group
	// All are the groups live on this node.
	All() []*groups.Group
	// Fence keeps members from joining group name (stored) until unfence is called; op
	// ("reset", "removed") says why to a member refused meanwhile.
	Fence(name, op string) (unfence func(), e *wire.Error)
}

// Here is this node's side of management, the Local that Manager composes: the consumers
// and topics of its log for a principal (a tenant sees and changes only its own consumers
// and topics, and only within its grants: docs/security.md), and its links to the region's
// other nodes. It holds no state of its own: what it reads and changes is the log's, the
// live subscriptions' and the live groups'.
//
// A durable consumer is its stored positions: "NAME" for a client without a tenant,
// "tenant/T/NAME" for tenant T. Mirror cursors ("mirror/REGION", federation's cursor names)
// are positions too but belong to federation: they are never listed as consumers, only named
// as dependents of a topic.
type Here struct {
	cfg HereConfig
}

var _ Local = (*Here)(nil)

// NewHere makes this node's side of management.
func NewHere(cfg HereConfig) *Here { return &Here{cfg: cfg} }

// endPoll is how often a forced reset or removal checks whether the members it ended are
// gone (they end within one ack round trip).
const endPoll = 2 * time.Millisecond

// Manager is a Manager of request r: over the region when this node is one of a region's
// and the request is not a peer's (a peer's request is served from this node's log alone).
func (h *Here) Manager(r Request) *Manager {
	return &Manager{Request: r, Local: h, Region: h.cfg.InRegion && !r.Peer}
}

// CreateTopic answers with every field a listing's row has (protocol.md: one rule for both
// answers).
func (h *Here) CreateTopic(ctx context.Context, a *auth.Principal, stored string, cfg wal.TopicConfig, update bool) (wire.TopicInfo, *wire.Error) {
	ti, e := h.createTopic(ctx, a, stored, cfg, update)
	if e != nil {
		return wire.TopicInfo{}, e
	}
	info := TopicInfo(ti)
	info.Leader, info.Replicas = h.cfg.Holders(ti.Name)
	return info, nil
}

func (h *Here) RemoveReplicated(r Request, stored string, f *wire.TopicRemove) (uint64, bool, *wire.Error) {
	return h.cfg.RemoveReplicated(r, stored, f)
}

func (h *Here) Owner(ctx context.Context, stored string) (string, *wire.Error) {
	o, e := h.cfg.Owner(ctx, stored)
	if e != nil || o == h.cfg.Name {
		return "", e
	}
	return o, nil
}

// AskRegion sends req to every other live node of the region and hands each answer frame to
// fn. A node that cannot be asked fails the request (CodeUnavailable): a consumer's state
// there would be missed or left unchanged.
func (h *Here) AskRegion(ctx context.Context, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	for _, node := range h.cfg.Peers() {
		if e := h.cfg.AskNode(ctx, node, req, fn); e != nil && e.Code != wire.CodeNotFound {
			return e
		}
	}
	return nil
}

func (h *Here) AskNode(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	return h.cfg.AskNode(ctx, node, req, fn)
}

func (h *Here) Replicated() (string, bool) { return h.cfg.Region, h.cfg.Replicated }
