package relocate

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node/features"
)

// Draining and leader balance (issue 30; docs/architecture.md, "Who moves leaderships").
//
// A drained node hands every leadership it holds (the region's metadata group's and every
// data group's) to another replica that is up and not drained, and hands away any it wins
// later, until it is undrained; it keeps its replicas, votes and serves reads. Whether a
// node is drained is region state: a drain record of the metadata group (version 4 below),
// so a drained node restarted is still drained. Only the metadata leader proposes
// records, and any node's admin API may ask: the asking node announces what it wants in
// its gossip tag TagDrainReq until the metadata shows it, and the metadata leader, which
// reads every live node's tag, proposes the record (gossip is a hint, and a lost hint is
// only a delay: the tag stays until the record is applied). So no peer frame changes.
//
// Every node runs the same loop (DrainLoop, every Raft.ObserveInterval): the metadata leader
// turns requests into records; a drained node transfers its leaderships; an undrained one
// balances (at most one transfer per Raft.BalanceInterval, when it leads two or more groups
// more than a replica of one of them that is up and undrained); every node announces in
// tagLeads how many data groups it leads, which the balancer and 'quicmq nodes' read.

// DrainVersion is the metadata record that drains or undrains a node:
//
//	version u8 = 4 | node name str | drained u8 (0 or 1) | requested uvarint
//
// requested is when the request was made (Unix nanoseconds, the asking node's clock).
// Applied in log order, the last one of a name wins; the metadata leader never proposes a
// request older than the last one applied for its name, so an operator's undrain is not
// undone by an earlier drain request whose tag gossip still carries. A node writes it only once every node
// of the region announces meta=4 (RegionKnows): an older build would skip it as a
// malformed placement (harmless, but it would not know the node is drained).
const DrainVersion = 4

// TagDrainReq is the gossip tag of a node that asked for drains or undrains the metadata
// has not applied yet: comma-separated name=1@T (drain) or name=0@T (undrain) items, T the
// request's time in Unix nanoseconds.
const TagDrainReq = "drainreq"

// tagLeads is the gossip tag holding the number of data groups a node leads, or "stop"
// while it stops (it is then never given a leadership).
const tagLeads = "leads"

// drainReq is a request to drain (or undrain) a node, made at time at (Unix nanoseconds).
type drainReq struct {
	drained bool
	at      int64
}

func encodeDrain(name string, q drainReq) []byte {
	b := []byte{DrainVersion}
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	if q.drained {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return binary.AppendUvarint(b, uint64(q.at))
}

func decodeDrain(p []byte) (name string, q drainReq, err error) {
	if len(p) == 0 || p[0] != DrainVersion {
		return "", q, fmt.Errorf("%w: not a drain record", errRecord)
	}
	d := &reader{p: p[1:]}
	name = d.str()
	if d.bad || name == "" || len(d.p) < 1 || d.p[0] > 1 {
		return "", q, fmt.Errorf("%w: drain record", errRecord)
	}
	q.drained = d.p[0] == 1
	d.p = d.p[1:]
	at := d.uv()
	if d.bad || at > math.MaxInt64 || len(d.p) > 0 {
		return "", q, fmt.Errorf("%w: drain record's time", errRecord)
	}
	q.at = int64(at)
	return name, q, nil
}

// drainer is a node's view of the region's drained nodes and its own pending requests.
type drainer struct {
	mu struct {
		sync.Mutex
		drained map[string]bool     // as the metadata says (applied records)
		at      map[string]int64    // the time of the last request applied, by name
		want    map[string]drainReq // this node's requests not yet applied (announced in TagDrainReq)
		changed chan struct{}       // closed and replaced when drained changes
		changes int                 // drained changed by applied records (for tests)
	}
	wake     chan struct{} // capacity 1: a request was made, or the node stops
	stopping atomic.Bool   // a graceful stop is handing the leaderships away (HandOff)
	// Owned by DrainLoop's goroutine.
	lastTry     map[uint64]time.Time // group -> last transfer asked while drained or stopping
	lastBalance time.Time
	leadsTag    string
	reqTag      string
	m           *drainMetrics
}

type drainMetrics struct {
	transfers *prometheus.CounterVec
	draining  prometheus.Gauge
	imbalance prometheus.Gauge
	leading   prometheus.Gauge
}

func newDrainMetrics(reg prometheus.Registerer) *drainMetrics {
	m := &drainMetrics{
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quicmq_raft_leadership_transfers_total",
			Help: "Leadership transfers this node asked for, by reason: drain (it is drained), balance (it led two or more groups more than a replica of one), stop (a graceful stop)."}, []string{"reason"}),
		draining: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quicmq_nodes_draining",
			Help: "Nodes of the region drained (they lead no raft group until undrained), as this node's copy of the metadata says."}),
		imbalance: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quicmq_raft_leader_imbalance",
			Help: "The most data groups a node leads minus the fewest, over the region's nodes that are up and not drained, as gossip tells this node (0 or 1: balanced)."}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quicmq_raft_groups_led",
			Help: "Data raft groups (not the metadata group) this node leads."}),
	}
	for _, reason := range []string{"drain", "balance", "stop"} {
		m.transfers.WithLabelValues(reason) // served at 0 before the first transfer
	}
	reg.MustRegister(m.transfers, m.draining, m.imbalance, m.leading)
	return m
}

