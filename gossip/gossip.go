package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/serf/serf"
)

var (
	// ErrClosed is returned by methods called after Close (or after Run has returned).
	ErrClosed = errors.New("gossip: closed")
	// ErrRunning is returned by a second Run, or a Run after Close.
	ErrRunning = errors.New("gossip: Run called twice or after Close")
	// ErrNoWAN is returned by JoinWAN when the node has no WANAddr.
	ErrNoWAN = errors.New("gossip: this node is not in the WAN pool (no WANAddr)")
	// ErrJoinFailed wraps a join that reached no member of the pool.
	ErrJoinFailed = errors.New("gossip: join failed")
	// ErrTagsTooLarge: the encoded tags exceed MaxTagsSize.
	ErrTagsTooLarge = errors.New("gossip: tags too large")
	// ErrReservedTag: Config.Tags or SetTags used a key the package sets itself.
	ErrReservedTag = errors.New("gossip: reserved tag key")
)

// Gossip is a node's membership in its region's LAN pool and (optionally) the WAN pool.
type Gossip struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	lan, wan         *serf.Serf // wan is nil without WANAddr
	lanEvents        chan serf.Event
	wanEvents        chan serf.Event // nil without WANAddr: never ready in a select
	lanAddr, wanAddr string

	leaving  atomic.Bool   // a deliberate leave started: the log bridge lowers its noise
	stop     chan struct{} // closed by Close: Run starts its teardown
	stopOnce sync.Once
	done     chan struct{} // closed after teardown; closeErr is set before
	closeErr error
	tagsMu   sync.Mutex // serializes SetTags: serf.SetTags is not safe concurrently

	mu struct {
		sync.Mutex
		running bool // Run started, or Close took the teardown over
		closed  bool // teardown started: no more Join or SetTags
		hard    bool // CloseAbruptly: shut down without leaving
		// lan and wan are the pools' tables: written only by the goroutine that drains the
		// event channels (Run, or Close when Run never started), read by anyone.
		lan, wan map[string]Member
		subs     map[uint64]chan<- Event
		nextSub  uint64
		stats    Stats
	}
}

// Stats is a snapshot of the package's counters, for tests and tools.
type Stats struct {
	LANEvents, WANEvents map[EventKind]uint64 // member events received per pool
	Dropped              uint64               // events not delivered to a full subscriber
}

// New validates cfg and creates both serf instances, binding their ports: LANAddr and
// WANAddr are right as soon as New returns. serf cannot be created without starting it, so
// serf's and memberlist's own goroutines (listeners, probes, gossip, reaper) run from here
// on, until Close; the local node is already a one-member pool, reachable by others' Join.
// Call Run to drain events and keep the member table, and Close to stop.
func New(cfg Config) (*Gossip, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Tags = maps.Clone(cfg.Tags)
	cfg.Key = append([]byte(nil), cfg.Key...)
	if len(cfg.Key) == 0 {
		cfg.Key = nil
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "gossip", "node", cfg.Name, "region", cfg.Region)
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	g := &Gossip{
		cfg:       cfg,
		log:       logger,
		metrics:   m,
		lanEvents: make(chan serf.Event, eventBuffer),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	g.mu.lan = make(map[string]Member)
	g.mu.wan = make(map[string]Member)
	g.mu.subs = make(map[uint64]chan<- Event)
	g.mu.stats.LANEvents = make(map[EventKind]uint64)
	g.mu.stats.WANEvents = make(map[EventKind]uint64)
	if cfg.Key == nil {
		logger.Warn("gossip: no gossip key: pool traffic is neither encrypted nor authenticated (development only)")
	}

	tags, _ := cfg.fullTags(cfg.Tags) // checked by Validate
	g.lan, err = serf.Create(cfg.serfConfig(PoolLAN, maps.Clone(tags), g.lanEvents,
		newStdLogger(logger.With("pool", "lan"), &g.leaving)))
	if err != nil {
		return nil, fmt.Errorf("gossip: create lan pool on %s: %w", cfg.LANAddr, err)
	}
	g.lanAddr = serfAddr(g.lan.LocalMember())
	if cfg.WANAddr != "" {
		g.wanEvents = make(chan serf.Event, eventBuffer)
		g.wan, err = serf.Create(cfg.serfConfig(PoolWAN, maps.Clone(tags), g.wanEvents,
			newStdLogger(logger.With("pool", "wan"), &g.leaving)))
		if err != nil {
			_ = g.lan.Shutdown()
			return nil, fmt.Errorf("gossip: create wan pool on %s: %w", cfg.WANAddr, err)
		}
		g.wanAddr = serfAddr(g.wan.LocalMember())
	}

	// Seed the tables with the local member; Run replaces it from serf's own join event.
	g.mu.lan[cfg.Name] = memberFromSerf(PoolLAN, g.lan.LocalMember())
	g.metrics.setMembers(PoolLAN, g.mu.lan)
	if g.wan != nil {
		g.mu.wan[cfg.Name] = memberFromSerf(PoolWAN, g.wan.LocalMember())
		g.metrics.setMembers(PoolWAN, g.mu.wan)
	}
	logger.Info("gossip: pools created", "lan", g.lanAddr, "wan", g.wanAddr, "profile", cfg.Profile.String(),
		"encrypted", cfg.Key != nil)
	return g, nil
}

func serfAddr(m serf.Member) string {
	return net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port)))
}

