package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/timeline"
)

// The grow campaign's episode timeline (QUICMQ_GROW_EPISODE=1, issue 30): each node runs
// with --pprof and keeps its store's and raft engine's last events (internal/timeline); after
// the moves the campaign fetches them and lays its worst episode of slow publishes beside
// them, per node and per 10 ms: rounds, syncs and their time, the longest round, a
// catch-up's chunks written and read, Pebble's flushes, compactions and write stalls, and Go
// GC pauses (the test process's too: it is the client).

// fetchTimelines reads each node's events since from its metrics address (a build without
// the endpoint gives none, and is reported so).
func fetchTimelines(t *testing.T, names, addrs []string, since time.Time) map[string][]timeline.Event {
	out := map[string][]timeline.Event{}
	for i, addr := range addrs {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/quicmq/timeline?since=%d", addr, since.UnixNano()))
		if err != nil {
			t.Logf("%s: timeline: %v", names[i], err)
			continue
		}
		var evs []timeline.Event
		if resp.StatusCode != http.StatusOK {
			t.Logf("%s: timeline: %s (a build without it)", names[i], resp.Status)
		} else if err := json.NewDecoder(resp.Body).Decode(&evs); err != nil {
			t.Logf("%s: timeline: %v", names[i], err)
		}
		resp.Body.Close()
		out[names[i]] = evs
	}
	// The client runs in this process: its GC pauses stop it too.
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for i := range min(int(ms.NumGC), len(ms.PauseEnd)) {
		end, d := int64(ms.PauseEnd[i]), int64(ms.PauseNs[i])
		if end >= since.UnixNano() {
			out["test"] = append(out["test"], timeline.Event{Kind: timeline.GC, Start: end - d, Dur: d})
		}
	}
	return out
}

// worstEpisode is the episode with the most slow publishes (the longest latency breaks a tie).
func worstEpisode(eps []episode) episode {
	var w episode
	var wl time.Duration
	for _, ep := range eps {
		l, _ := ep.worst()
		if len(ep) > len(w) || len(ep) == len(w) && l > wl {
			w, wl = ep, l
		}
	}
	return w
}

// nodeSpan sums one node's events over a span of time.
type nodeSpan struct {
	rounds, syncs, flushes, compactions, restores int
	syncTime, longestSync, longestRound, gc       time.Duration
	flushTime, compactionTime, stallTime          time.Duration
	written, read                                 int64 // catch-up chunk bytes
}

// overlap is how much of [s, s+d) falls in [from, to).
func overlap(s, d, from, to int64) time.Duration {
	return time.Duration(max(0, min(s+d, to)-max(s, from)))
}

// span sums evs over [from, to): counts by start, times by overlap.
func span(evs []timeline.Event, from, to int64) nodeSpan {
	var n nodeSpan
	for _, ev := range evs {
		o := overlap(ev.Start, ev.Dur, from, to)
		starts := ev.Start >= from && ev.Start < to
		if o == 0 && !starts {
			continue
		}
		switch ev.Kind {
		case timeline.Round:
			if starts {
				n.rounds++
			}
			n.longestRound = max(n.longestRound, o)
		case timeline.Sync:
			if starts {
				n.syncs++
			}
			n.syncTime += o
			n.longestSync = max(n.longestSync, time.Duration(ev.Dur))
		case timeline.CatchupWrite:
			if starts {
				n.written += ev.N
			}
		case timeline.CatchupRead:
			if starts {
				n.read += ev.N
			}
		case timeline.Restore:
			if starts {
				n.restores += int(ev.N)
			}
		case timeline.Flush:
			n.flushes++
			n.flushTime += o
		case timeline.Compaction:
			n.compactions++
			n.compactionTime += o
		case timeline.Stall:
			n.stallTime += o
		case timeline.GC:
			n.gc += o
		}
	}
	return n
}

// cell is a node's 10 ms: rounds, syncs/ms of sync, the longest round's ms in it, catch-up
// KiB written/read, and letters for what overlapped it: F flush, K compaction, T write
// stall, G GC pause, I snapshots installed.
func (n nodeSpan) cell() string {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	flags := ""
	for _, f := range []struct {
		on bool
		c  string
	}{{n.flushTime > 0, "F"}, {n.compactionTime > 0, "K"}, {n.stallTime > 0, "T"}, {n.gc > 0, "G"}, {n.restores > 0, "I"}} {
		if f.on {
			flags += f.c
		}
	}
	cu := ""
	if n.written > 0 || n.read > 0 {
		cu = fmt.Sprintf("%d/%d", n.written>>10, n.read>>10)
	}
	return fmt.Sprintf("%2d %2d/%4.1f %4.1f %7s %-3s", n.rounds, n.syncs, ms(n.syncTime), ms(n.longestRound), cu, flags)
}

