// Package nodeproc is the cluster harness for node processes: `quicmq node` children run by
// tests, campaigns and benchmarks, beside node/nodetest's nodes in process.
//
// A Process is one node, started from a built binary; Start returns once the node says it
// listens. One goroutine reads its log (stderr) for its whole life and owns what is learnt
// from it: the addresses it bound, its links coming up, the raft snapshots it installed, the
// lines a caller asked to keep and the last lines for failure messages. The faults a test
// needs of a process are methods: Kill (SIGKILL), Stop (SIGTERM, then SIGKILL), Signal
// (SIGSTOP and SIGCONT pause and resume it). CPU, Sched and Memory read /proc.
//
// A Region is N node processes of one region on loopback: their names, data directories
// and gossip addresses fixed for the whole test, so a node restarts as itself; the flags a
// test adds; the waits they share (links up); who leads a topic (asked of the nodes with
// `quicmq topics`, as an operator would); and the faults by node: Kill, Stop, Pause and
// Resume, Wipe, Restart, and Isolate (an nftables cut of one node from the others, both
// ways, silently; root and nft, or the test is skipped). A Region can also hold nodes that
// are not among its Nodes (Extra): a node that joins later under another name. A Mesh is
// regions sharing a CA, joined over the WAN pool, each node on fixed client and WAN
// addresses, so that clients and the other regions reach a restarted node again.
//
// A Child is any other quicmq command a test runs as a process: a `quicmq sub` client, a
// `quicmq dev`, a command line of a banner through sh. One goroutine reads its standard output
// to the end and then reaps it; every line is kept with the time it arrived and taken in order
// with Next (nothing lost when the reader falls behind or comes after the exit), standard error
// whole; Stop interrupts it (SIGINT), Kill kills it.
//
// FreeAddr hands out loopback addresses free for TCP and UDP, below the ephemeral range, for
// a node that must come back on the same address after a kill; every harness in a test
// process takes them from it, so two never get the same port.
//
// With QUICMQ_NODE_LOGS=DIR in the environment, every line of every node's log is also
// appended to DIR/NAME.log, for a campaign's post-mortem.
//
// It imports only internal/testlog of the module: node's own tests and benchmarks,
// cmd/quicmq's and the bench module's campaigns all use it. Dialing a node with the SDK is
// the caller's (Node.Proc().Addr and Region.CAFile).
package nodeproc
