// Package manage is consumer and topic management as a client, a peer node or the operator
// asks for it (docs/operations.md "Managing consumers and topics"): the requests of a
// management stream (docs/protocol.md "Management streams") and of the admin API's
// /v1/consumers and /v1/topics, for a principal, over one node or a whole region.
//
// It owns the region's view: which node serves a topic request, the merge of the consumer
// listings of every node of a region into one row per consumer (a replicated topic's row
// counted once), the order of a region-wide reset or removal (members checked everywhere
// first, then each node changed), and how a consumer looks to a client (CONSUMER_INFO) and
// to the operator (JSON), and the consumers' Prometheus series (NewCollector). It holds no
// state of its own between requests.
//
// It must not touch a node's log, subscriptions or consumer groups: it reaches one node's
// consumers and topics, and the other nodes of the region, only through Local, which the
// node implements (node/manage_local.go). So it can be read, and tested, without the node's
// sessions, publishing or replication.
package manage
