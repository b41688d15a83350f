package relocate

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/replica"
)

// MetaGroup is the raft group of the region's metadata (the node's MetaGroup; its records
// are placements, drains and moves). A group ID is stored state: it never changes.
const MetaGroup uint64 = 1

// errRecord is the error of a drain or move record that cannot be decoded.
var errRecord = errors.New("relocate: malformed metadata record")

// Config is what the node gives a Relocator once (node/relocate.go).
type Config struct {
	Name     string // this node's name
	Region   string // this node's region
	ID       uint64 // this node's raft ID
	Replicas int    // the region's replica count (--replicas): fewer nodes may not stay
	Settings Settings
	Log      *slog.Logger
	// Registerer takes the drains', moves' and balancer's metrics.
	Registerer prometheus.Registerer
	// Changes counts the raft membership changes this node proposes, by step (the node's
	// quicmq_raft_membership_changes_total, which a rejoin counts too).
	Changes *prometheus.CounterVec
	Raft    Raft
	Meta    Meta
	Mesh    Mesh
}

// Settings are the node's raft settings that placement changes use (node.RaftSettings,
// whose fields document units and defaults; the node fills them in).
type Settings struct {
	TickInterval, ObserveInterval, QuorumTimeout time.Duration
	ElectionTicks                                int
	BalanceInterval                              time.Duration // < 0: no leader balance
	Moves                                        int           // replica moves in progress at most
	DisableReplicaBalance                        bool
	ReplaceAfter                                 time.Duration // <= 0: never
	StopHandOff                                  time.Duration // < 0: no hand-off at stop
	// CaughtUp is how many entries behind its group's commit a learner may be and count as
	// caught up (promoted, or given a departing voter's vote).
	CaughtUp uint64
}

// Raft is the node's raft driver (a *replica.Driver): the groups' roles and configurations,
// the proposals and membership changes placement changes make.
type Raft interface {
	Role(group uint64) (replica.Role, bool)
	Membership(ctx context.Context, group uint64) (replica.Membership, error)
	Propose(ctx context.Context, group uint64, data []byte) (replica.Result, error)
	ProposeConfChange(ctx context.Context, group uint64, cc *raftpb.ConfChangeV2) error
	TransferLeadership(ctx context.Context, group, to uint64) error
	JoinGroup(ctx context.Context, group uint64) error
	Wake(ctx context.Context, group uint64) error
	CatchupBytes(ctx context.Context, group uint64) (uint64, error)
}

// Meta is the node's copy of the region's metadata: the metadata group's members, the
// groups as placed, how far this node has read; and the one change a move makes to it.
type Meta interface {
	// Formed reports whether the region's metadata group is formed.
	Formed() bool
	// Members is the metadata group's membership and the raft IDs its records named.
	Members() Members
	// Groups lists every data group declared, by ID; Group finds one.
	Groups() []Group
	Group(id uint64) (Group, bool)
	// LocalGroups lists the data groups this node holds a replica of.
	LocalGroups() []uint64
	// GroupLabel names a group in metrics and logs.
	GroupLabel(id uint64) string
	// ReadAll reports whether this node has applied every metadata record committed.
	ReadAll(ctx context.Context) bool
	// WaitRead waits until this node has applied the metadata record at offset (or ctx ends).
	WaitRead(ctx context.Context, offset uint64)
	// Moved changes the placement: group's replica on from is on to (raft ID toID) now.
	Moved(group uint64, from, to string, toID uint64)
}

// Members is the metadata group's membership as its records say.
type Members struct {
	Voters, Learners []uint64
	IDs              map[string]uint64 // node name -> raft ID (the last record wins)
	Names            map[uint64]string // every raft ID a record named
}

// All is the voters and the learners.
func (m Members) All() []uint64 { return append(append([]uint64(nil), m.Voters...), m.Learners...) }

// Group is a data group as placed.
type Group struct {
	ID       uint64
	Label    string
	Replicas []Replica // in preference order
	Local    bool      // this node holds a replica
}

// Replica is a node holding a group's replica.
type Replica struct {
	Name string
	ID   uint64
}

// Names names the group's replicas' nodes.
func (g Group) Names() []string {
	out := make([]string, len(g.Replicas))
	for i, m := range g.Replicas {
		out[i] = m.Name
	}
	return out
}

// Mesh is the region as gossip and the links show it.
type Mesh interface {
	// Gossip reports whether the node runs gossip (a node without it announces nothing and
	// sees no other node).
	Gossip() bool
	// RegionMembers lists the region's gossip members with their tags.
	RegionMembers() []gossip.Member
	// SetTag sets this node's gossip tag key.
	SetTag(key, value string) error
	// MemberStatus is node name's gossip status.
	MemberStatus(name string) gossip.Status
	// RaftMembers lists the region's nodes that announce a raft ID, this one included, by name.
	RaftMembers() []Member
	// MemberName names the node announcing raft ID id ("" if none).
	MemberName(id uint64) string
	// Reachable reports whether node name can be reached now.
	Reachable(name string) bool
	// RegionKnows reports whether every node of the region knows feature at level, naming
	// those that do not (node/features).
	RegionKnows(feature string, level int) (bool, []string)
}

// Member is a node of the region with a raft ID, as gossip tells.
type Member struct {
	Name  string
	ID    uint64
	Alive bool
}

// Relocator is a node's side of the region's placement changes: drains, leader balance,
// removals, replica moves, the replica balancer and replacements (doc.go).
type Relocator struct {
	cfg  Config
	log  *slog.Logger
	id   uint64
	d    Raft
	meta Meta
	mesh Mesh

	drain drainer  // drain.go: drained nodes, leader hand-offs and balance
	moves mover    // move.go: nodes being removed and replica moves
	bal   balancer // balance.go: the replica balancer and replacements (MoveLoop's goroutine)
}

// New registers the metrics; nothing runs until DrainLoop and MoveLoop.
func New(cfg Config) *Relocator {
	r := &Relocator{cfg: cfg, log: cfg.Log, id: cfg.ID, d: cfg.Raft, meta: cfg.Meta, mesh: cfg.Mesh}
	r.drain.init(cfg.Registerer)
	r.moves.init(cfg.Registerer)
	r.bal.init(cfg.Registerer)
	return r
}

// Gone reports whether node name is being removed or was removed: it is given no new
// replica, no leadership and no metadata membership.
func (r *Relocator) Gone(name string) bool { return r.moves.gone(name) }
