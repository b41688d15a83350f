package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// ErrNoLink is returned for a region this node has no established link to.
var ErrNoLink = errors.New("federation: no link to")

// Federation maintains this node's links to the other nodes of the mesh: to other regions'
// nodes for mirroring and pass-through replays, to its own region's nodes for the catalog of
// which node holds which topic's log, and for relayed publishes and subscriptions.
type Federation struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	mapping streamMapping // how links map mirrors onto streams (Config.AblationSharedLink)
	wake    chan struct{} // peers changed
	raft    raftState     // the raft transport's queues and counters (raft.go)

	mu struct {
		sync.Mutex
		mirrorLocks map[[2]string]*mirrorLock // (origin region, topic): one mirror at a time
		interest    map[string]int            // local subscription patterns, reference-counted
		links       map[string]*link
		counters    map[[2]string]*linkCounters // by peer (region, name), while it is in the mesh
		accepted    map[string]acceptedPeer     // by peer name: its newest connection to this node (heal.go)
		closed      bool
	}
	pause pauseSet       // serving paused by a test (export_test.go); empty in the product
	wg    sync.WaitGroup // link goroutines
	// listing paces a catalog stream's listing in a test (export_test.go); nil in the product.
	listing atomic.Pointer[listingHooks]
	recent  *recentMoves // the topics that moved last, announced ahead of a listing (recent.go)
	feeds   *feedBuffers // the read buffers of the mirror feeds (mapping.go)
}

// New validates cfg. It starts nothing: Run does.
func New(cfg Config) (*Federation, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	feeds := &feedBuffers{}
	f := &Federation{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "federation"),
		feeds:   feeds,
		mapping: cfg.mapping(feeds),
		wake:    make(chan struct{}, 1),
		recent:  newRecentMoves(recentMovesBound),
	}
	f.mu.interest = make(map[string]int)
	f.mu.mirrorLocks = make(map[[2]string]*mirrorLock)
	f.mu.links = make(map[string]*link)
	f.mu.counters = make(map[[2]string]*linkCounters)
	f.mu.accepted = make(map[string]acceptedPeer)
	f.metrics = newMetrics(f, cfg.Registerer, cfg.MaxMirrorSeries)
	registerRaftMetrics(f, cfg.Registerer)
	return f, nil
}

// Run keeps one link to every peer until ctx ends, then closes them all and returns when
// every link goroutine has exited.
func (f *Federation) Run(ctx context.Context) error {
	defer f.cfg.Log.WatchAdvances(f.recent.add)()
	t := time.NewTicker(f.cfg.ReconcileInterval)
	defer t.Stop()
	var addrTick <-chan time.Time
	if f.cfg.AddrWatchInterval > 0 {
		at := time.NewTicker(f.cfg.AddrWatchInterval)
		defer at.Stop()
		addrTick = at.C
	}
	stalls := time.NewTicker(max(f.cfg.StallAfter/10, time.Millisecond))
	defer stalls.Stop()
	lastAddrs := f.localAddrs()
	reconcile := true
	for {
		if reconcile {
			f.reconcile(ctx)
		}
		reconcile = true
		select {
		case <-addrTick:
			if now := f.localAddrs(); now != lastAddrs && now != "" {
				f.log.Info("host addresses changed: migrating links", "before", lastAddrs, "after", now)
				lastAddrs = now
				if err := f.Migrate(ctx, ""); err != nil && !errors.Is(err, ErrNoLink) {
					f.log.Warn("migration after an address change", "err", err)
				}
			}
		case <-ctx.Done():
			f.mu.Lock()
			f.mu.closed = true
			for _, l := range f.mu.links {
				l.stop()
			}
			f.mu.Unlock()
			f.wg.Wait()
			return nil
		case <-stalls.C:
			f.checkStalls()
			reconcile = false // not a reason to compare links with Peers
		case <-f.wake:
		case <-t.C:
		}
	}
}