// Run drains both pools' events, keeps the member table and dispatches events to
// subscribers, until ctx ends or Close is called. It then leaves both pools gracefully,
// shuts serf down and returns: nil, or what leaving or shutting down reported.
func (g *Gossip) Run(ctx context.Context) error {
	g.mu.Lock()
	if g.mu.running {
		g.mu.Unlock()
		return ErrRunning
	}
	g.mu.running = true
	g.mu.Unlock()

	for {
		select {
		case e := <-g.lanEvents:
			g.handle(PoolLAN, e)
		case e := <-g.wanEvents:
			g.handle(PoolWAN, e)
		case <-ctx.Done():
			g.teardown()
			return g.closeErr
		case <-g.stop:
			g.teardown()
			return g.closeErr
		}
	}
}

// Close leaves both pools gracefully (bounded by Config.LeaveTimeout: 1 s with ProfileLocal,
// about 2.3 s with ProfileTest and 11 s with serf's default timers; a few hundred ms when the
// peers are up),
// shuts serf down and waits until that teardown is complete (done by Run if it was
// started, else by Close itself). It is safe to call more than once and concurrently, and
// returns the teardown's error every time. When it returns no goroutine of this package is
// left; serf's per-connection handlers may finish up to memberlist's TCP timeout later.
func (g *Gossip) Close() error {
	g.stopOnce.Do(func() { close(g.stop) })
	g.mu.Lock()
	running := g.mu.running
	g.mu.running = true // a later Run fails
	g.mu.Unlock()
	if !running {
		g.teardown()
	}
	<-g.done
	return g.closeErr
}

// CloseAbruptly is Close without the leave: serf shuts down at once, as a crashed node's
// would, so peers see a failure instead of a leave (after their failure detection). It
// saves the leave's wait (up to Config.LeaveTimeout), which is what a test's teardown
// wants when every node is stopping anyway; a node that stops in service leaves with Close.
// Like Close it is safe to call more than once and concurrently with Run.
func (g *Gossip) CloseAbruptly() error {
	g.mu.Lock()
	g.mu.hard = true
	g.mu.Unlock()
	return g.Close()
}

// teardown leaves and shuts down both pools while it keeps draining their event channels
// (serf sends on them while leaving), then drains what is left. It runs exactly once: in
// Run, or in Close when Run never started.
func (g *Gossip) teardown() {
	g.mu.Lock()
	g.mu.closed = true
	hard := g.mu.hard
	g.mu.Unlock()
	g.leaving.Store(true)

	errc := make(chan error, 1)
	go func() { errc <- g.leaveAndShutdown(hard) }() // owned here: we wait for errc
	var err error
wait:
	for {
		select {
		case e := <-g.lanEvents:
			g.handle(PoolLAN, e)
		case e := <-g.wanEvents:
			g.handle(PoolWAN, e)
		case err = <-errc:
			break wait
		}
	}
	for { // serf is shut down: nothing new arrives except what was in flight
		select {
		case e := <-g.lanEvents:
			g.handle(PoolLAN, e)
		case e := <-g.wanEvents:
			g.handle(PoolWAN, e)
		default:
			g.closeErr = err
			close(g.done)
			g.log.Info("gossip: stopped", "graceful", !hard, "err", err)
			return
		}
	}
}