func (d *drainer) init(reg prometheus.Registerer) {
	d.mu.drained = map[string]bool{}
	d.mu.want = map[string]drainReq{}
	d.mu.at = map[string]int64{}
	d.mu.changed = make(chan struct{})
	d.lastTry = map[uint64]time.Time{}
	d.wake = make(chan struct{}, 1)
	d.m = newDrainMetrics(reg)
}

func (d *drainer) isDrained(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.drained[name]
}

func (d *drainer) drainedSet() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.mu.drained)
}

// ApplyDrain applies a drain record (the node's metadata reader, watchMeta, calls it).
func (r *Relocator) ApplyDrain(data []byte) {
	name, q, err := decodeDrain(data)
	drained := q.drained
	if err != nil {
		r.log.Error("a metadata record could not be decoded; it is skipped on every node alike", "err", err)
		return
	}
	d := &r.drain
	d.mu.Lock()
	d.mu.at[name] = max(d.mu.at[name], q.at)
	if d.mu.drained[name] != drained {
		if drained {
			d.mu.drained[name] = true
		} else {
			delete(d.mu.drained, name)
		}
		close(d.mu.changed)
		d.mu.changed = make(chan struct{})
		d.mu.changes++
	}
	d.m.draining.Set(float64(len(d.mu.drained)))
	d.mu.Unlock()
	r.log.Info("region metadata: node drain state", "node", name, "drained", drained)
}

// requestDrain asks the region to drain (or undrain) node name: at once when this node
// leads the metadata group, and otherwise through TagDrainReq. It returns once the request
// is made, not applied (drainedCh and isDrained tell that).
func (r *Relocator) requestDrain(ctx context.Context, name string, drained bool) error {
	d := &r.drain
	q := drainReq{drained: drained, at: time.Now().UnixNano()}
	d.mu.Lock()
	q.at = max(q.at, d.mu.at[name]+1) // later than what was applied, whatever this clock says
	d.mu.want[name] = q
	d.mu.Unlock()
	if ro, ok := r.d.Role(MetaGroup); ok && ro.Leader {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.Settings.QuorumTimeout)
		defer cancel()
		if _, err := r.d.Propose(pctx, MetaGroup, encodeDrain(name, q)); err == nil {
			return nil
		}
	}
	// DrainLoop announces it, and the metadata leader proposes it.
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

func (d *drainer) changedCh() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.changed
}

// announceRequests sets TagDrainReq to this node's pending requests, dropping those the
// metadata shows applied.
func (r *Relocator) announceRequests() {
	d := &r.drain
	d.mu.Lock()
	for name, q := range d.mu.want {
		// Applied, or overtaken by a later request (another node's): no longer announced. A
		// request is settled only by a record of its time or later, even when the state it
		// asks for is already the metadata's: an earlier request may still be on its way.
		if d.mu.at[name] >= q.at {
			delete(d.mu.want, name)
		}
	}
	var items []string
	for _, name := range slices.Sorted(maps.Keys(d.mu.want)) {
		q := d.mu.want[name]
		v := "0"
		if q.drained {
			v = "1"
		}
		items = append(items, name+"="+v+"@"+strconv.FormatInt(q.at, 10))
	}
	d.mu.Unlock()
	r.announceReqTag(TagDrainReq, strings.Join(items, ","), &d.reqTag, "drain requests")
}

