// Package placement decides which node of a region holds each topic's log (invariant I6),
// for a region whose topics are single-copy; a replicated region's topics are placed by its
// metadata raft group instead (node/replicated.go), and this package only says who mirrors
// them.
//
// A topic whose log exists on a node is owned by that node, for good: a node joining never
// moves it. Every node learns the others' topics from the catalog stream of its link to each
// of them (federation.Config.OnCatalog). A topic no node holds yet is placed by rendezvous
// hashing over the region's members that have not left, failed ones included: a failed
// owner's topics are unavailable until it returns, never re-created elsewhere. Two logs of
// one topic (possible only when nodes disagreed on membership, e.g. during a partition) are a
// conflict: counted in a metric, logged, never merged; every node then routes the topic to
// the same holder (rendezvous among the holders), and the other log is left untouched.
//
// It owns the catalogs and the conflicts, behind one lock. It must not touch the log or the
// links itself: what it needs of them (does this node hold a log of a topic, is a link up,
// look again at what to mirror) comes as functions in Config, so the table can be read and
// tested without a node.
package placement