// PeersChanged asks Run to compare its links with Peers now (e.g. on a gossip event).
func (f *Federation) PeersChanged() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// reconcile starts a link for each new peer and stops the links of peers that are gone: a
// peer that left or moved, or one gossip declares failed whose link's connection has ended
// too. A failed peer whose connection lives keeps its link (Peer.Failed): after a cut,
// gossip's verdict on it can come seconds after the link is back, and replacing a working
// link would cost both sides a listing of every topic.
func (f *Federation) reconcile(ctx context.Context) {
	want := make(map[string]Peer)
	for _, p := range f.cfg.Peers() {
		if p.Name != f.cfg.Name && p.Addr != "" {
			want[p.Name] = p
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return
	}
	for name, l := range f.mu.links {
		p, ok := want[name]
		switch {
		case !ok || !p.same(l.peer):
			l.stop()
		case l.ended():
			// Its run returned (a failed peer's connection ended): replaced below if the
			// peer is alive again.
		case p.Failed && !l.connected():
			l.stop()
		default:
			l.failed.Store(p.Failed)
			continue
		}
		delete(f.mu.links, name)
	}
	// A peer's counters outlive its links (a reconnect, a link replaced after an address
	// change) and go with the peer: the series of a link that ended for good are dropped.
	// Kept while a connection of the peer's is still open (its link is closing or kept
	// through gossip's verdict), so a peer that gossip marked failed and alive again gets
	// the same counters, and the same upSince (park.go).
	for key, c := range f.mu.counters {
		if p, ok := want[key[1]]; (!ok || p.Failed || p.Region != key[0]) && !c.connected() {
			delete(f.mu.counters, key)
		}
	}
	for name, a := range f.mu.accepted {
		if p, ok := want[name]; !ok || p.Failed && a.conn.Context().Err() != nil {
			delete(f.mu.accepted, name)
		}
	}
	for name, p := range want {
		if _, ok := f.mu.links[name]; ok || p.Failed {
			continue
		}
		key := [2]string{p.Region, p.Name}
		c := f.mu.counters[key]
		if c == nil {
			c = newLinkCounters()
			f.mu.counters[key] = c
		}
		l := newLink(f, p, c)
		f.mu.links[name] = l
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			l.run(ctx)
		}()
	}
}

// AddInterest records a local subscription pattern; RemoveInterest drops one. Links
// re-announce their watch patterns on change.
func (f *Federation) AddInterest(pattern string) { f.changeInterest(pattern, 1) }

// RemoveInterest drops one reference to pattern.
func (f *Federation) RemoveInterest(pattern string) { f.changeInterest(pattern, -1) }

func (f *Federation) changeInterest(pattern string, d int) {
	f.mu.Lock()
	before := len(f.mu.interest)
	f.mu.interest[pattern] += d
	if f.mu.interest[pattern] <= 0 {
		delete(f.mu.interest, pattern)
	}
	changed := len(f.mu.interest) != before
	links := f.linksLocked()
	f.mu.Unlock()
	if changed {
		for _, l := range links {
			l.interestChanged(false)
		}
	}
}