// announceReqTag sets the gossip tag key to tag when it changed since *last, which it then
// records (what names the requests in the log line when gossip refuses it; drain and remove
// requests, move.go).
func (r *Relocator) announceReqTag(key, tag string, last *string, what string) {
	if tag == *last || !r.mesh.Gossip() {
		return
	}
	if err := r.mesh.SetTag(key, tag); err != nil {
		r.log.Warn("announcing "+what+" in gossip", "err", err)
		return
	}
	*last = tag
}

// parseDrainReq reads a TagDrainReq value; malformed items are skipped.
func parseDrainReq(s string) map[string]drainReq {
	out := map[string]drainReq{}
	parseReqTag(s, "0", "1", func(name string, on bool, at int64) { out[name] = drainReq{drained: on, at: at} })
	return out
}

// parseReqTag reads a gossip tag of requests, "NAME=V@AT,..." with V off or on and AT a
// positive time (unix nanoseconds), calling add for each well-formed item; malformed items are
// skipped (drain and remove requests, move.go).
func parseReqTag(s, off, on string, add func(name string, on bool, at int64)) {
	for item := range strings.SplitSeq(s, ",") {
		name, rest, ok := strings.Cut(item, "=")
		v, ts, ok2 := strings.Cut(rest, "@")
		at, err := strconv.ParseInt(ts, 10, 64)
		if !ok || !ok2 || name == "" || (v != off && v != on) || err != nil || at <= 0 {
			continue
		}
		add(name, v == on, at)
	}
}

// newest keeps, in reqs, the later of its request for each name and those of more.
func newest(reqs, more map[string]drainReq) {
	for name, q := range more {
		if q.at > reqs[name].at {
			reqs[name] = q
		}
	}
}

// DrainLoop is the goroutine of draining and balancing (see the top of this file).
func (r *Relocator) DrainLoop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Settings.ObserveInterval)
	defer tick.Stop()
	// The first balancing move waits an interval after the start: the groups' first
	// elections (a region forming, a node rejoining) settle before their counts are judged,
	// and a client's first publishes do not meet a moving leader.
	r.drain.lastBalance = time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.drain.changedCh():
		case <-r.drain.wake:
		}
		if !r.meta.Formed() {
			continue
		}
		r.announceRequests()
		r.proposeRequests(ctx)
		self := r.cfg.Name
		switch {
		case r.drain.stopping.Load():
			if r.drain.leadsTag != "stop" && r.mesh.Gossip() {
				_ = r.mesh.SetTag(tagLeads, "stop") // no balancer hands this node a leadership now
				r.drain.leadsTag = "stop"
				clear(r.drain.lastTry)
			}
			r.transferAll(ctx, "stop")
			continue
		case r.drain.isDrained(self) || r.moves.gone(self): // a node being removed leads nothing
			r.transferAll(ctx, "drain")
		default:
			r.balance(ctx)
		}
		r.announceLeads()
	}
}

// proposeRequests, on the metadata leader, proposes a drain record for every request a
// live node of the region announces that the metadata does not show yet.
func (r *Relocator) proposeRequests(ctx context.Context) {
	if ro, ok := r.d.Role(MetaGroup); !ok || !ro.Leader || !r.mesh.Gossip() {
		return
	}
	reqs := map[string]drainReq{}
	for _, m := range r.mesh.RegionMembers() {
		if m.Status != gossip.StatusAlive && m.Name != r.cfg.Name {
			continue
		}
		newest(reqs, parseDrainReq(m.Tags[TagDrainReq]))
	}
	r.drain.mu.Lock()
	newest(reqs, r.drain.mu.want)
	applied := maps.Clone(r.drain.mu.at)
	r.drain.mu.Unlock()
	if len(reqs) == 0 {
		return
	}
	if ok, _ := r.mesh.RegionKnows(features.Meta, DrainVersion); !ok {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(reqs)) {
		q := reqs[name]
		if q.at <= applied[name] {
			continue // applied, or older than the last applied
		}
		// Proposed even when it changes nothing: its record settles it (announceRequests)
		// and keeps an earlier request still in flight from being applied after it.
		pctx, cancel := context.WithTimeout(ctx, r.cfg.Settings.QuorumTimeout)
		_, err := r.d.Propose(pctx, MetaGroup, encodeDrain(name, q))
		cancel()
		if err != nil {
			r.log.Warn("recording a node's drain state in the region's metadata", "node", name, "drained", q.drained, "err", err)
			return
		}
	}
}

