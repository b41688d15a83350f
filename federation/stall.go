package federation

import (
	"sync"
	"time"
)

// mirrorHealth is what a link knows of one mirrored topic's progress against the origin's
// head, kept across the link's connections and mirror restarts (so a reconnect does not make
// a stuck mirror look caught up). The mirror's goroutine reports progress, the catalog
// reader and the mirror stream report heads, Run's stall check decides stalled; each holds
// mu for a few field updates.
type mirrorHealth struct {
	mu          sync.Mutex
	headNext    uint64    // the origin log's next offset, as last reported
	headTime    int64     // the origin's head time (unix ns, origin clock), as last reported
	reached     uint64    // origin log offset this mirror has scanned up to (records before it are mirrored or skipped)
	reachedTime int64     // origin time of the record before reached (0: unknown)
	progressAt  time.Time // local time of the last progress (records mirrored, the scan moved)
	behindSince time.Time // local time since which the reported head is past reached (zero: caught up)
	stalled     bool
}

// reported notes a head the origin reported (on the catalog stream or a mirror stream).
func (h *mirrorHealth) reported(next uint64, headTime int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
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
		h.progressAt = now
		if t > 0 {
			h.reachedTime = max(h.reachedTime, t)
		}
	}
	h.updateLocked(now)
}

func (h *mirrorHealth) updateLocked(now time.Time) {
	switch {
	case h.headNext <= h.reached:
		h.behindSince = time.Time{}
		h.reachedTime = max(h.reachedTime, h.headTime) // caught up: the scan is at the head
	case h.behindSince.IsZero():
		h.behindSince = now
	}
}

// check decides whether the mirror is stalled at now: behind the reported head with no
// progress for stallAfter. It returns the state and whether it changed.
func (h *mirrorHealth) check(now time.Time, stallAfter time.Duration) (stalled, changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	since := h.behindSince
	if h.progressAt.After(since) {
		since = h.progressAt
	}
	s := !h.behindSince.IsZero() && now.Sub(since) >= stallAfter
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
	case h.behindSince.IsZero():
		return 0, h.stalled
	case h.reachedTime > 0 && h.headTime > h.reachedTime:
		return time.Duration(h.headTime - h.reachedTime).Seconds(), h.stalled
	}
	return now.Sub(h.behindSince).Seconds(), h.stalled
}

// healthOf returns the health of the link's mirror of topic, created on first use.
func (l *link) healthOf(topic string) *mirrorHealth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.healthOfLocked(topic)
}

func (l *link) healthOfLocked(topic string) *mirrorHealth {
	h := l.mu.health[topic]
	if h == nil {
		h = &mirrorHealth{}
		l.mu.health[topic] = h
	}
	return h
}

// checkStalls reports each mirror whose state changed: WARN once when it stalls, INFO when
// it recovers. Called from Run every StallAfter/10.
func (f *Federation) checkStalls() {
	now := f.cfg.Now()
	for _, l := range f.links() {
		l.mu.Lock()
		hs := make(map[string]*mirrorHealth, len(l.mu.mirrors))
		for t, m := range l.mu.mirrors { // the topics this link mirrors (running or restarting)
			hs[t] = m.health
		}
		l.mu.Unlock()
		for topic, h := range hs {
			stalled, changed := h.check(now, f.cfg.StallAfter)
			if !changed {
				continue
			}
			secs, _ := h.lag(now)
			if stalled {
				l.log.Warn("mirror stalled: no records while the origin's head moves", "topic", topic,
					"stall_after", f.cfg.StallAfter, "lag_seconds", secs)
			} else {
				l.log.Info("mirror recovered from a stall", "topic", topic, "lag_seconds", secs)
			}
		}
	}
}
