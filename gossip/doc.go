// Package gossip owns a node's membership: one serf LAN pool per region and one serf WAN
// pool across regions, and the member table built from their events.
//
// Why two pools: failure detection inside a region should be fast (LAN timers), while the
// WAN pool spans slow, lossy links between regions and needs patient timers. Each pool has
// its own port and a memberlist label ("quicmq-lan/<region>", "quicmq-wan"), so a node
// cannot join another region's LAN pool, or a WAN port with a LAN join, by mistake.
//
// Gossip is a discovery hint, never authorization: anyone holding the gossip key can forge
// membership, so the QUIC links between nodes are authenticated with mTLS elsewhere. The
// member table tells the node package which members of a region have not left (placement
// by rendezvous hashing), which member owns a topic, and where to dial peers in other
// regions.
//
// Encryption. With Config.Key both pools encrypt and authenticate every packet (AES-GCM)
// and verify both ways: plaintext or wrongly keyed packets are dropped, and a node with
// another key cannot join. Without a key the pools are plaintext (development only; a
// warning is logged). InstallKey, UseKey and RemoveKey rotate the key while the pools run,
// without membership flapping (see keys.go); ExtraKeys lets a node restarted mid-rotation
// accept the old key too.
//
// Lifecycle and goroutines. New validates the config and creates both serf instances,
// which binds their ports (LANAddr and WANAddr are right at once). serf cannot be created
// unstarted: its own goroutines (memberlist listeners, probes, gossip, serf's reaper) start
// inside New, and they are stopped by Close. Run is the single goroutine of ours: it drains
// both serf event channels (serf blocks when they are not drained; they are buffered so a
// short gap before Run is harmless), maintains the member table, updates metrics and
// dispatches events to subscribers. When ctx ends or Close is called, Run leaves both pools
// gracefully (in parallel, bounded by Config.LeaveTimeout or the profile's), shuts serf down
// while it keeps draining, and returns. Close waits for that, or does it itself when Run was
// never started. serf's and memberlist's log lines go to the Logger at their levels
// (logging.go), except that once a deliberate leave has begun, the warnings the leave itself
// causes (its broadcast timing out when the peers stop too, closed sockets, peers that
// stopped first) are logged at INFO: stopping is not a failure.
//
// The member table has one entry per node name and pool; Members merges the two pools of a
// name into one Member, preferring what the LAN pool says (it is the faster and closer
// observer) and falling back to the WAN pool for other regions' nodes.
package gossip