func (g *Gossip) leaveAndShutdown(hard bool) error {
	var lanErr, wanErr error
	if !hard {
		var wg sync.WaitGroup
		wg.Go(func() { lanErr = g.lan.Leave() })
		if g.wan != nil {
			wg.Go(func() { wanErr = g.wan.Leave() })
		}
		wg.Wait()
	}
	var errs []error
	if lanErr != nil {
		errs = append(errs, fmt.Errorf("gossip: leave lan pool: %w", lanErr))
	}
	if wanErr != nil {
		errs = append(errs, fmt.Errorf("gossip: leave wan pool: %w", wanErr))
	}
	if err := g.lan.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("gossip: shutdown lan pool: %w", err))
	}
	if g.wan != nil {
		if err := g.wan.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("gossip: shutdown wan pool: %w", err))
		}
	}
	return errors.Join(errs...)
}

// handle applies one serf event to the pool's table and passes it on. Only the draining
// goroutine calls it.
func (g *Gossip) handle(pool Pool, e serf.Event) {
	me, ok := e.(serf.MemberEvent)
	if !ok {
		return // user events and queries are not used
	}
	kind, ok := kindFromSerf(me.Type)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	table, counts := g.mu.lan, g.mu.stats.LANEvents
	if pool == PoolWAN {
		table, counts = g.mu.wan, g.mu.stats.WANEvents
	}
	for _, sm := range me.Members {
		m := memberFromSerf(pool, sm)
		if kind == EventReap {
			delete(table, m.Name)
		} else {
			table[m.Name] = m
		}
		counts[kind]++
		g.metrics.event(pool, kind)
		g.log.Debug("gossip: member event", "pool", pool.String(), "kind", kind.String(),
			"member", m.Name, "member_region", m.Region, "status", m.Status.String(), "addr", m.Addr)
		for _, ch := range g.mu.subs {
			select {
			case ch <- Event{Kind: kind, Pool: pool, Member: m.clone()}:
			default:
				g.mu.stats.Dropped++
				g.metrics.drop()
			}
		}
	}
	g.metrics.setMembers(pool, table)
}

// JoinLAN joins the region's LAN pool through any of addrs (IP:PORT or host:port of members'
// LAN pools). It returns how many it reached; the error is non-nil only when it reached
// none (wrapping ErrJoinFailed). No addresses is not an error: the first node of a region
// has nobody to join.
func (g *Gossip) JoinLAN(addrs []string) (int, error) {
	return g.join(PoolLAN, g.lan, g.cfg.lanLabel(), addrs)
}

// JoinWAN joins the WAN pool through any of addrs (members' WAN pool addresses).
func (g *Gossip) JoinWAN(addrs []string) (int, error) {
	if g.wan == nil {
		return 0, ErrNoWAN
	}
	return g.join(PoolWAN, g.wan, wanLabel, addrs)
}

func (g *Gossip) join(pool Pool, s *serf.Serf, label string, addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	if g.isClosed() {
		return 0, ErrClosed
	}
	n, err := s.Join(addrs, true)
	if err != nil && n == 0 {
		return 0, fmt.Errorf("%w: %s pool %q via %v: %s", ErrJoinFailed, pool, label, addrs, joinCause(err))
	}
	if err != nil {
		return n, fmt.Errorf("gossip: join %s pool via %v: %w", pool, addrs, err)
	}
	return n, nil
}

