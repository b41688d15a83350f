package node

import (
	"maps"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/node/relocate"
	"github.com/quicmq/quicmq/replica"
)

// What this node announces in gossip and what it knows of the others' builds (node/features).

// FeaturesTag is the gossip tag holding a node's features (features.Tag).
const FeaturesTag = features.Tag

// localFeatures is what this build knows.
func localFeatures() features.Set {
	f := features.Set{features.Proto: wire.PeerVersion, features.Meta: relocate.MoveUndoVersion, features.Catalog: 1, features.PublishOpen: 1, features.PublishMulti: 1}
	maps.Copy(f, replica.EntryFeatures())
	return f
}

// ownFeatures is what this node takes itself to know: localFeatures, or, for a test's node
// standing for an older build (Config.noFeatures), what such a node knows.
func (n *Node) ownFeatures() features.Set {
	if n.cfg.noFeatures {
		return features.Untagged
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
	return features.AllKnow(n.gossip.RegionMembers(n.cfg.Region), n.cfg.Region, n.cfg.Name, n.ownFeatures(), name, level)
}

// LinkKnows reports whether both ends of a link to peerRegion know feature name at level or
// above: every node of this region and of peerRegion (a mirror is served by any node of the
// origin and stored by every replica here). It names the nodes that do not.
func (n *Node) LinkKnows(peerRegion, name string, level int) (bool, []string) {
	ok, lacking := n.RegionKnows(name, level)
	if n.gossip == nil {
		return false, append(lacking, "no link to region "+peerRegion)
	}
	peerOK, peerLacking := features.AllKnow(n.gossip.RegionMembers(peerRegion), peerRegion, n.cfg.Name, n.ownFeatures(), name, level)
	return ok && peerOK, append(lacking, peerLacking...)
}

// peerKnows reports whether node name of this node's region announces feature name at
// level or above, and this node knows it too (a test's node standing for an older build
// does not: Config.noFeatures). A node gossip does not know is taken not to.
func (n *Node) peerKnows(name, feature string, level int) bool {
	if n.gossip == nil || n.ownFeatures()[feature] < level {
		return false
	}
	for _, m := range n.gossip.RegionMembers(n.cfg.Region) {
		if m.Name == name {
			return features.Of(m)[feature] >= level
		}
	}
	return false
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
