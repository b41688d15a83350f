package federation

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// mirrorHealth is what a link knows of one mirrored topic's progress against the origin's
// head, kept across the link's connections and mirror restarts (so a reconnect does not make
// a stuck mirror look caught up). The mirror's goroutine reports progress, the catalog
// reader and the mirror stream report heads, Run's stall check decides stalled; each holds
// mu for a few field updates.
//
// It holds no pointer (local times are unix nanoseconds, not time.Time, whose location is
// one), so the GC marks it without scanning it: a link keeps one per mirrored topic, parked
// or not, and a node mirroring 10,000 idle topics had the GC scan each of them at every
// cycle beside the hot topics' work (issue 34's figure 3).
type mirrorHealth struct {
	mu          sync.Mutex
	headNext    uint64 // the origin log's next offset, as last reported
	headTime    int64  // the origin's head time (unix ns, origin clock), as last reported
	reached     uint64 // origin log offset this mirror has scanned up to (records before it are mirrored or skipped)
	reachedTime int64  // origin time of the record before reached (0: unknown)
	progressAt  int64  // local time (unix ns) of the last progress (records mirrored, the scan moved)
	behindSince int64  // local time (unix ns) since which the reported head is past reached (0: caught up)
	stalled     bool
	known       bool // the origin has reported a head (else whether the mirror is behind is unknown)
	// announcedOn is guarded by link.mu, not mu: the link's connection (link.mu.conns) on
	// which the peer announced the topic; another (0: none) means not announced on the
	// current one. Kept here rather than in a set of the announced names, whose entries the
	// GC would scan at every cycle for each mirrored topic (issue 34's figure 3).
	announcedOn uint32
}

// unixNano is t in unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// needsStream reports whether the mirror must hold a stream to be caught up: the origin
// reported a head past what it has scanned, or has reported none yet.
func (h *mirrorHealth) needsStream() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.known || h.headNext > h.reached
}

// headAt is the origin's time of the head last reported (unix ns; 0: none reported).
func (h *mirrorHealth) headAt() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.headTime
}

// lagRecords is the reported head less the position scanned (an upper bound: the origin's
// head also counts records it mirrored from other regions, which the mirror skips).
func (h *mirrorHealth) lagRecords() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.headNext > h.reached {
		return h.headNext - h.reached
	}
	return 0
}

// reported notes a head the origin reported (on the catalog stream or a mirror stream).
func (h *mirrorHealth) reported(next uint64, headTime int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.known = true
	h.headNext = max(h.headNext, next)
	h.headTime = max(h.headTime, headTime)
	h.updateLocked(now)
}

// scanned notes the mirror's progress: the origin has served (and this node appended, or
// the origin skipped) everything before offset reached, the last of it at origin time t
// (0: unknown).
func (h *mirrorHealth) scanned(reached uint64, t int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if reached > h.reached {
		h.reached = reached
		h.progressAt = unixNano(now)
		if t > 0 {
			h.reachedTime = max(h.reachedTime, t)
		}
	}
	h.updateLocked(now)
}

// copiesAfter notes that the origin's records from own to next are all copies it mirrored
// from other regions (a catalog HEAD's position, serve.go ownHead): a mirror that has scanned
// to own has scanned to next, the last of it at origin time t, as a stream would have found by
// skipping them.
func (h *mirrorHealth) copiesAfter(own, next uint64, t int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if own >= next || own > h.reached || next <= h.reached {
		return
	}
	h.reached = next
	h.progressAt = unixNano(now)
	if t > 0 {
		h.reachedTime = max(h.reachedTime, t)
	}
	h.updateLocked(now)
}

func (h *mirrorHealth) updateLocked(now time.Time) {
	switch {
	case h.headNext <= h.reached:
		h.behindSince = 0
		h.reachedTime = max(h.reachedTime, h.headTime) // caught up: the scan is at the head
	case h.behindSince == 0:
		h.behindSince = unixNano(now)
	}
}

