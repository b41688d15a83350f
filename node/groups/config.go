package groups

import (
	"fmt"
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
// settings, and where a group's state and dead-letter records are written (Where: its own
// log, or the topic's raft group). One per node, shared by its live groups.
type Env struct {
	Wal    *wal.Log
	Log    *slog.Logger
	Region string
	Cfg    Config
	// Where is where the groups keep their state and dead letters, and whether a group
	// moved: the node's own log, or its replicated topics' raft groups (where.go).
	Where Where
	// mirrored loads the states of a group mirrored from other regions, by topic.
	Mirrored func(name string) map[string][]*wal.GroupState
	// ReadAhead is how many bytes a member's stream buffers before it writes them
	// (node.Config.ReadAhead).
	ReadAhead int
}
