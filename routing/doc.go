// Package routing is QuicMQ's pure routing logic: the subject grammar (topics and
// wildcard patterns), matching a pattern against a topic, the interest table that
// answers "which subscriptions want this topic", and rendezvous placement of a
// topic's log on one member of a region (Owner) or of its replica set (Place), and the
// replica balancer's next moves of raft groups between a region's nodes (PlanBalance).
//
// It is a pure core in the sense of etcd raft's RawNode: it starts no goroutines,
// opens no sockets, reads no clock and imports nothing else of QuicMQ. Everything it
// decides comes in as arguments and goes out as return values, so node, federation
// and gossip can share one definition of a subject and test it exhaustively.
//
// Grammar. A topic is dot-separated tokens, each matching [A-Za-z0-9_-]+, at most
// MaxTopicLen bytes and MaxTokens tokens in all. A pattern may in addition use "*"
// (exactly one token) and ">" (one or more trailing tokens, only as the last token).
// Every concrete topic is also a valid pattern, which matches only itself.
//
// Concurrency. The functions are safe to call from any goroutine. A Table guards its
// trie with a sync.RWMutex (Match is read-mostly) and its result cache with a second
// lock, always taken after the first.
package routing
