// Package relocate is a replicated region's placement changes as one node takes part in
// them (issue 30; docs/architecture.md, "Who moves leaderships" and "Moving replicas"):
// draining a node and balancing leaderships (drain.go), removing a node (moveremove.go),
// moving a group's replica from one node to another, undoing a move whose destination died
// (move.go, moveprogress.go), the replica balancer and the replacement of a node down
// longer than --replace-after (balance.go), and the region's nodes as 'quicmq nodes' and
// the admin API read and change them (nodes.go: manage.Nodes).
//
// Why a package of its own, and not node/placement: node/placement decides where a
// single-copy region's topics live, a pure table filled from catalogs; this package changes
// where a replicated region's groups and leaderships are, through the region's metadata
// group and raft's configuration changes. What it decides is recorded as metadata records
// of its own (drain records, version 4, and move records, version 5: records.go, drain.go,
// move.go) that every node applies alike, so a drain or a move survives the crash of any
// node taking part in it. Its state (drained nodes, nodes being removed, moves in progress,
// this node's requests not yet applied) is its own; the placement itself is the node's:
// a move's end changes it through Meta.Moved.
//
// Files, in reading order: relocate.go (Relocator, Config, what it sees of the node:
// Raft, Meta, Mesh), records.go (the records' decoding), drain.go (drains, leader balance,
// the hand-off at a stop), move.go (removals and moves: records and MoveLoop),
// moveprogress.go (a move's progress announced and recorded, undoing a move),
// moveremove.go (a removal asked, recorded, and the node leaving the metadata group),
// balance.go (the replica balancer, replacements), nodes.go (the admin API's region
// nodes), testhooks.go (what the node's tests of whole regions read).
//
// Goroutines: two, started by the node with its replicated path's others (Relocator.DrainLoop
// and Relocator.MoveLoop, every Raft.ObserveInterval and when woken), and returning when
// their context ends. DrainLoop owns the leadership side (its transfers' last tries, the
// last balance, the leads and drain-request tags it announced); MoveLoop owns the move side
// (the remove-request, moves-done and move-bytes tags, the sources' transfer tries, the
// balancer's down-since table). The applied state (drained nodes; removals and moves in
// progress) is written only by the node's metadata reader (ApplyDrain, ApplyMove, on the
// node's watchMeta goroutine) and requests (an admin request's goroutine), under a mutex
// each (drainer.mu, mover.mu), and read by both loops and the admin API. HandOff runs on
// the node's Run goroutine at a graceful stop and waits for DrainLoop's transfers.
//
// What it must not touch: the placement tables, the raft driver's groups and the gossip
// tags other than its own (drainreq, leads, removereq, movesdone, movebytes): it reaches
// them only through Config's Raft (a *replica.Driver), Meta (the node's copy of the
// metadata: members, groups, how far it has read, and the one change a move's end makes)
// and Mesh (gossip, the links, what the region's builds know). So it imports node/manage
// (for the admin API's rows), replica, routing, gossip and wal, never node.
package relocate
