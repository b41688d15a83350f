// Package campaign runs QuicMQ's network fault campaigns (docs/reliability.md, campaigns 3
// and 4): real `quicmq node` processes in Linux network namespaces, with the faults made by
// nftables through the bench/lossy harness: random packet loss on every packet of the mesh
// (QUIC and gossip), and partitions between regions (whole, one-way, flapping).
//
// It lives in the bench module because it needs root, nft and ip, which the main module's
// tests must not. The tests skip, with the reason, where the harness cannot run; their
// default run is short, and QUICMQ_CAMPAIGN_LONG=1 runs the long variants.
//
// The judge, Check, is the same as campaign 2's (cmd/quicmq/checker_campaign_test.go,
// copied because the main module cannot import the bench module): every acknowledged record
// present at its offset, nothing stored twice, every record of a region mirrored to every
// other region exactly once. Clients run inside the namespaces as helper processes (the
// test binary itself, see TestMain), because the namespaces cannot be reached from outside.
package campaign
