package federation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Peer is a node that links may be dialed to: a node of another region (mirroring) or of
// this node's own region (placement: the catalog of the topics it owns, and relayed streams).
type Peer struct {
	Region string
	Name   string // also the TLS server name its certificate is checked against
	Addr   string // UDP address of its QUIC listener
	RaftID uint64 // its raft node ID (gossip tag; 0: unknown), for a node of this region (raft.go)
	// Failed: gossip declares the node failed (it stopped answering probes; it has not
	// left). Its link is kept while the link's connection lives, since packets on it are a
	// fresher sign than gossip's verdict, which can come seconds after a cut is over; a link
	// is never dialed to it, and its link ends once the connection does (federation.go).
	Failed bool
}

// same reports whether p and o are the same node at the same address: a link to one serves
// the other (gossip's verdict on it aside).
func (p Peer) same(o Peer) bool {
	p.Failed, o.Failed = false, false
	return p == o
}

// Config configures a Federation.
type Config struct {
	// Region and Name identify this node. Required.
	Region, Name string
	// Log is this node's topic log: mirrored records and cursors are appended to it, and
	// peers are served from it. Required.
	Log *wal.Log
	// TLS is the client-side configuration for dialing peers: this node's certificate and the
	// mesh CA as roots. The ALPN and server name are set per link. Required.
	TLS *tls.Config
	// Peers returns the nodes of the mesh that have not left, this region's included (this
	// node itself is ignored), those gossip declares failed marked so. Required. It is
	// called from the reconcile loop, after PeersChanged and every ReconcileInterval.
	Peers func() []Peer
	// Mirror lists topic patterns mirrored from every region whether or not anyone here
	// subscribes to them.
	Mirror []string
	// ShouldMirror reports whether this node is the one of its region that mirrors topic
	// (its owner: invariant I6). Nil: every wanted topic is mirrored (a one-node region).
	// Called from link goroutines; it must not block.
	ShouldMirror func(topic string) bool
	// MirrorAppend, when set, stores what a mirror receives instead of Log.Append and
	// Log.SetPosition: in a replicated region, one raft entry that compares the cursor with
	// Expected and advances it with the records (replica.EntryMirrorAppend). It must fail
	// when the stored cursor is not the expected one (a stale mirror: the mirror then reads
	// the cursor again and resumes from it). Cursors are still read from Log. Nil: Log.
	MirrorAppend func(ctx context.Context, a MirrorAppend) error
	// MirrorPosition, when set, stores a durable's position mirrored from another region
	// (positions.go: its Name MirroredPositionName, its Value the time its origin stored it,
	// with its Vector) instead of Log.SetPosition: in a replicated region, one raft entry
	// (replica.EntryMirrorPosition) that stores it only when above the one stored, so it
	// never goes back. Positions are still read from Log. Nil: Log.
	MirrorPosition func(ctx context.Context, p wal.Position) error
	// MirrorGroup, when set, stores a consumer group's state mirrored from another region
	// (groups.go: under MirroredGroupName, with its origin's Updated and a Vector) instead
	// of Log.SetMirroredGroup: in a replicated region, one raft entry
	// (replica.EntryMirrorGroup) that stores it only when newer than the one stored. Nil: Log.
	MirrorGroup func(ctx context.Context, name, topic string, s *wal.GroupState) error
	// MirrorWanted, when set, wants topics besides those matching the interest and Mirror
	// patterns (in a replicated region: every topic placed in it, whichever node its
	// subscribers use), and links then ask other regions to announce every topic. Called
	// from link goroutines; it must not block.
	MirrorWanted func(topic string) bool
	// OwnHeads reports whether every node of peerRegion reads a catalog HEAD's position as
	// the offset after this region's own last record (node/features.Catalog 1: docs/protocol.md,
	// "Catalog stream"), so that the catalog streams to it may send that position, and a
	// peer whose copy of a topic holds only records it mirrored from here opens no stream to
	// learn so (serve.go, ownHead). Called on the catalog stream's goroutine, once per page
	// of its listing and per report of moved heads; it must not block. Nil: never (position
	// equal to next, as before).
	OwnHeads func(peerRegion string) bool
	// OnCatalog is told of each topic whose log a node of this region holds, as that node
	// announces it; OnCatalogSynced when a node has announced every topic it held when the
	// link came up. Both are called from the link's goroutines and must not block.
	OnCatalog       func(peer Peer, topic string)
	OnCatalogSynced func(peer Peer)
	// NoLocalCatalog makes a link to another node of this region watch no topic pattern
	// instead of `>`: that node then announces none of its topics (OnCatalog is not called
	// for it), and its catalog stream still carries the SUBSCRIBED that OnCatalogSynced
	// reports, and this node's incarnation. For a replicated region, whose metadata group
	// places every topic (no reader there needs a sibling's holdings), so that each creation
	// is not streamed to every other node of the region. Default false: a sibling's
	// catalog is watched, as single-copy placement needs.
	NoLocalCatalog bool
	// BindHost is the local host of the UDP sockets links dial from (and migrate to).
	// Default: all interfaces.
	BindHost string
	// LinkIdleTimeout is how long a link's connection may go without any packet from the
	// peer before it is taken as lost (a peer that died or was cut off): the link then
	// redials and resumes every mirror from its cursor, and raft's messages wait for it.
	// Silence is counted from the end of this process's last pause if that is later than
	// the last packet (internal/liveness), and the connection's QUIC idle timeout is twice
	// this (the shorter of both sides' applies), a bound for a process starved that long.
	// Never shorter than three of the path's probe timeouts. A peer that restarted is noticed
	// sooner, by reset probes once it has been silent for 1.5 LinkKeepAlive
	// (internal/liveness). Default 2 s.
	LinkIdleTimeout time.Duration
	// LinkKeepAlive is the period of a link's QUIC keep-alive PINGs, whose answers show the
	// peer is there. Default LinkIdleTimeout/2.
	LinkKeepAlive time.Duration
	// ReconnectMin and ReconnectMax bound the exponential back-off between dial attempts.
	// Defaults 100 ms and 5 s.
	ReconnectMin, ReconnectMax time.Duration
	// MirrorRetry is the pause before a mirror whose stream failed (while its link stayed
	// up) asks again from its cursor. Default 1 s.
	MirrorRetry time.Duration
	// ReconcileInterval is how often links are checked against Peers. Default 5 s.
	ReconcileInterval time.Duration
	// AddrWatchInterval is how often the host's addresses are compared with the last seen
	// set; on a change every link migrates to a new socket. Default 5 s; negative disables.
	AddrWatchInterval time.Duration
	// ListenPacket opens a UDP socket on addr for a link to dial from (or migrate to).
	// Default net.ListenUDP; tests wrap it to cut a node off without a word.
	ListenPacket func(addr *net.UDPAddr) (net.PacketConn, error)
	// LocalAddrs lists the host's addresses. Default net.InterfaceAddrs; tests replace it.
	LocalAddrs func() ([]net.Addr, error)
	// AblationSharedLink selects the shared-link stream mapping: all of a link's mirrors on
	// ONE QUIC stream instead of one stream each, and peers that ask may do the same here. A
	// measurement aid for benchmarks (federation/ablation.go, docs/benchmarks.md) that
	// isolates head-of-line blocking on a link, never for production; only the mapping
	// differs, every check runs as in the product. Default false: a peer's request is
	// refused.
	AblationSharedLink bool
	// StallAfter is how long a mirror may carry no records while the origin reports its head
	// past the mirror's position before it is reported stalled (quicmq_mirror_stalled, a WARN
	// log line). Mirrors are checked every StallAfter/10. Default 30 s.
	StallAfter time.Duration
	// HeadReportInterval is how long a node gathers head moves before it reports them, on
	// the catalog stream of a peer of another region: one HEAD (next offset and last
	// record's time) per announced topic whose head moved, sent that long after the first
	// move (and one for each topic as it is announced). It is what reopens a peer's parked
	// mirror, and what tells it a mirror is behind while the mirror stream carries nothing.
	// Nothing runs while no head moves. Default 50 ms.
	HeadReportInterval time.Duration
	// MaxMirrorStreams bounds the mirror streams a link keeps open at once. A mirror holds a
	// stream only while its topic moves: one caught up for MirrorParkAfter gives it back
	// (parks), and the origin's HEAD on the catalog stream opens it again from its cursor.
	// When more topics need a stream than the bound allows, they wait in order and the
	// least recently active open mirrors park for them (caught-up ones at once, others after
	// MirrorSlice), so every topic is mirrored in turn; a quarter of the bound is kept for
	// topics that move during a catch-up (park.go). Default 1024 (a peer accepts 2048
	// streams per connection by default, node.Config.MaxStreamsPerConn). Not applied to the
	// shared-link ablation, whose mirrors share one stream and never park.
	MaxMirrorStreams int
	// CatchupEnded, when set, is called once a link's catch-up ends: its mirrors all parked
	// with no topic waiting for a stream, after at least a quarter of MaxMirrorStreams were
	// opened since they were last all parked (a new link's, or a reconnect's, or many topics
	// created at once). It runs on the goroutine of the mirror that parked last, holding no
	// lock. The node gives the catch-up's garbage back there (node.releaseHeap): an idle
	// node allocates too little for Go to collect it before its forced collection two
	// minutes later. Nil: nothing.
	CatchupEnded func()
	// MirrorParkAfter is how long a caught-up mirror keeps its stream without records
	// before it parks. Default 5 s.
	MirrorParkAfter time.Duration
	// MirrorSlice is how long a mirror that is not caught up holds its stream before it may
	// be parked for a topic waiting for one (it waits again in turn, from its cursor).
	// Default 1 s.
	MirrorSlice time.Duration
	// PositionInterval is how often a node serving a mirror stream looks for durable
	// consumer positions of the topic that changed, to send them as POSITION frames
	// (positions.go). Default 1 s.
	PositionInterval time.Duration
	// Incarnation identifies this start of the node to its peers (sent in each link's WATCH):
	// a peer that sees a new incarnation drops its old connections to this node at once
	// instead of waiting for their idle timeout. Default: a random number per New.
	Incarnation uint64
	// Raft configures the raft transport between this region's nodes (raft.go). Zero: off.
	Raft RaftConfig
	// MaxMirrorSeries caps the per-mirror metric label sets. Default 1000.
	MaxMirrorSeries int
	// Logger, Registerer: as everywhere. Nil Registerer: no metrics.
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("federation: config: "+format, args...))
	}
	if c.Region == "" || c.Name == "" {
		bad("Region and Name are required")
	}
	if c.Log == nil {
		bad("Log is required")
	}
	if c.TLS == nil {
		bad("TLS is required (node certificate and mesh CA)")
	}
	if c.Peers == nil {
		bad("Peers is required")
	}
	for _, p := range c.Mirror {
		if err := routing.ValidatePattern(p); err != nil {
			bad("Mirror: %v", err)
		}
	}
	if c.MaxMirrorStreams < 0 || c.MirrorParkAfter < 0 || c.MirrorSlice < 0 {
		bad("MaxMirrorStreams %d, MirrorParkAfter %v and MirrorSlice %v: want >= 0 (0: the default)", c.MaxMirrorStreams, c.MirrorParkAfter, c.MirrorSlice)
	}
	if c.StallAfter < 0 || c.HeadReportInterval < 0 {
		bad("StallAfter %v and HeadReportInterval %v: want >= 0 (0: the default)", c.StallAfter, c.HeadReportInterval)
	}
	if c.ReconnectMin < 0 || c.ReconnectMax < 0 || (c.ReconnectMax > 0 && c.ReconnectMin > c.ReconnectMax) {
		bad("ReconnectMin %v and ReconnectMax %v: want 0 <= min <= max", c.ReconnectMin, c.ReconnectMax)
	}
	errs = append(errs, c.Raft.validate()...)
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.LinkIdleTimeout <= 0 {
		c.LinkIdleTimeout = 2 * time.Second
	}
	if c.LinkKeepAlive <= 0 {
		c.LinkKeepAlive = c.LinkIdleTimeout / 2
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = 100 * time.Millisecond
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = 5 * time.Second
	}
	if c.MirrorRetry <= 0 {
		c.MirrorRetry = time.Second
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = 5 * time.Second
	}
	if c.AddrWatchInterval == 0 {
		c.AddrWatchInterval = 5 * time.Second
	}
	if c.ListenPacket == nil {
		c.ListenPacket = func(addr *net.UDPAddr) (net.PacketConn, error) { return net.ListenUDP("udp", addr) }
	}
	if c.LocalAddrs == nil {
		c.LocalAddrs = net.InterfaceAddrs
	}
	if c.StallAfter <= 0 {
		c.StallAfter = 30 * time.Second
	}
	if c.PositionInterval <= 0 {
		c.PositionInterval = time.Second
	}
	if c.HeadReportInterval <= 0 {
		c.HeadReportInterval = 50 * time.Millisecond
	}
	if c.MaxMirrorStreams <= 0 {
		c.MaxMirrorStreams = 1024
	}
	if c.MirrorParkAfter <= 0 {
		c.MirrorParkAfter = 5 * time.Second
	}
	if c.MirrorSlice <= 0 {
		c.MirrorSlice = time.Second
	}
	for c.Incarnation == 0 {
		c.Incarnation = rand.Uint64()
	}
	if c.MaxMirrorSeries <= 0 {
		c.MaxMirrorSeries = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Raft = c.Raft.withDefaults()
	return c
}

// CursorPrefix begins the name of every mirror cursor: "mirror/REGION", the position of the
// mirror of REGION's topics in this region's log.
const CursorPrefix = "mirror/"

// cursorName is the wal position name of the mirror cursor of records from region.
func cursorName(region string) string { return CursorPrefix + region }

// MirrorAppend is one append of mirrored records with its cursor (Config.MirrorAppend).
type MirrorAppend struct {
	Topic, Region string
	Cursor        string // the cursor's position name
	HasExpected   bool   // a cursor is stored, at Expected
	Expected      uint64
	Records       []wal.Record // may be empty: a gap moves the cursor alone
	Value         uint64       // the cursor afterwards: the last origin offset covered
}