// summary is a node's whole span in words.
func (n nodeSpan) summary(width time.Duration) string {
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("%d rounds (longest %v), %d syncs taking %v (%.0f%% of the span, longest %v), catch-up %d KiB written %d KiB read, %d snapshots installed, flush %v (%d), compaction %v (%d), write stall %v, GC %v",
		n.rounds, r(n.longestRound), n.syncs, r(n.syncTime), 100*float64(n.syncTime)/float64(width), r(n.longestSync), n.written>>10, n.read>>10,
		n.restores, r(n.flushTime), n.flushes, r(n.compactionTime), n.compactions, r(n.stallTime), r(n.gc))
}

// episodeTimeline lays the worst of the grow phase's episodes of publishes slower than over
// beside the nodes' events, per 10 ms, with each node's sums over the episode and over the
// second before the moves started (what the same node did when publishes were fast).
// leaderOf and replicasOf name each topic's group (after the moves).
func (l *rollLoad) episodeTimeline(start time.Time, over time.Duration, evs map[string][]timeline.Event, io *ioSampler, names []string, replicasOf map[int]string, leaderOf map[int]string) string {
	l.mu.Lock()
	var blocked []timeline.Event // the client's PublishAsync calls over 2 ms
	for _, b := range l.blocked {
		if d, err := time.ParseDuration(b.what); err == nil {
			blocked = append(blocked, timeline.Event{Kind: timeline.Round, Start: b.at.UnixNano(), Dur: int64(d)})
		}
	}
	var slow, all []rollSample
	for _, s := range l.samples {
		if !s.sent.Before(start) {
			all = append(all, s)
			if s.lat > over {
				slow = append(slow, s)
			}
		}
	}
	l.mu.Unlock()
	slices.SortFunc(slow, func(a, b rollSample) int { return a.sent.Compare(b.sent) })
	ep := worstEpisode(slowEpisodes(slow))
	if len(ep) == 0 {
		return "  no slow publish during the moves\n"
	}
	const step = 10 * time.Millisecond
	from := ep[0].sent.Add(-100 * time.Millisecond)
	to := ep[0].sent
	for _, s := range ep {
		if a := s.sent.Add(s.lat); a.After(to) {
			to = a
		}
	}
	to = to.Add(50 * time.Millisecond)
	if limit := from.Add(2 * time.Second); to.After(limit) {
		to = limit
	}
	var b strings.Builder
	worst, _ := ep.worst()
	byNode, byLeader, bySet := map[string]int{}, map[string]int{}, map[string]int{}
	for _, s := range ep {
		byNode[s.node]++
		byLeader[leaderOf[s.topic]]++
		bySet[replicasOf[s.topic]]++
	}
	fmt.Fprintf(&b, "  worst episode: sent %.3fs..%.3fs after the first start, %d slow (worst %v); client on %v; by leader after the moves %v; by replicas after %v\n",
		ep[0].sent.Sub(start).Seconds(), ep[len(ep)-1].sent.Sub(start).Seconds(), len(ep), worst.Round(time.Millisecond), byNode, byLeader, bySet)
	fmt.Fprintf(&b, "  per 10 ms: publishes sent (slow)/acknowledged; ms the client was held in PublishAsync (calls over 2 ms); the disk's KiB written, cache flushes/ms flushing, I/Os in flight, page cache dirty/writeback MiB; per node: KiB its process wrote, rounds, syncs/ms syncing, longest round ms, catch-up KiB written/read, F flush K compaction T stall G GC I install\n")
	fmt.Fprintf(&b, "  %7s %14s %4s %24s", "ms", "sent/acked", "held", "disk")
	for _, n := range names {
		fmt.Fprintf(&b, " | %-35s", n)
	}
	b.WriteString("\n")
	for at := from; at.Before(to); at = at.Add(step) {
		f, t := at.UnixNano(), at.Add(step).UnixNano()
		sent, acked, slowSent := 0, 0, 0
		for _, s := range all {
			if ns := s.sent.UnixNano(); ns >= f && ns < t {
				sent++
				if s.lat > over {
					slowSent++
				}
			}
			if ns := s.sent.Add(s.lat).UnixNano(); ns >= f && ns < t {
				acked++
			}
		}
		disk, wrote := io.between(at, at.Add(step), names)
		fmt.Fprintf(&b, "  %7.0f %3d(%3d)/%3d %4.1f %24s", float64(at.Sub(start))/1e6, sent, slowSent, acked, float64(span(blocked, f, t).longestRound)/1e6, disk)
		for _, n := range names {
			fmt.Fprintf(&b, " | %5d %s", wrote[n], span(evs[n], f, t).cell())
		}
		b.WriteString("\n")
	}
	width := to.Sub(from)
	if disk, _ := io.between(from, to, nil); disk != "" {
		bdisk, _ := io.between(start.Add(-width), start, nil)
		fmt.Fprintf(&b, "  the disk over the episode: %s; before the moves (same span): %s\n", disk, bdisk)
	}
	for _, n := range names {
		fmt.Fprintf(&b, "  %s over the episode (%v): %s\n", n, width.Round(time.Millisecond), span(evs[n], from.UnixNano(), to.UnixNano()).summary(width))
		bf := start.Add(-width)
		fmt.Fprintf(&b, "  %s before the moves (same span): %s\n", n, span(evs[n], bf.UnixNano(), start.UnixNano()).summary(width))
	}
	return b.String()
}