// patterns is the set of patterns links watch: local interest plus the mirror list.
func (f *Federation) patterns() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.cfg.Mirror)
	for p := range f.mu.interest {
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// mirrored reports whether topic is wanted and this node is its region's mirror of it.
func (f *Federation) mirrored(topic string, patterns *patternSet) bool {
	wanted := patterns.match(topic) || f.cfg.MirrorWanted != nil && f.cfg.MirrorWanted(topic)
	return wanted && (f.cfg.ShouldMirror == nil || f.cfg.ShouldMirror(topic))
}

// watchPatterns is what links ask other regions to announce: the patterns wanted, or every
// topic when Config.MirrorWanted may want topics no pattern names.
func (f *Federation) watchPatterns(patterns []string) []string {
	if f.cfg.MirrorWanted != nil {
		return []string{">"}
	}
	return patterns
}

func (f *Federation) linksLocked() []*link {
	out := make([]*link, 0, len(f.mu.links))
	for _, l := range f.mu.links {
		out = append(out, l)
	}
	return out
}

func (f *Federation) links() []*link {
	f.mu.Lock()
	defer f.mu.Unlock()
	ls := f.linksLocked()
	slices.SortFunc(ls, func(a, b *link) int {
		if a.peer.Region != b.peer.Region {
			return cmpString(a.peer.Region, b.peer.Region)
		}
		return cmpString(a.peer.Name, b.peer.Name)
	})
	return ls
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Links describes every link.
func (f *Federation) Links() []LinkInfo {
	var out []LinkInfo
	for _, l := range f.links() {
		out = append(out, l.info())
	}
	return out
}

// LinksOptions bounds what LinksPage lists of each link's mirrored topics.
type LinksOptions struct {
	// Node, when set, lists only the link to this peer node.
	Node string
	// MirrorsAfter starts each link's list of mirrored topics after this topic (by name; ""
	// from the first): a link's MirrorsNext of the previous page.
	MirrorsAfter string
	// MaxMirrors is how many mirrored topics each link lists at most (0 or less: none; the
	// count, MirroredTopics, is always whole).
	MaxMirrors int
}

// LinksPage is Links with at most o.MaxMirrors of each link's mirrored topics, by name from
// o.MirrorsAfter (a link mirrors any number of topics: the admin API lists them by pages).
func (f *Federation) LinksPage(o LinksOptions) []LinkInfo {
	out := []LinkInfo{}
	if o.MaxMirrors <= 0 {
		o.MaxMirrors = -1
	}
	for _, l := range f.links() {
		if o.Node != "" && l.peer.Name != o.Node {
			continue
		}
		out = append(out, l.infoPage(o))
	}
	return out
}

// Migrate moves the links to region's nodes (every link if region is "") to new local UDP
// sockets by QUIC connection migration. A link whose migration fails reconnects and resumes
// every mirror from its cursor.
func (f *Federation) Migrate(ctx context.Context, region string) error {
	var errs []error
	n := 0
	for _, l := range f.links() {
		if region != "" && l.peer.Region != region {
			continue
		}
		n++
		if err := l.migrate(ctx); err != nil {
			errs = append(errs, fmt.Errorf("link to %s/%s: %w", l.peer.Region, l.peer.Name, err))
		}
	}
	if n == 0 {
		return fmt.Errorf("%w %q", ErrNoLink, region)
	}
	return errors.Join(errs...)
}

// OpenStream opens a stream on an established link to a node of region, for requests that
// pass through to that region (a direct replay of its log). The caller owns the stream.
func (f *Federation) OpenStream(ctx context.Context, region string) (*quic.Stream, error) {
	return f.openStream(ctx, region, func(p Peer) bool { return p.Region == region })
}

// OpenStreamTo opens a stream on the established link to the node named name (a node of this
// region, for a relayed publish or subscription). The caller owns the stream.
func (f *Federation) OpenStreamTo(ctx context.Context, name string) (*quic.Stream, error) {
	return f.openStream(ctx, name, func(p Peer) bool { return p.Name == name })
}

// Connected reports whether the link to the node named name is up.
func (f *Federation) Connected(name string) bool {
	f.mu.Lock()
	l := f.mu.links[name]
	f.mu.Unlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.conn != nil
}

// Resync asks every link to compare its mirrors with what is wanted now (e.g. after a
// placement change made this node the owner of a topic).
func (f *Federation) Resync() {
	for _, l := range f.links() {
		l.interestChanged(true)
	}
}

func (f *Federation) openStream(ctx context.Context, what string, match func(Peer) bool) (*quic.Stream, error) {
	for _, l := range f.links() {
		if !match(l.peer) {
			continue
		}
		l.mu.Lock()
		conn := l.mu.conn
		l.mu.Unlock()
		if conn == nil {
			continue
		}
		str, err := conn.OpenStreamSync(ctx)
		if err == nil {
			return str, nil
		}
	}
	return nil, fmt.Errorf("%w %q: no connected link", ErrNoLink, what)
}

// mirrorLock is the lock of one (origin region, topic): held by one mirror at a time, and
// kept in the map only while a mirror holds or waits for it (a link mirrors any number of
// topics, most of them parked).
type mirrorLock struct {
	ch   chan struct{}
	refs int // holders and waiters, under Federation.mu
}

// lockMirror takes the lock of the mirror of topic from region, waiting for a previous
// holder to finish, or for ctx.
func (f *Federation) lockMirror(ctx context.Context, region, topic string) (unlock func(), err error) {
	key := [2]string{region, topic}
	f.mu.Lock()
	ml, ok := f.mu.mirrorLocks[key]
	if !ok {
		ml = &mirrorLock{ch: make(chan struct{}, 1)}
		f.mu.mirrorLocks[key] = ml
	}
	ml.refs++
	f.mu.Unlock()
	release := func() {
		f.mu.Lock()
		if ml.refs--; ml.refs == 0 {
			delete(f.mu.mirrorLocks, key)
		}
		f.mu.Unlock()
	}
	select {
	case ml.ch <- struct{}{}:
		return func() { <-ml.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// localAddrs is the host's address set as a comparable string ("" when it cannot be read).
func (f *Federation) localAddrs() string {
	addrs, err := f.cfg.LocalAddrs()
	if err != nil {
		return ""
	}
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String())
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
