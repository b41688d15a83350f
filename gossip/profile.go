package gossip

import (
	"log"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
)

// eventBuffer is the capacity of each pool's serf event channel. serf sends on it while
// holding its member lock, and serf's internal query relay goroutine blocks on it, so it
// must be drained (Run does); the buffer only absorbs a burst, or the gap between New and
// Run.
const eventBuffer = 1024

// serfConfig builds the serf (and memberlist) config of one pool from the profile, the
// bind and advertise addresses, the label and the key.
func (c Config) serfConfig(pool Pool, tags map[string]string, events chan<- serf.Event, logger *log.Logger) *serf.Config {
	sc := serf.DefaultConfig()
	var ml *memberlist.Config
	switch c.Profile {
	case ProfileLocal, ProfileTest:
		ml = memberlist.DefaultLocalConfig()
	default:
		if pool == PoolWAN {
			ml = memberlist.DefaultWANConfig()
		} else {
			ml = memberlist.DefaultLANConfig()
		}
	}
	switch c.Profile {
	case ProfileTest:
		applyTestTimers(sc, ml)
	case ProfileDefault:
		ml.RetransmitMult = lossyRetransmitMult
	}
	c.applyLeaveTimeout(sc)

	bind, adv := c.LANAddr, c.AdvertiseLAN
	ml.Label = c.lanLabel()
	if pool == PoolWAN {
		bind, adv = c.WANAddr, c.AdvertiseWAN
		ml.Label = wanLabel
	}
	host, port, _ := parseBind(bind) // checked by Validate
	ml.BindAddr, ml.BindPort = host, port
	ml.AdvertiseAddr, ml.AdvertisePort = "", port
	if adv != "" {
		ah, ap, _ := parseBind(adv)
		ml.AdvertiseAddr = ah
		if ap != 0 {
			ml.AdvertisePort = ap
		}
		// With port 0, memberlist sets AdvertisePort to the port it bound.
	}
	if c.Key != nil {
		// A keyring with Key as the primary and ExtraKeys accepted; verification on both
		// ways (memberlist's default with a keyring, set here so that it cannot be lost):
		// a plaintext or wrongly keyed packet is dropped, never processed. Validate
		// checked the key sizes, which is all NewKeyring can fail on.
		keys := make([][]byte, 0, 1+len(c.ExtraKeys))
		for _, k := range c.ExtraKeys {
			keys = append(keys, append([]byte(nil), k...))
		}
		ml.Keyring, _ = memberlist.NewKeyring(keys, append([]byte(nil), c.Key...))
		ml.GossipVerifyIncoming = true
		ml.GossipVerifyOutgoing = true
	}
	ml.Logger = logger
	ml.LogOutput = nil

	sc.NodeName = c.Name
	sc.Tags = tags
	sc.EventCh = events
	sc.Logger = logger
	sc.LogOutput = nil
	sc.MemberlistConfig = ml
	sc.SnapshotPath = "" // the table is rebuilt by joining; no snapshots
	return sc
}

// lossyRetransmitMult is how many times (times log10 of the pool size, rounded up) each
// broadcast is sent in the production profile, where memberlist's default is 4. A false
// death is a suspicion whose news is lost on its way to the suspect, or whose refutation is
// lost on its way back: with every transmission lost at rate p, that happens to a share of
// about 2 p^R of the suspicions. In a region of two nodes nobody can be asked for an
// indirect probe, so at 20 % loss each direction a member is suspected every few minutes
// and, with R = 4, about one suspicion in 300 ended in a false death (campaign 4 saw one in
// about five minutes). With R = 8 it is about one in 100,000 at 20 % loss, and the suspect
// still hears of the suspicion (8 gossip rounds of 200 ms on the LAN) and refutes it well
// within the 4 s a suspicion lasts. The cost is bandwidth: each membership change is sent a
// few more times, some hundred bytes for a region of a few nodes.
// bench/campaign's TestCampaignGossipLoss measures it (docs/reliability.md, campaign 4).
const lossyRetransmitMult = 8

// applyTestTimers makes failure detection, dissemination and reaping fast on loopback.
// SuspicionMult 2 gives k = 0 confirmations, so a suspect is declared dead after the
// minimum suspicion timeout (2 x ProbeInterval) even in a two-node pool, where nobody could
// confirm the suspicion.
func applyTestTimers(sc *serf.Config, ml *memberlist.Config) {
	// Fast, but not so fast that a node of a loaded test machine (2 cores, -race, several
	// packages at once) stalls past a probe and is declared failed: a node declared failed
	// loses its links (node.peers), which a test sees as a broken relay.
	ml.ProbeInterval = 400 * time.Millisecond
	ml.ProbeTimeout = 400 * time.Millisecond
	ml.SuspicionMult = 3
	ml.SuspicionMaxTimeoutMult = 2
	ml.GossipInterval = 50 * time.Millisecond
	ml.GossipNodes = 3
	ml.RetransmitMult = 4 // DefaultLocalConfig's 2 loses joins among 6+ nodes under -race
	ml.PushPullInterval = 2 * time.Second
	ml.TCPTimeout = time.Second
	ml.GossipToTheDeadTime = 2 * time.Second
	ml.DeadNodeReclaimTime = time.Millisecond // a restarted node may take its name back at once

	sc.BroadcastTimeout = time.Second
	sc.LeavePropagateDelay = 300 * time.Millisecond
	sc.ReapInterval = 250 * time.Millisecond
	sc.ReconnectInterval = 500 * time.Millisecond
	sc.ReconnectTimeout = 6 * time.Second
	sc.TombstoneTimeout = 6 * time.Second
	sc.FlapTimeout = time.Second
	sc.QueueCheckInterval = time.Second
}

// localLeaveTimeout is ProfileLocal's LeaveTimeout: on one host a leave reaches the live
// peers in a few milliseconds, and 'quicmq dev' stopping as a whole must not wait serf's 11 s
// for peers that are stopping too.
const localLeaveTimeout = time.Second

// applyLeaveTimeout sets serf's leave timers from LeaveTimeout (or ProfileLocal's default);
// with neither, the profile's timers stay.
func (c Config) applyLeaveTimeout(sc *serf.Config) {
	lt := c.LeaveTimeout
	if lt == 0 && c.Profile == ProfileLocal {
		lt = localLeaveTimeout
	}
	if lt > 0 {
		sc.BroadcastTimeout = lt * 2 / 5
		sc.LeavePropagateDelay = lt / 5
	}
}

// leaveBound is the longest a graceful leave of one pool can take: serf waits up to
// BroadcastTimeout for its leave intent to go out, memberlist as long again for its dead
// message, then serf sleeps LeavePropagateDelay. Both pools leave in parallel.
func (c Config) leaveBound() time.Duration {
	sc := serf.DefaultConfig()
	if c.Profile == ProfileTest {
		applyTestTimers(sc, memberlist.DefaultLocalConfig())
	}
	c.applyLeaveTimeout(sc)
	return 2*sc.BroadcastTimeout + sc.LeavePropagateDelay
}
