package gossip

import (
	"cmp"
	"maps"
	"net"
	"slices"
	"strconv"

	"github.com/hashicorp/serf/serf"
)

// Status is a member's state as a pool sees it.
type Status int

const (
	StatusUnknown Status = iota
	// StatusAlive: the member answers probes.
	StatusAlive
	// StatusLeaving: the member announced a graceful leave that is not complete yet.
	StatusLeaving
	// StatusLeft: the member left gracefully (Close). It stays in the table as a tombstone
	// until reaped.
	StatusLeft
	// StatusFailed: the member stopped answering without leaving (crash, kill, partition).
	// It stays in the table until it comes back or is reaped; a failed owner keeps its
	// topics (they are unavailable, not moved).
	StatusFailed
)

func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusLeaving:
		return "leaving"
	case StatusLeft:
		return "left"
	case StatusFailed:
		return "failed"
	default:
		return "unknown"
	}
}

func statusFromSerf(s serf.MemberStatus) Status {
	switch s {
	case serf.StatusAlive:
		return StatusAlive
	case serf.StatusLeaving:
		return StatusLeaving
	case serf.StatusLeft:
		return StatusLeft
	case serf.StatusFailed:
		return StatusFailed
	default:
		return StatusUnknown
	}
}

// Pool is a set of gossip pools, as bits.
type Pool uint8

const (
	PoolLAN Pool = 1 << iota // the region's LAN pool
	PoolWAN                  // the WAN pool across regions
)

func (p Pool) String() string {
	switch p {
	case PoolLAN:
		return "lan"
	case PoolWAN:
		return "wan"
	case PoolLAN | PoolWAN:
		return "lan+wan"
	case 0:
		return "none"
	default:
		return "pool(" + strconv.Itoa(int(p)) + ")"
	}
}

// Member is one node as the member table knows it.
type Member struct {
	Name   string
	Region string // the "region" tag; "" for a member that is not a QuicMQ node
	// Addr is the member's gossip address (IP:PORT) in the pool that describes it: the LAN
	// pool when the member is known there, else the WAN pool. It is not a QUIC address: those
	// are in Tags.
	Addr string
	// Tags are all the member's tags, including "region" and "role". The map is a copy.
	Tags   map[string]string
	Status Status
	// Pools are the pools this node knows the member in (in any status). Status, Addr and
	// Tags come from the LAN pool when Pools has PoolLAN.
	Pools Pool
}

// EventKind is what happened to a member in a pool.
type EventKind int

const (
	EventJoin   EventKind = iota + 1 // the member joined, or came back after a failure
	EventLeave                       // the member left gracefully
	EventFail                        // the member failed: stopped answering without leaving
	EventUpdate                      // the member's tags changed
	EventReap                        // the member was removed from the pool's table
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventFail:
		return "fail"
	case EventUpdate:
		return "update"
	case EventReap:
		return "reap"
	default:
		return "unknown"
	}
}

func kindFromSerf(t serf.EventType) (EventKind, bool) {
	switch t {
	case serf.EventMemberJoin:
		return EventJoin, true
	case serf.EventMemberLeave:
		return EventLeave, true
	case serf.EventMemberFailed:
		return EventFail, true
	case serf.EventMemberUpdate:
		return EventUpdate, true
	case serf.EventMemberReap:
		return EventReap, true
	default:
		return 0, false
	}
}

// Event is a change of one member in one pool. A node of this region that is also in the
// WAN pool gives two events for one change, one per pool.
type Event struct {
	Kind EventKind
	Pool Pool // the pool that reported the change
	// Member is the member as that pool sees it (Pools == Pool). Members() is the merged
	// view of both pools.
	Member Member
}

func memberFromSerf(pool Pool, sm serf.Member) Member {
	return Member{
		Name:   sm.Name,
		Region: sm.Tags[TagRegion],
		Addr:   net.JoinHostPort(sm.Addr.String(), strconv.Itoa(int(sm.Port))),
		Tags:   maps.Clone(sm.Tags),
		Status: statusFromSerf(sm.Status),
		Pools:  pool,
	}
}

func (m Member) clone() Member {
	m.Tags = maps.Clone(m.Tags)
	return m
}

// mergeMembers merges the two pools' tables into one Member per name, LAN first, sorted by
// region then name.
func mergeMembers(lan, wan map[string]Member, keep func(Member) bool) []Member {
	out := make([]Member, 0, len(lan)+len(wan))
	for name, m := range lan {
		if _, ok := wan[name]; ok {
			m.Pools |= PoolWAN
		}
		if keep(m) {
			out = append(out, m.clone())
		}
	}
	for name, m := range wan {
		if _, ok := lan[name]; !ok && keep(m) {
			out = append(out, m.clone())
		}
	}
	slices.SortFunc(out, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.Name, b.Name))
	})
	return out
}