// ioSample is the machine's disk and page cache, and each node's writes, at one moment
// (Linux /proc), sampled every 10 ms beside the episode timeline: a synced commit that
// stalls on every node at once is the disk's, and these say whose writes it held.
type ioSample struct {
	at                time.Time
	sectors, flushes  int64            // the busiest disk's sectors written and cache flushes completed, so far
	flushMs, inflight int64            // its time flushing so far (ms); I/Os in progress now
	dirty, writeback  int64            // KiB of dirty and under-writeback page cache now
	written           map[string]int64 // node -> bytes its process caused to be written, so far
}

// ioSampler samples every 10 ms until ctx ends.
type ioSampler struct {
	mu      sync.Mutex
	samples []ioSample
}

func (s *ioSampler) run(ctx context.Context, pids func() map[string]int) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		is := ioSample{at: time.Now(), written: map[string]int64{}}
		is.sectors, is.flushes, is.flushMs, is.inflight = diskWrites()
		is.dirty, is.writeback = pageCache()
		for name, pid := range pids() {
			is.written[name] = procWriteBytes(pid)
		}
		s.mu.Lock()
		s.samples = append(s.samples, is)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// diskWrites reads the disk with the most sectors written from /proc/diskstats.
func diskWrites() (sectors, flushes, flushMs, inflight int64) {
	for _, f := range diskstats() {
		n := func(i int) int64 {
			if i >= len(f) {
				return 0
			}
			return f[i]
		}
		if n(9) > sectors {
			sectors, flushes, flushMs, inflight = n(9), n(18), n(19), n(11)
		}
	}
	return
}

// diskstats reads /proc/diskstats: each disk's line but loop devices', its fields as numbers
// at the kernel's column numbers counted from 0 (the name, field 2, reads as 0). Lines of
// fewer than 14 fields (partitions on older kernels) are left out.
func diskstats() [][]int64 {
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return nil
	}
	var disks [][]int64
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 14 || strings.HasPrefix(f[2], "loop") {
			continue
		}
		d := make([]int64, len(f))
		for i, x := range f {
			d[i], _ = strconv.ParseInt(x, 10, 64)
		}
		disks = append(disks, d)
	}
	return disks
}

// pageCache reads Dirty and Writeback (KiB) from /proc/meminfo.
func pageCache() (dirty, writeback int64) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		x, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Dirty:":
			dirty = x
		case "Writeback:":
			writeback = x
		}
	}
	return
}

// procWriteBytes is /proc/PID/io's write_bytes: what the process caused to be written to
// storage (counted when it dirtied the pages).
func procWriteBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			x, _ := strconv.ParseInt(v, 10, 64)
			return x
		}
	}
	return 0
}

// at returns the sample nearest before t (and whether there is one).
func (s *ioSampler) at(t time.Time) (ioSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.samples, t, func(a ioSample, t time.Time) int { return a.at.Compare(t) })
	if i == 0 {
		return ioSample{}, false
	}
	return s.samples[i-1], true
}

// between describes the I/O from a to b: the disk's KiB written, flushes and ms flushing,
// the page cache's dirty and writeback MiB at b, and the KiB each of names wrote.
func (s *ioSampler) between(a, b time.Time, names []string) (disk string, nodes map[string]int64) {
	x, ok1 := s.at(a)
	y, ok2 := s.at(b)
	if !ok1 || !ok2 {
		return "", nil
	}
	nodes = map[string]int64{}
	for _, n := range names {
		nodes[n] = (y.written[n] - x.written[n]) >> 10
	}
	return fmt.Sprintf("%6d %3d/%3d %3d %4d/%3d", (y.sectors-x.sectors)/2, y.flushes-x.flushes, y.flushMs-x.flushMs, y.inflight, y.dirty>>10, y.writeback>>10), nodes
}

// writers is every process's write_bytes (/proc/PID/io) by "comm[pid]", to name who wrote
// to the disk over a span (the machine is shared: other work's writeback holds the nodes'
// syncs too).
func writers() map[string]int64 {
	out := map[string]int64{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out[fmt.Sprintf("%s[%d]", strings.TrimSpace(string(comm)), pid)] = procWriteBytes(pid)
	}
	return out
}

// topWriters names the n processes that wrote the most between two writers() readings,
// with the disk's own total between samples a and b.
func topWriters(before, after map[string]int64, n int) string {
	type w struct {
		name  string
		bytes int64
	}
	var ws []w
	var sum int64
	for name, b := range after {
		if d := b - before[name]; d > 0 {
			ws = append(ws, w{name, d})
			sum += d
		}
	}
	slices.SortFunc(ws, func(a, b w) int { return int(b.bytes>>10 - a.bytes>>10) })
	var parts []string
	for _, x := range ws[:min(n, len(ws))] {
		parts = append(parts, fmt.Sprintf("%s %d MiB", x.name, x.bytes>>20))
	}
	return fmt.Sprintf("%d MiB by every process (%s)", sum>>20, strings.Join(parts, ", "))
}
