package features

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/quicmq/quicmq/gossip"
)

// Tag is the gossip tag holding a node's features (in MemberInfo.Tags: quicmq members
// shows it; absent on a node of release v0.2.0 or older): comma-separated name=level items in name
// order (a bare name is level 1), e.g. "entry=1,grouplayout=2,kind=9,meta=2,poslayout=2,proto=2".
// Items a node does not know are kept and ignored, so a later build may add any.
const Tag = "feat"

// The features a node announces.
const (
	// Proto is the highest client protocol version the node reads on a peer link
	// (wire.PeerVersion: 2, while it speaks 3 to clients). The client protocol's frames a node
	// sends a peer on a peer link follow it: from version 2 a receiver skips fields after
	// those it knows in extensible frames (protocol.md, "Versions"), so a field may be added
	// to such a frame for a peer that announces 2 or more.
	Proto = "proto"
	// Entry, featKind, PosLayout and GroupLayout are the raft entry format's
	// version, highest kind and body layouts (replica.EntryFeatures).
	Entry       = "entry"
	Kind        = "kind"
	PosLayout   = "poslayout"
	GroupLayout = "grouplayout"
	// Envelope is the driver's framing of proposals in raft entries
	// (replica.EnvelopeFeature: 2 reads batch entries, many proposals in one).
	Envelope = "envelope"
	// Meta is the highest version of a record of the region's metadata group the node
	// applies (replmeta.go: 1 placement, 2 member; replgroups.go: 3 groups; drain.go: 4
	// drain; move.go: 5 remove and move, 6 undo a move). A node skips a
	// record it cannot decode, alike on every node of one build, so a new record waits until
	// every node announces it.
	Meta = "meta"
	// Catalog is the level of the federation's catalog stream a node reads: 1, a HEAD that
	// follows its topic's TOPIC carries in position the serving region's own head, the
	// offset after its last record first published there (federation Config.OwnHeads;
	// docs/protocol.md, "Catalog stream"). Absent: position equal to next.
	Catalog = "catalog"
	// PublishOpen is the level of the publish stream a node reads: 1, a PUBLISH_OPEN
	// frame may open it, and its any-order flag makes the node answer each publish once it
	// is durable, in any order (docs/protocol.md, "Publish stream"). A relaying node sends
	// it only to a node that announces it.
	PublishOpen = "publishopen"
	// PublishMulti is the level of the publish stream a node reads on a peer link: 1, a
	// relayed stream may carry PUBLISH_MULTI, publishes to many topics in one frame
	// (docs/protocol.md, "Node-to-node links"). A relaying node sends it only to a node that
	// announces it, and PUBLISH_BATCH to any other.
	PublishMulti = "publishmulti"
)

// Set maps a feature's name to the level a node knows; an absent name is level 0.
type Set map[string]int

// Untagged is what a node that announces no Tag is taken to know: it runs a
// release from before the tag (internal/release/RELEASES: v0.1.0 or v0.2.0; no older build
// is a release), so the least of them, v0.1.0's: client protocol 1, raft entries of version
// 1, kinds up to 9, position and group layouts 2, metadata records up to version 2 (v0.2.0
// speaks protocol 2 too, and is taken not to: a feature waits a little longer, never less).
// Never changed: it describes builds that exist.
var Untagged = Set{Proto: 1, Entry: 1, Kind: 9, PosLayout: 2, GroupLayout: 2, Meta: 2}

// String is the Set as a Tag value.
func (f Set) String() string {
	var items []string
	for _, name := range slices.Sorted(maps.Keys(f)) {
		items = append(items, name+"="+strconv.Itoa(f[name]))
	}
	return strings.Join(items, ",")
}

// Parse reads a Tag value. Malformed items are skipped (a level that is not
// a number is unknown, so level 0): a node never refuses a peer over its announcement.
func Parse(s string) Set {
	f := Set{}
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

// Of is what a member announces it knows.
func Of(m gossip.Member) Set {
	v, ok := m.Tags[Tag]
	if !ok {
		return maps.Clone(Untagged)
	}
	return Parse(v)
}

// AllKnow reports whether every member of region knows feature name at level or above, and
// names those that do not. The members counted are those gossip knows in any status but
// left: a failed node comes back with the build it ran, and until it is reaped it may still
// read what is written now. A region of which no member is known is not known to know
// anything. For this node's own region the node itself counts with the node's own features.
func AllKnow(members []gossip.Member, region, self string, own Set, name string, level int) (bool, []string) {
	var lacking []string
	seen := 0
	for _, m := range members {
		if m.Region != region || m.Status == gossip.StatusLeft {
			continue
		}
		seen++
		f := Of(m)
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