// LedGroups returns the groups this node leads now (the metadata group included), as of
// their last round.
func (r *Relocator) LedGroups() []uint64 {
	var out []uint64
	if ro, ok := r.d.Role(MetaGroup); ok && ro.Leader {
		out = append(out, MetaGroup)
	}
	for _, g := range r.meta.LocalGroups() {
		if ro, ok := r.d.Role(g); ok && ro.Leader {
			out = append(out, g)
		}
	}
	return out
}

// leadCounts is how many data groups each node of the region leads: this node's from its
// own groups, the others' from their tagLeads; eligible are the nodes that are up, not
// drained, not stopping and announce a count (a leadership may go to them).
func (r *Relocator) leadCounts() (counts map[string]int, eligible map[string]bool) {
	counts, eligible = map[string]int{}, map[string]bool{}
	drained := r.drain.drainedSet()
	self := r.cfg.Name
	led := 0
	for _, g := range r.LedGroups() {
		if g != MetaGroup {
			led++
		}
	}
	counts[self] = led
	eligible[self] = !drained[self] && !r.drain.stopping.Load() && !r.moves.gone(self)
	if !r.mesh.Gossip() {
		return counts, eligible
	}
	for _, m := range r.mesh.RegionMembers() {
		if m.Name == self {
			continue
		}
		v, ok := m.Tags[tagLeads]
		if !ok {
			continue
		}
		c, err := strconv.Atoi(v)
		if err == nil {
			counts[m.Name] = c
		}
		eligible[m.Name] = err == nil && m.Status == gossip.StatusAlive && !drained[m.Name] && !r.moves.gone(m.Name)
	}
	return counts, eligible
}

// transferee picks the replica of group (which this node leads) that should take its
// leadership: a voter other than this node that is reachable, eligible and caught up to the
// commit index, the one leading the fewest groups; ok is false when there is none.
func (r *Relocator) transferee(ctx context.Context, group uint64, counts map[string]int, eligible map[string]bool) (id uint64, name string, ok bool) {
	m, err := r.d.Membership(ctx, group)
	if err != nil || m.Match == nil || m.Joint() {
		return 0, "", false
	}
	best := -1
	for _, v := range m.Voters {
		if v == r.id {
			continue
		}
		nm := r.mesh.MemberName(v)
		if nm == "" || !eligible[nm] || !r.mesh.Reachable(nm) || m.Match[v] < m.Status.GetCommit() {
			continue
		}
		if best < 0 || counts[nm] < best || counts[nm] == best && nm < name {
			id, name, best = v, nm, counts[nm]
		}
	}
	return id, name, best >= 0
}

// transferAll asks for every leadership this node holds to move (a drained or stopping
// node), each group at most once per election timeout (raft gives up a transfer that has
// not completed by then). It returns how many groups it still leads.
func (r *Relocator) transferAll(ctx context.Context, reason string) int {
	led := r.LedGroups()
	if len(led) == 0 {
		return 0
	}
	counts, eligible := r.leadCounts()
	c := r.cfg.Settings
	retry := c.TickInterval * time.Duration(c.ElectionTicks)
	for _, g := range led {
		if time.Since(r.drain.lastTry[g]) < retry {
			continue
		}
		id, name, ok := r.transferee(ctx, g, counts, eligible)
		if !ok {
			continue
		}
		if err := r.d.TransferLeadership(ctx, g, id); err != nil {
			continue
		}
		r.drain.lastTry[g] = time.Now()
		if g != MetaGroup {
			counts[name]++ // spread this round's transfers
		}
		r.drain.m.transfers.WithLabelValues(reason).Inc()
		r.log.Debug("handing a raft group's leadership to another replica", "group", r.meta.GroupLabel(g), "to", name, "reason", reason)
	}
	return len(led)
}

