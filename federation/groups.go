package federation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// Mirrored group positions (docs/architecture.md, "Portable positions").
//
// A consumer group's state of a topic is stored with its vector (node/groupvector.go): per
// origin region the last origin offset it handed out, and its outstanding records by origin
// and origin offset, which mean the same in every region. As for durables (positions.go), the
// node serving a mirror stream sends, every PositionInterval, a GROUP_POSITION for each group
// state of the stream's topic stored in its region whose update time changed since it last
// sent it (never one it got from another region). The mirroring node stores it under
// MirroredGroupName(origin region, group), as a group state with the origin's update time and
// every outstanding record in its vector's Elsewhere, unless the one stored is as new or newer.
// A group that starts following the topic in this region with no state of its own newer than
// it resumes from it (node/groupvector.go).
//
// A node that does not know GROUP_POSITION ends the mirror stream on it (as on POSITION): the
// nodes of a mesh are upgraded together.

const mirroredGroupInfix = "/group/"

// MirroredGroupName is the wal group name under which a consumer group's state mirrored from
// region is stored: "mirror/REGION/group/NAME" (no group a client names holds a "/", and a
// tenant's group is "tenant/T/NAME").
func MirroredGroupName(region, group string) string {
	return cursorName(region) + mirroredGroupInfix + group
}

// ParseMirroredGroup is MirroredGroupName's inverse.
func ParseMirroredGroup(name string) (region, group string, ok bool) {
	return parseMirrored(name, mirroredGroupInfix)
}

// bufferGroupPositions buffers a GROUP_POSITION for each group state of c's topic that has a
// vector and changed since the last sent on the stream, and returns how many.
func (f *Federation) bufferGroupPositions(w *wire.Writer, c *serveCursor) int {
	sent := 0
	err := f.cfg.Log.GroupStatesOf(c.topic, func(group string, s *wal.GroupState) bool {
		if strings.HasPrefix(group, cursorName("")) || s.Vector == nil || s.Updated.IsZero() {
			return true // mirrored here, or stored without a vector or a time
		}
		u := s.Updated.UnixNano()
		if c.sentGroup[group] == u {
			return true
		}
		if c.sentGroup == nil {
			c.sentGroup = make(map[string]int64)
		}
		c.sentGroup[group] = u
		if p := groupPosition(group, s); p != nil {
			w.Buffer(p)
			sent++
		}
		return true
	})
	if err != nil {
		f.log.Warn("group positions not mirrored", "topic", c.topic, "err", err)
	}
	return sent
}

// groupPosition is s as a GROUP_POSITION, nil when it is over the frame's bounds.
func groupPosition(group string, s *wal.GroupState) *wire.GroupPosition {
	v := s.Vector
	if len(v.Through) > wire.MaxVectorOrigins || len(s.Entries)+len(v.Elsewhere) > wire.MaxGroupOutstanding {
		return nil
	}
	p := &wire.GroupPosition{Group: group, Time: s.Updated.UnixNano(),
		Through: make([]wire.OriginOffset, 0, len(v.Through)), Outstanding: make([]wire.OriginOffset, 0, len(s.Entries)+len(v.Elsewhere))}
	for _, r := range slices.Sorted(maps.Keys(v.Through)) {
		p.Through = append(p.Through, wire.OriginOffset{Region: r, Offset: v.Through[r]})
	}
	for _, e := range s.Entries {
		p.Outstanding = append(p.Outstanding, wire.OriginOffset{Region: e.Origin.Region, Offset: e.Origin.Offset})
	}
	for _, r := range v.Elsewhere {
		p.Outstanding = append(p.Outstanding, wire.OriginOffset{Region: r.Region, Offset: r.Offset})
	}
	return p
}

// storeGroupPosition stores a GROUP_POSITION from the mirror's origin region, unless the one
// stored is as new or newer (in a replicated region through Config.MirrorGroup). Mirror run
// goroutine.
func (m *mirror) storeGroupPosition(ctx context.Context, p *wire.GroupPosition) error {
	st := &wal.GroupState{Updated: time.Unix(0, p.Time), Vector: &wal.GroupVector{Through: make(map[string]uint64, len(p.Through)), Skipping: true}}
	for _, o := range p.Through {
		st.Vector.Through[o.Region] = o.Offset
	}
	for _, o := range p.Outstanding {
		st.Vector.Elsewhere = append(st.Vector.Elsewhere, wal.OriginRef{Region: o.Region, Offset: o.Offset})
	}
	name := MirroredGroupName(m.l.peer.Region, p.Group)
	var err error
	if store := m.l.f.cfg.MirrorGroup; store != nil {
		err = store(ctx, name, m.topic, st) // through the topic's raft group, which compares
	} else {
		_, err = m.l.f.cfg.Log.SetMirroredGroup(ctx, name, m.topic, st)
	}
	switch {
	case err == nil:
	case errors.Is(err, wal.ErrClosed), ctx.Err() != nil:
		return fmt.Errorf("store group position of %q mirrored from %s: %w", p.Group, m.l.peer.Region, err)
	default: // the log refuses it (a replicated topic, a topic deleted, a name over the limit): the records go on
		m.l.log.Warn("mirrored group position not stored", "topic", m.topic, "group", p.Group, "origin", m.l.peer.Region, "err", err)
	}
	return nil
}