// check decides whether the mirror is stalled at now: behind the reported head with no
// progress for stallAfter. It returns the state and whether it changed.
func (h *mirrorHealth) check(now time.Time, stallAfter time.Duration) (stalled, changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	since := max(h.behindSince, h.progressAt)
	s := h.behindSince != 0 && time.Duration(unixNano(now)-since) >= stallAfter
	changed = s != h.stalled
	h.stalled = s
	return s, changed
}

// lag is the mirror's distance behind the origin's head in origin time: the head's time
// less the time of the last record scanned. Before any record's time is known it is, as a
// lower bound, how long the mirror has been behind by the local clock.
func (h *mirrorHealth) lag(now time.Time) (seconds float64, stalled bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.behindSince == 0:
		return 0, h.stalled
	case h.reachedTime > 0 && h.headTime > h.reachedTime:
		return time.Duration(h.headTime - h.reachedTime).Seconds(), h.stalled
	}
	return time.Duration(unixNano(now) - h.behindSince).Seconds(), h.stalled
}

// checkStalls decides, for each link, which mirrors stalled or recovered since the last
// check, and logs each change as one line per link and check with the count and a few
// names: a WARN when mirrors stall, an INFO when they recover. Called from Run every
// StallAfter/10. Only mirrors that can be behind are looked at: those holding or waiting
// for a stream, and those reported stalled (a parked mirror is caught up, or it would be
// waiting), so an idle link costs nothing per topic.
func (f *Federation) checkStalls() {
	now := f.cfg.Now()
	for _, l := range f.links() {
		hs := l.stallCandidates()
		var stalled, recovered []string
		for topic, h := range hs {
			s, changed := h.check(now, f.cfg.StallAfter)
			switch {
			case changed && s:
				stalled = append(stalled, topic)
			case changed:
				recovered = append(recovered, topic)
			}
		}
		total := l.noteStalls(stalled, recovered)
		if len(stalled) > 0 {
			slices.Sort(stalled)
			l.log.Warn("mirror stalled: no records while the origin's head moves", "count", len(stalled),
				"stalled", total, "topics", someNames(stalled), "stall_after", f.cfg.StallAfter,
				"lag_seconds", lagOf(hs[stalled[0]], now))
		}
		if len(recovered) > 0 {
			slices.Sort(recovered)
			l.log.Info("mirror recovered from a stall", "count", len(recovered), "stalled", total,
				"topics", someNames(recovered))
		}
	}
}

func lagOf(h *mirrorHealth, now time.Time) float64 {
	secs, _ := h.lag(now)
	return secs
}

// someNames is the first few of names, for a log line about many topics.
func someNames(names []string) string {
	const few = 5
	if len(names) <= few {
		return strings.Join(names, ",")
	}
	return fmt.Sprintf("%s,... (%d more)", strings.Join(names[:few], ","), len(names)-few)
}

// stallCandidates returns the mirrors of the link that can be behind: open, waiting for a
// stream, or reported stalled.
func (l *link) stallCandidates() map[string]*mirrorHealth {
	l.mu.Lock()
	defer l.mu.Unlock()
	hs := make(map[string]*mirrorHealth, len(l.mu.mirrors)+len(l.mu.queued)+len(l.mu.stalled))
	add := func(t string) {
		if h := l.mu.health[t]; h != nil {
			hs[t] = h
		}
	}
	for t := range l.mu.mirrors {
		add(t)
	}
	for t := range l.mu.queued {
		add(t)
	}
	for t := range l.mu.stalled {
		add(t)
	}
	return hs
}

// noteStalls records the stalls and recoveries of a check and returns how many of the
// link's mirrors are stalled now.
func (l *link) noteStalls(stalled, recovered []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range stalled {
		l.mu.stalled[t] = true
	}
	for _, t := range recovered {
		delete(l.mu.stalled, t)
	}
	for t := range l.mu.stalled { // no longer mirrored here: not stalled either
		if l.mu.health[t] == nil {
			delete(l.mu.stalled, t)
		}
	}
	if len(l.mu.stalled) == 0 && len(recovered) > 0 {
		// Let the map of a long stall go: a map keeps its largest size, and the GC scans all
		// of it at every cycle (10,000 topics waiting for streams under load left 43 B a
		// mirrored topic behind).
		l.mu.stalled = make(map[string]bool)
	}
	return len(l.mu.stalled)
}