// balance moves at most one of this node's data group leaderships per BalanceInterval to a
// replica of that group that leads two or more groups fewer, so that the nodes that are up
// and not drained lead within one of each other.
func (r *Relocator) balance(ctx context.Context) {
	c := r.cfg.Settings
	counts, eligible := r.leadCounts()
	r.setImbalance(counts, eligible)
	if c.BalanceInterval < 0 || time.Since(r.drain.lastBalance) < c.BalanceInterval {
		return
	}
	self := r.cfg.Name
	lo := counts[self]
	for name, ok := range eligible {
		if ok {
			lo = min(lo, counts[name])
		}
	}
	if counts[self] < lo+2 {
		return // within one of every node that may lead: nothing to ask the driver
	}
	// An attempt, a transfer made or not, waits for the next interval: the counts in gossip
	// lag the transfers, and a second move on stale counts would overshoot.
	r.drain.lastBalance = time.Now()
	moving := r.moves.movesCopy()
	for _, g := range r.LedGroups() {
		if _, busy := moving[g]; g == MetaGroup || busy {
			continue // a group whose replica moves keeps its leader: the move drives it (move.go)
		}
		id, name, ok := r.transferee(ctx, g, counts, eligible)
		if !ok || counts[name]+2 > counts[self] {
			continue
		}
		if err := r.d.TransferLeadership(ctx, g, id); err != nil {
			continue
		}
		r.drain.m.transfers.WithLabelValues("balance").Inc()
		r.log.Info("balancing leaders: handing a raft group's leadership to a replica that leads fewer",
			"group", r.meta.GroupLabel(g), "to", name, "leads_here", counts[self], "leads_there", counts[name])
		return
	}
}

func (r *Relocator) setImbalance(counts map[string]int, eligible map[string]bool) {
	lo, hi, seen := 0, 0, false
	for name, ok := range eligible {
		if !ok {
			continue
		}
		c := counts[name]
		if !seen || c < lo {
			lo = c
		}
		if !seen || c > hi {
			hi = c
		}
		seen = true
	}
	r.drain.m.imbalance.Set(float64(hi - lo))
}

// announceLeads sets tagLeads to the number of data groups this node leads (unless it is
// stopping).
func (r *Relocator) announceLeads() {
	if !r.mesh.Gossip() || r.drain.leadsTag == "stop" {
		return
	}
	led := 0
	for _, g := range r.LedGroups() {
		if g != MetaGroup {
			led++
		}
	}
	r.drain.m.leading.Set(float64(led))
	v := strconv.Itoa(led)
	if v == r.drain.leadsTag {
		return
	}
	if err := r.mesh.SetTag(tagLeads, v); err == nil {
		r.drain.leadsTag = v
	}
}

// HandOff moves this node's leaderships to other replicas before it stops (DrainLoop does
// the transfers), waiting at most Raft.StopHandOff; it returns how many groups it still
// leads. The node's Run calls it before client sessions close: publishes go on, relayed to the new
// leaders.
func (r *Relocator) HandOff(ctx context.Context) int {
	bound := r.cfg.Settings.StopHandOff
	if bound < 0 {
		return len(r.LedGroups())
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	r.drain.stopping.Store(true)
	select {
	case r.drain.wake <- struct{}{}:
	default:
	}
	poll := time.NewTicker(r.cfg.Settings.TickInterval)
	defer poll.Stop()
	for {
		led := r.LedGroups()
		if len(led) == 0 {
			return 0
		}
		counts, eligible := r.leadCounts()
		movable := 0
		for _, g := range led {
			if _, _, ok := r.transferee(ctx, g, counts, eligible); ok {
				movable++
			}
		}
		if movable == 0 {
			return len(led) // no replica could take them: stopping now is no worse
		}
		select {
		case <-ctx.Done():
			return len(r.LedGroups())
		case <-poll.C:
		}
	}
}

// drainBlockers names, for a drain of node name, the groups it holds that no other replica
// could lead: every other voter of the group is drained, down or unknown. Empty: a drain
// can proceed.
func (r *Relocator) drainBlockers(name string) []string {
	drained := r.drain.drainedSet()
	up := func(n string) bool {
		return n != name && !drained[n] && (n == r.cfg.Name || r.mesh.MemberStatus(n) == gossip.StatusAlive)
	}
	var out []string
	voters := r.meta.Members().Voters
	holdsMeta, metaOK := false, false
	for _, id := range voters {
		nm := r.mesh.MemberName(id)
		if nm == name {
			holdsMeta = true
		} else if nm != "" && up(nm) {
			metaOK = true
		}
	}
	if holdsMeta && !metaOK {
		out = append(out, "the region's metadata group (no other voter is up and undrained)")
	}
	for _, g := range r.meta.Groups() { // by ID
		if !slices.Contains(g.Names(), name) {
			continue
		}
		ok := false
		for _, nm := range g.Names() {
			ok = ok || up(nm)
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s (replicas %s)", g.Label, strings.Join(g.Names(), ", ")))
		}
	}
	return out
}
