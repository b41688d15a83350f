// Package manage is a node's management: consumer and topic management as a client, a peer
// node or the operator asks for it (docs/operations.md "Managing consumers and topics"), and
// the admin HTTP API (`--admin`: docs/operations.md "A single node" and "Managing consumers
// and topics").
//
// Files, in reading order:
//
//   - manager.go: Manager, a request over one node or a whole region: which node serves a
//     topic request, the merge of the consumer listings of every node of a region into one
//     row per consumer (a replicated topic's row counted once), the order of a region-wide
//     reset or removal (members checked everywhere first, then each node changed); over
//     Local, one node's operations and its links to the region's other nodes.
//   - consumer.go: Consumer, and how it looks to a client (CONSUMER_INFO); metrics.go: the
//     consumers' Prometheus series (NewCollector).
//   - here.go: Here, this node's Local, over HereConfig (what node.New gives it once);
//     here_consumers.go: durables (stored positions, connected members), listed, reset and
//     removed; here_groups.go: consumer groups (stored and live state) the same way;
//     here_topics.go: topics created, configured, purged and deleted, refused while they
//     have dependents; names.go: a name names one consumer, and a tenant's cap.
//   - stream.go: a management stream's request answered (Here.Serve).
//   - admin.go: the admin API's /v1/consumers and /v1/topics (Routes), JSON and errors;
//     adminapi.go: the whole admin API (Admin, AdminConfig); adminmesh.go: gossip members
//     and keys, the links' options; nodes.go: the region's nodes with replicated topics
//     (NodeInfo, drain, undrain, remove) over Nodes.
//
// What it owns: what a management request means and how it is answered, on the stream and
// over HTTP; the order of region-wide operations; which consumers and topics a principal
// sees; the refusals (members connected, dependents, names taken, a tenant's cap) and their
// messages. It holds no state of its own between requests, and starts no goroutine: each
// request runs on its caller's (a session's stream goroutine, an HTTP handler's).
//
// What it must not touch: the node's sessions, publishing, the subscriptions' and groups'
// state (only through their methods: Subscription.End, Group.EndMembers, DropTopic, Purged,
// LiveState), the table of live groups (LiveGroups, which node/groups.go owns: a reset or
// removal fences a group's name there), and the replicated path: a replicated group state's
// change (HereConfig.SetGroup), a replicated topic's purge or delete
// (HereConfig.RemoveReplicated) and the region's nodes, drains and removals (Nodes) are the
// node's, given as functions and interfaces. Asking another node goes through
// HereConfig.AskNode (the node's links). So it is read, and tested, over a log alone
// (here_test.go) or a fake Local (manager_test.go), without sessions or replication.
package manage
