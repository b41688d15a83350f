package node

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
)

// Rolling upgrades (docs/operations.md, "Upgrading one node at a time"): a node announces in
// gossip what it knows, as levels of named features, and a change that an older build could
// not read (a new raft entry kind or layout, a new frame or field on a peer link, a new
// metadata record) is used only once every node that may read it announces the level that
// carries it. Gossip is a hint, and a hint is enough here: a node that does not announce a
// feature is taken not to know it, so a late or lost announcement only delays a feature.

// FeaturesTag is the gossip tag holding a node's features (in MemberInfo.Tags: quicmq members
// shows it; absent on a node of release v0.2.0 or older): comma-separated name=level items in name
// order (a bare name is level 1), e.g. "entry=1,grouplayout=2,kind=9,meta=2,poslayout=2,proto=2".
// Items a node does not know are kept and ignored, so a later build may add any.
const FeaturesTag = "feat"

// The features a node announces.
const (
	// featProto is the highest client protocol version the node reads on a peer link
	// (wire.PeerVersion: 2, while it speaks 3 to clients). The client protocol's frames a node
	// sends a peer on a peer link follow it: from version 2 a receiver skips fields after
	// those it knows in extensible frames (protocol.md, "Versions"), so a field may be added
	// to such a frame for a peer that announces 2 or more.
	featProto = "proto"
	// featEntry, featKind, featPosLayout and featGroupLayout are the raft entry format's
	// version, highest kind and body layouts (replica.EntryFeatures).
	featEntry       = "entry"
	featKind        = "kind"
	featPosLayout   = "poslayout"
	featGroupLayout = "grouplayout"
	// featEnvelope is the driver's framing of proposals in raft entries
	// (replica.EnvelopeFeature: 2 reads batch entries, many proposals in one).
	featEnvelope = "envelope"
	// featMeta is the highest version of a record of the region's metadata group the node
	// applies (replmeta.go: 1 placement, 2 member; replgroups.go: 3 groups; drain.go: 4
	// drain; move.go: 5 remove and move, 6 undo a move). A node skips a
	// record it cannot decode, alike on every node of one build, so a new record waits until
	// every node announces it.
	featMeta = "meta"
)

// features maps a feature's name to the level a node knows; an absent name is level 0.
type features map[string]int

// localFeatures is what this build knows.
func localFeatures() features {
	f := features{featProto: wire.PeerVersion, featMeta: moveUndoVersion}
	maps.Copy(f, replica.EntryFeatures())
	return f
}

// untaggedFeatures is what a node that announces no FeaturesTag is taken to know: it runs a
// release from before the tag (internal/release/RELEASES: v0.1.0 or v0.2.0; no older build
// is a release), so the least of them, v0.1.0's: client protocol 1, raft entries of version
// 1, kinds up to 9, position and group layouts 2, metadata records up to version 2 (v0.2.0
// speaks protocol 2 too, and is taken not to: a feature waits a little longer, never less).
// Never changed: it describes builds that exist.
var untaggedFeatures = features{featProto: 1, featEntry: 1, featKind: 9, featPosLayout: 2, featGroupLayout: 2, featMeta: 2}

func (f features) String() string {
	var items []string
	for _, name := range slices.Sorted(maps.Keys(f)) {
		items = append(items, name+"="+strconv.Itoa(f[name]))
	}
	return strings.Join(items, ",")
}

// parseFeatures reads a FeaturesTag value. Malformed items are skipped (a level that is not
// a number is unknown, so level 0): a node never refuses a peer over its announcement.
func parseFeatures(s string) features {
	f := features{}
	for item := range strings.SplitSeq(s, ",") {
		name, level, hasLevel := strings.Cut(strings.TrimSpace(item), "=")
		if name == "" {
			continue
		}
		v := 1
		if hasLevel {
			n, err := strconv.Atoi(level)
			if err != nil || n < 0 {
				continue
			}
			v = n
		}
		f[name] = max(f[name], v)
	}
	return f
}

// memberFeatures is what a member announces it knows.
func memberFeatures(m gossip.Member) features {
	v, ok := m.Tags[FeaturesTag]
	if !ok {
		return maps.Clone(untaggedFeatures)
	}
	return parseFeatures(v)
}

// allKnow reports whether every member of region knows feature name at level or above, and
// names those that do not. The members counted are those gossip knows in any status but
// left: a failed node comes back with the build it ran, and until it is reaped it may still
// read what is written now. A region of which no member is known is not known to know
// anything. For this node's own region the node itself counts with localFeatures.
func allKnow(members []gossip.Member, region, self string, own features, name string, level int) (bool, []string) {
	var lacking []string
	seen := 0
	for _, m := range members {
		if m.Region != region || m.Status == gossip.StatusLeft {
			continue
		}
		seen++
		f := memberFeatures(m)
		if m.Name == self {
			f = own
		}
		if f[name] < level {
			lacking = append(lacking, fmt.Sprintf("%s (%s=%d)", m.Name, name, f[name]))
		}
	}
	if seen == 0 {
		return false, []string{"no node of region " + region + " known"}
	}
	return len(lacking) == 0, lacking
}

// ownFeatures is what this node takes itself to know: localFeatures, or, for a test's node
// standing for an older build (Config.noFeatures), what such a node knows.
func (n *Node) ownFeatures() features {
	if n.cfg.noFeatures {
		return untaggedFeatures
	}
	return localFeatures()
}

// RegionKnows reports whether every node of this node's region knows feature name at level
// or above (the gate for a new raft entry kind or layout, or a new metadata record), and
// names the nodes that do not. A standalone node is a region of one.
func (n *Node) RegionKnows(name string, level int) (bool, []string) {
	if n.gossip == nil {
		if localFeatures()[name] >= level {
			return true, nil
		}
		return false, []string{n.cfg.Name}
	}
	return allKnow(n.gossip.RegionMembers(n.cfg.Region), n.cfg.Region, n.cfg.Name, n.ownFeatures(), name, level)
}

// LinkKnows reports whether both ends of a link to peerRegion know feature name at level or
// above: every node of this region and of peerRegion (a mirror is served by any node of the
// origin and stored by every replica here). It names the nodes that do not.
func (n *Node) LinkKnows(peerRegion, name string, level int) (bool, []string) {
	ok, lacking := n.RegionKnows(name, level)
	if n.gossip == nil {
		return false, append(lacking, "no link to region "+peerRegion)
	}
	peerOK, peerLacking := allKnow(n.gossip.RegionMembers(peerRegion), peerRegion, n.cfg.Name, n.ownFeatures(), name, level)
	return ok && peerOK, append(lacking, peerLacking...)
}

// setMeshTag sets one of the node's gossip tags and broadcasts it (no-op when unchanged).
func (n *Node) setMeshTag(key, value string) error {
	n.tagMu.Lock()
	defer n.tagMu.Unlock()
	if v, ok := n.meshTags[key]; ok && v == value {
		return nil
	}
	tags := maps.Clone(n.meshTags)
	tags[key] = value
	if err := n.gossip.SetTags(tags); err != nil {
		return err
	}
	n.meshTags = tags
	return nil
}
