// Package lossy makes lossy networks for QuicMQ's benchmarks and tests out of Linux network
// namespaces and nftables, because tc netem is not available on the machines they run on.
//
// A Namespace is a network namespace the harness creates (and removes) itself, with its
// loopback up. SetLoss installs an nftables rule that drops a random fraction of the packets
// on the INPUT hook: a drop on the output hook would be reported to the sender as an error
// (quic-go then closes the connection, TCP resends at once) instead of being lost on the
// way, so only input drops behave like loss on a real path. Every packet on lo passes the
// input hook once, so a rate of 1% loses 1% of the packets in each direction. Link joins two
// namespaces with a veth pair (two hosts); Partition cuts them apart and Heal rejoins them.
//
// Everything the harness creates is named with the prefix "qmqb-" and the creating
// process's id, is registered until removed, and is removed by Close, by CloseAll (which
// CleanupOnSignal calls on SIGINT or SIGTERM) and, for namespaces left by a process that was
// killed, by RemoveStale. Check reports, before anything is created, why the harness cannot
// run here (not root, no nft, no ip): callers skip their scenario with that message instead
// of faking it.
package lossy