// joinCause flattens memberlist's multi-line error (one entry per address tried) into one
// line and says what the usual causes mean: a member that cannot decrypt our push-pull
// answers with an error we cannot decrypt either; a member whose pool label differs (another
// region's LAN pool, or the other pool's port) drops the connection without a word.
func joinCause(err error) string {
	var parts []string
	if me, ok := err.(interface{ WrappedErrors() []error }); ok {
		for _, e := range me.WrappedErrors() {
			parts = append(parts, e.Error())
		}
	}
	if len(parts) == 0 {
		parts = []string{err.Error()}
	}
	msg := strings.Join(parts, "; ")
	switch {
	case strings.Contains(msg, "decrypt") || strings.Contains(msg, "encrypt"):
		msg += " (the gossip keys differ, or only one side has a key)"
	case strings.Contains(msg, "EOF") || strings.Contains(msg, "reset by peer"):
		msg += " (the member closed the connection: a different pool label, i.e. another region's " +
			"LAN pool or the other pool's port, or an old or foreign gossip agent)"
	case strings.Contains(msg, "refused") || strings.Contains(msg, "timeout"):
		msg += " (nothing answers there)"
	}
	return msg
}

func (g *Gossip) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.closed
}

// LANAddr is the address other members join the LAN pool at (the advertised IP:PORT).
func (g *Gossip) LANAddr() string { return g.lanAddr }

// WANAddr is the address other members join the WAN pool at; "" without WANAddr.
func (g *Gossip) WANAddr() string { return g.wanAddr }

// Members returns every member known to either pool (this node included, and members that
// failed or left until they are reaped), one per name, sorted by region then name.
func (g *Gossip) Members() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return mergeMembers(g.mu.lan, g.mu.wan, func(Member) bool { return true })
}

// RegionMembers returns the members of one region, sorted by name, in any status: placement
// keeps those whose Status is not StatusLeft.
func (g *Gossip) RegionMembers(region string) []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return mergeMembers(g.mu.lan, g.mu.wan, func(m Member) bool { return m.Region == region })
}

// MemberStatus is the status of member name of region as RegionMembers would report it,
// without copying the member table: a publish relayed to a leader asks it (StatusLeft for
// a node not known).
func (g *Gossip) MemberStatus(region, name string) Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.mu.lan[name]; ok && m.Region == region {
		return m.Status
	}
	if _, ok := g.mu.lan[name]; !ok {
		if m, ok := g.mu.wan[name]; ok && m.Region == region {
			return m.Status
		}
	}
	return StatusLeft
}

// Local returns this node as its pools see it, read from serf directly (current even
// before Run has drained the first events).
func (g *Gossip) Local() Member {
	m := memberFromSerf(PoolLAN, g.lan.LocalMember())
	if g.wan != nil {
		m.Pools |= PoolWAN
	}
	return m
}

// SetTags replaces the node's extra tags in both pools (the "region" and "role" tags stay)
// and waits until the update has been broadcast. The same limits as Config.Tags apply.
func (g *Gossip) SetTags(tags map[string]string) error {
	full, err := g.cfg.fullTags(tags)
	if err != nil {
		return fmt.Errorf("gossip: set tags: %w", err)
	}
	g.tagsMu.Lock()
	defer g.tagsMu.Unlock()
	if g.isClosed() {
		return ErrClosed
	}
	var errs []error
	if err := g.lan.SetTags(maps.Clone(full)); err != nil {
		errs = append(errs, fmt.Errorf("gossip: set tags in lan pool: %w", err))
	}
	if g.wan != nil {
		if err := g.wan.SetTags(maps.Clone(full)); err != nil {
			errs = append(errs, fmt.Errorf("gossip: set tags in wan pool: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Subscribe sends member events to ch until cancel is called. Sends never block: when ch is
// full the event is dropped and counted (Stats.Dropped, quicmq_gossip_subscriber_drops_total);
// the member table stays right, so a subscriber that may fall behind re-reads Members().
// Events are sent from Run's goroutine; ch is never closed by the package.
func (g *Gossip) Subscribe(ch chan<- Event) (cancel func()) {
	g.mu.Lock()
	id := g.mu.nextSub
	g.mu.nextSub++
	g.mu.subs[id] = ch
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.mu.subs, id)
		g.mu.Unlock()
	}
}

// Stats returns a snapshot of the package's counters.
func (g *Gossip) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.mu.stats
	s.LANEvents = maps.Clone(s.LANEvents)
	s.WANEvents = maps.Clone(s.WANEvents)
	return s
}
