// Package features is what a node's build knows, as gossip announces it, for rolling
// upgrades (docs/operations.md, "Upgrading one node at a time"): a node announces in
// gossip what it knows, as levels of named features, and a change that an older build could
// not read (a new raft entry kind or layout, a new frame or field on a peer link, a new
// metadata record) is used only once every node that may read it announces the level that
// carries it. Gossip is a hint, and a hint is enough here: a node that does not announce a
// feature is taken not to know it, so a late or lost announcement only delays a feature.
//
// It is pure: it reads gossip members given to it and owns no state. The node says what its
// own build knows (node/mesh.go) and gates each new raft entry, metadata record and peer
// frame on AllKnow.
package features
