package groups

import (
	"context"
	"fmt"
	"github.com/quicmq/quicmq/internal/wire"
	"log/slog"
	"time"

	"github.com/quicmq/quicmq/wal"
)

// The node's group settings (Config) and what a group needs of its node (Env).

// Config holds the node's consumer group defaults and bounds.
type Config struct {
	// AckWait is a group's ack-wait when its first member does not set one: how long a
	// delivered record may stay unacknowledged before it is delivered again. Default 30 s.
	AckWait time.Duration
	// MaxDeliver is a group's max-deliver when its first member does not set one: after that
	// many deliveries a record goes to the dead-letter topic. Default 5.
	MaxDeliver int
	// Window caps a group's outstanding records over all its topics: those handed out and
	// not yet acknowledged or dead-lettered, and those given back and waiting to be handed
	// out again. It is the bound of a group's memory (a few hundred bytes per record) and of
	// each stored state; the span between a topic's floor and the next record handed out is
	// not bounded. Default 1024.
	Window int
	// MemberBatch is how many records a member takes at a time when it has room. Default 64.
	MemberBatch int
	// MemberPending caps the records one member holds delivered and not acknowledged: a
	// member that stops reading keeps room on its stream until its flow-control window
	// fills, and takes no more than this meanwhile. Default 256.
	MemberPending int
}

func (c *Config) WithDefaults() {
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&c.MaxDeliver, 5}, {&c.Window, 1024}, {&c.MemberBatch, 64}, {&c.MemberPending, 256}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
}

// Validate reports the problems of c, prefixed "Groups.".
func (c Config) Validate() []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxDeliver", c.MaxDeliver}, {"Window", c.Window}, {"MemberBatch", c.MemberBatch}, {"MemberPending", c.MemberPending}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("node: config: Groups.%s must not be negative, got %d", f.name, f.v))
		}
	}
	if c.AckWait < 0 {
		errs = append(errs, fmt.Errorf("node: config: Groups.AckWait must not be negative, got %v", c.AckWait))
	}
	return errs
}

// Env is what the groups need of their node: its log, its region and the node's group
// settings, and where a group's state and dead-letter records are written (its own log, or
// the topic's raft group: grouprepl.go). One per node, shared by its live groups.
type Env struct {
	Wal    *wal.Log
	Log    *slog.Logger
	Region string
	Cfg    Config
	// store writes a group's settings and the states of its topics that changed, durably.
	// Its states are one per topic, in the order of the topics' names mostly.
	Store func(ctx context.Context, name string, set *wal.GroupSettings, states []wal.TopicGroupState) error
	// appendDeadLetter appends records to a dead-letter topic, durably.
	AppendDeadLetter func(ctx context.Context, topic string, recs []wal.Record) error
	// mirrored loads the states of a group mirrored from other regions, by topic.
	Mirrored func(name string) map[string][]*wal.GroupState
	// ReadAhead is how many bytes a member's stream buffers before it writes them
	// (node.Config.ReadAhead).
	ReadAhead int
	// Placed is closed at the next placement change (a leader change among them), or nil
	// when none can move a group; Moved is the error that ends a member whose group is now
	// served by another node (its topic's new leader), or nil.
	Placed func() <-chan struct{}
	Moved  func(g *Group) *wire.Error
}
