package groups

import (
	"fmt"
	"time"
)

// Stats is a snapshot of a live group, for tests and for a failing test's message.
type Stats struct {
	Outstanding, ready, dead int
	nextDue                  time.Time
	Members                  []MemberStats
	Topics                   map[string]TopicStats
}

// MemberStats is a member in a groupStats.
type MemberStats struct {
	id                string
	Pending, reserved int
	stalled           bool
	Held              map[string]map[uint64]bool // topic -> offsets delivered to it and not done
}

// TopicStats is a topic in a groupStats.
type TopicStats struct {
	Floor, Next uint64
	Out         int
}

func (g *Group) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := Stats{Outstanding: g.mu.outstanding, ready: len(g.mu.ready), dead: len(g.mu.dead), nextDue: g.mu.nextDue,
		Topics: make(map[string]TopicStats, len(g.mu.list))}
	byMember := make(map[*Member]int, len(g.mu.members))
	for m := range g.mu.members {
		byMember[m] = len(st.Members)
		st.Members = append(st.Members, MemberStats{id: m.id, Pending: m.pending, reserved: len(m.reserved), stalled: m.stalled,
			Held: make(map[string]map[uint64]bool)})
	}
	for _, t := range g.mu.list {
		st.Topics[t.name] = TopicStats{Floor: t.floor, Next: t.next, Out: t.out.len()}
		for _, f := range t.out.all() {
			off := f.off
			if i, ok := byMember[f.m]; ok && f.state == fAssigned && !f.deadline.IsZero() {
				h := st.Members[i].Held
				if h[t.name] == nil {
					h[t.name] = make(map[uint64]bool)
				}
				h[t.name][off] = true
			}
		}
	}
	return st
}

func (st Stats) String() string {
	out := fmt.Sprintf("outstanding %d ready %d dead %d due %v;", st.Outstanding, st.ready, st.dead, time.Until(st.nextDue))
	for _, m := range st.Members {
		out += fmt.Sprintf(" member %s pending %d reserved %d stalled %v;", m.id, m.Pending, m.reserved, m.stalled)
	}
	for name, t := range st.Topics {
		out += fmt.Sprintf(" topic %s floor %d next %d out %d;", name, t.Floor, t.Next, t.Out)
	}
	return out
}
