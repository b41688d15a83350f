// Package node is a QuicMQ broker node: the QUIC listener and client sessions, publishing,
// subscriptions, consumer groups, management, and the placement of topics on the nodes of
// a region, single-copy or replicated. It wires together the log (package wal), subject
// routing (routing), the raft groups (replica), gossip (gossip) and the links to other
// nodes and regions (federation); none of those imports node.
//
// # Reading order
//
// The concerns that stand alone are packages of their own beneath this one (imports point
// down only: internal/layering checks it), each with a doc.go saying what it owns and what it
// must not touch:
//
//   - node/auth: credentials, the principal a session acts for, tenant namespaces, grants.
//   - node/features: what a build knows, as gossip announces it, for rolling upgrades.
//   - node/placement: which node of a single-copy region owns each topic.
//   - node/vector: portable positions read from the log.
//   - node/tail: what the subscriptions of one topic share: its shared tail and the fanouts
//     (one writer per connection for its caught-up subscriptions), over tail.Member.
//   - node/subscriptions: subscriptions: a subscription's cursors, reads, sweep, acks,
//     upstreams and vectors, its run loop and its inbox, its stream and writer goroutine,
//     the table of live subscriptions, and exclusive durables (the held durables of their
//     home node, holder streams). It sees the node as a subscriptions.Host.
//   - node/groups: live shared consumer groups (their state, dispatch, acks, dead letters)
//     and their members' streams (run loop and ack reader).
//   - node/sharedstream: the benchmark's shared-stream ablation (all of a connection's
//     subscriptions on one stream), over the subscription core; it sees the session as a
//     sharedstream.Session (node/ablation.go).
//   - node/manage: management: consumer and topic management over a node or a region (the
//     management stream's requests, the admin API's /v1/consumers and /v1/topics), this
//     node's side of it (manage.Here: its log's consumers, group states and topics, given
//     the live subscriptions and groups), and the whole admin HTTP API (members, links,
//     gossip keys, the region's nodes).
//   - node/relocate: a replicated region's placement changes as this node takes part in
//     them: drains and leader balance, removals, replica moves and their undoing, the
//     replica balancer and replacements (their metadata records, its two goroutines), and
//     the region's nodes as the admin API shows and changes them (manage.Nodes). It sees the
//     raft driver, the node's copy of the metadata and the region through three interfaces
//     (relocate.Raft, Meta, Mesh), which node/relocate.go implements.
//
// The rest is this package, in the files named, in the order a newcomer reads them:
//
//   - Assembly and lifecycle: config.go (every setting), node.go (New, Run, Close), tls.go,
//     mesh.go (the node's gossip tags and what its region knows), metrics.go.
//   - Client sessions: session.go (one goroutine per connection: HELLO, streams, limits),
//     clientpaths.go (clients whose address changed).
//   - Publishing: publish.go (the publish stream: group-committed appends, acks after the
//     synced commit, I2), publishorder.go (order per topic across placements and leader
//     moves), relay.go (a publish for a topic another node owns or leads).
//   - Subscriptions, the session's side (the rest is node/subscriptions): subscribe.go (a
//     SUBSCRIBE authorized, counted, sent to a group member, a durable's lock or a
//     pass-through, else made and served by node/subscriptions), subhost.go (the node as
//     subscriptions.Host; n.topics, where the region keeps a topic, chosen once in New:
//     subscriptions.SingleCopy or the replicated topics, as subscriptions.Region), durables.go
//     (where an exclusive durable's lock is taken), ablation.go (the session's side
//     of the benchmark's shared-stream mode, node/sharedstream).
//   - Consumer groups: groups.go (the table of live groups: join, leave, what a group needs
//     of the node; groups.Where, chosen once in New: the node's log, or groups.Replicated),
//     member.go (a member's SUBSCRIBE: its settings, its home, then its groups.Stream),
//     grouprelay.go (one holder per region: the home, and a relay's stream there, whose
//     frames groups.Relay passes), grouprepl.go (groupRaft, what
//     groups.Replicated needs of the raft groups, and the group entries' proposals).
//   - Management (the rest is node/manage): manage.go (what manage.Here and the admin API
//     are given: the log, the live subscriptions and groups, the replicated path's
//     functions, the region's nodes from node/relocate; the management stream handed to
//     manage.Here.Serve; AdminHandler), peerask.go (asking another node over its link),
//     topics.go (the TOPICS listing, streamed page by page).
//   - Placement, single-copy: node/placement, and passthrough.go (a subscription passed on
//     to another region for a direct replay).
//   - Placement and the log, replicated: replicated.go (the driver's start, the topics'
//     groups, observing leaders), replsm.go (the state machine), replform.go (forming the
//     metadata group), replplace.go (placing topics), replroute.go (finding a topic's
//     leader), replpropose.go (the replicated publish path), replfed.go (raft over the
//     links), replmeta.go (metadata records), replgroups.go (raft groups hold many topics),
//     replask.go and replcreate.go (creating topics in batches), replconfig.go,
//     replmember.go (a node whose data was lost rejoins), replpos.go, replretain.go,
//     replmetrics.go; relocate.go (what node/relocate is given: the driver, the metadata as
//     relocate.Meta, the region as relocate.Mesh; a move's end applied to the placement).
//   - Deliberately broken builds: *_broken.go and *_ok.go pairs, each behind a
//     quicmq_broken_* build tag; scripts/broken.sh lists them with the test that must catch
//     each.
//
// # Goroutines and what they own
//
//   - Run owns the accept loop, the topic watcher and one goroutine per connection
//     (session). A session's goroutine accepts streams; each stream gets its own
//     goroutines, so a stream blocked on flow control holds up nothing else (one QUIC
//     stream per subscription, I4).
//   - A publish stream has a reader (submits group-committed appends to the log, or
//     proposals to a raft group) and a writer (sends acks in order, after the synced commit
//     or the quorum's: I2).
//   - A subscription stream has a run goroutine (owns its cursors, reads the log up to the
//     durable high-watermark only: I3), a writer and an ack reader. Its memory is its
//     cursors plus a bounded read-ahead, whatever its lag (I5). node/subscriptions/doc.go
//     says which goroutine owns what: others tell the run goroutine things through its
//     inbox; only the ACK checks' small struct has several writers.
//   - In a replicated region, replica.Driver's one goroutine owns every raft group of the
//     node; node talks to it through proposals and Status (replicated.go). Beside it run
//     node/relocate's DrainLoop and MoveLoop (leaderships; removals and moves), started
//     and stopped with the replicated path's other goroutines (replicated.start);
//     node/relocate/doc.go says what each owns.
package node
