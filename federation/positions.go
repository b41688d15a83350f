package federation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// Mirrored positions (docs/architecture.md, "Portable positions").
//
// A durable consumer's position is stored with its vector (node/subscriptions/vector.go): per origin region,
// the last origin offset it acknowledged, which means the same in every region. The node
// serving a mirror stream of a topic sends, every PositionInterval, a POSITION frame for each
// position of that topic stored in its region whose update time changed since it last sent
// it (never a cursor, never a position it got from another region: a full mesh carries each
// region's own positions to every other). The mirroring node stores each one under
// MirroredPositionName(origin region, durable), its value the time its origin stored it, so a
// late frame (a link superseded) never replaces a newer one. A consumer that subscribes under
// that name in this region with no position of its own newer than it resumes after it
// (node/subscriptions/vector.go): at least once, within the mirroring lag of the position.
//
// Only a mirror stream of its own carries POSITION (not the shared-link ablation's). A node
// that does not know POSITION ends the mirror stream on it: the nodes of a mesh are upgraded
// together.

const mirroredPositionInfix = "/durable/"

// MirroredPositionName is the wal position name under which a durable consumer's position
// mirrored from region is stored: "mirror/REGION/durable/NAME" (kept apart from consumers'
// names, which hold no "mirror/" prefix, and from mirror cursors, "mirror/REGION").
func MirroredPositionName(region, durable string) string {
	return cursorName(region) + mirroredPositionInfix + durable
}

// ParseMirroredPosition is MirroredPositionName's inverse.
func ParseMirroredPosition(name string) (region, durable string, ok bool) {
	return parseMirrored(name, mirroredPositionInfix)
}

// parseMirrored splits the name of a consumer's state mirrored from a region,
// "mirror/REGION" + infix + NAME, into the region and the consumer's name.
func parseMirrored(name, infix string) (region, consumer string, ok bool) {
	rest, ok := strings.CutPrefix(name, cursorName(""))
	if !ok {
		return "", "", false
	}
	region, consumer, ok = strings.Cut(rest, infix)
	return region, consumer, ok && region != "" && consumer != ""
}

// servePositions buffers and flushes, on a mirror stream, the changed positions of each
// cursor's topic. Serving goroutine.
func (f *Federation) servePositions(w *wire.Writer, cursors []*serveCursor) error {
	n := 0
	for _, c := range cursors {
		if c.topicBeforeHead {
			continue // the shared-link ablation carries no positions
		}
		n += f.bufferPositions(w, c)
		n += f.bufferGroupPositions(w, c) // groups.go
	}
	if n == 0 {
		return nil
	}
	return w.Flush()
}

// bufferPositions buffers a POSITION for each position of c's topic that has a vector and
// changed since the last sent on the stream, and returns how many.
func (f *Federation) bufferPositions(w *wire.Writer, c *serveCursor) int {
	type changed struct {
		name    string
		updated int64
	}
	var todo []changed
	f.cfg.Log.Positions(wal.PositionFilter{Topic: c.topic}, func(p wal.PositionInfo) bool {
		if strings.HasPrefix(p.Name, cursorName("")) || p.Updated.IsZero() {
			return true // a cursor, a position mirrored here, or one stored before times
		}
		if u := p.Updated.UnixNano(); c.sentPos[p.Name] != u {
			todo = append(todo, changed{p.Name, u})
		}
		return true
	})
	sent := 0
	for _, ch := range todo {
		if c.sentPos == nil {
			c.sentPos = make(map[string]int64)
		}
		c.sentPos[ch.name] = ch.updated
		_, vec, ok, err := f.cfg.Log.PositionVector(ch.name, c.topic)
		if err != nil || !ok || len(vec) == 0 || len(vec) > wire.MaxVectorOrigins {
			continue
		}
		p := &wire.Position{Durable: ch.name, Time: ch.updated, Origins: make([]wire.OriginOffset, 0, len(vec))}
		for _, r := range slices.Sorted(maps.Keys(vec)) {
			p.Origins = append(p.Origins, wire.OriginOffset{Region: r, Offset: vec[r]})
		}
		w.Buffer(p)
		sent++
	}
	return sent
}

// storePosition stores a POSITION from the mirror's origin region, unless the one stored is
// as new or newer (in a replicated region through Config.MirrorPosition). Mirror run
// goroutine.
func (m *mirror) storePosition(ctx context.Context, p *wire.Position) error {
	name := MirroredPositionName(m.l.peer.Region, p.Durable)
	l := m.l.f.cfg.Log
	if stored, ok, err := l.Position(name, m.topic); err != nil || ok && stored >= uint64(p.Time) {
		return err
	}
	vec := make(map[string]uint64, len(p.Origins))
	for _, o := range p.Origins {
		vec[o.Region] = o.Offset
	}
	pos := wal.Position{Name: name, Topic: m.topic, Value: uint64(p.Time), Vector: vec}
	var err error
	if store := m.l.f.cfg.MirrorPosition; store != nil {
		err = store(ctx, pos) // through the topic's raft group, which compares again
	} else {
		err = l.SetPosition(ctx, pos)
	}
	switch {
	case err == nil:
	case errors.Is(err, wal.ErrClosed), ctx.Err() != nil:
		return fmt.Errorf("store position of %q mirrored from %s: %w", p.Durable, m.l.peer.Region, err)
	default: // the log refuses it (a topic deleted, no quorum): the records go on
		m.l.log.Warn("mirrored position not stored", "topic", m.topic, "durable", p.Durable, "origin", m.l.peer.Region, "err", err)
	}
	return nil
}
