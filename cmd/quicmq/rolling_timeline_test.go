package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quicmq/quicmq/internal/nodeproc"
)

// A timeline of a campaign's machine, for finding where slow publishes come from
// (QUICMQ_ROLL_TIMELINE=1 in the rolling-restart campaign): every 100 ms, the CPU time of
// each node process and of the test process, the machine's busy and iowait time, and the
// time its disk was busy (Linux /proc; nothing is sampled elsewhere).

type procSample struct {
	at           time.Time
	cpu          map[string]float64 // process name -> CPU seconds so far
	busy, iowait float64            // the machine's, seconds so far (all CPUs)
	diskBusy     float64            // seconds the disk holding the data was busy, so far
	total        float64            // the machine's CPU seconds so far (all CPUs, idle too)
}

type procSampler struct {
	mu      sync.Mutex
	samples []procSample
}

// sampleRegion runs s over r's node processes and the test process until ctx ends or the
// returned stop is called, which waits for the last sample.
func sampleRegion(ctx context.Context, r *nodeproc.Region, s *procSampler) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.run(ctx, regionPids(r)) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// regionPids names r's running node processes and the test process ("test"), by name.
func regionPids(r *nodeproc.Region) func() map[string]int {
	return func() map[string]int {
		pids := r.Pids()
		pids["test"] = os.Getpid()
		return pids
	}
}

// run samples until ctx ends; pids gives the processes to sample by name (it is called at
// each sample: a restarted node has a new pid).
func (s *procSampler) run(ctx context.Context, pids func() map[string]int) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		ps := procSample{at: time.Now(), cpu: map[string]float64{}}
		for name, pid := range pids() {
			ps.cpu[name] = procCPUSeconds(pid)
		}
		ps.busy, ps.iowait, ps.total = machineCPU()
		ps.diskBusy = diskBusy()
		s.mu.Lock()
		s.samples = append(s.samples, ps)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

const clockTicks = 100 // USER_HZ on Linux

func procCPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return -1
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / clockTicks
}

func machineCPU() (busy, iowait, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)[1:]
	for i, v := range f {
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		switch i {
		case 3: // idle
		case 4:
			iowait = x
		default:
			busy += x
		}
	}
	return busy / clockTicks, iowait / clockTicks, total / clockTicks
}

// diskBusy is the busiest disk's time doing I/O (/proc/diskstats, field 13, ms).
func diskBusy() float64 {
	var m int64
	for _, f := range diskstats() {
		m = max(m, f[12])
	}
	return float64(m) / 1000
}

// timeline prints, per step of the roll from start to end, the publishes sent in it (how
// many, p99, how many slower than over) beside what the machine did then.
func (s *procSampler) timeline(l *rollLoad, start, end time.Time, step, over time.Duration, names []string) string {
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	l.mu.Lock()
	pubs := slices.Clone(l.samples)
	events := slices.Clone(l.events)
	l.mu.Unlock()
	at := func(t time.Time) (procSample, bool) { // the last sample at or before t
		i, _ := slices.BinarySearchFunc(samples, t, func(p procSample, t time.Time) int { return p.at.Compare(t) })
		if i == 0 {
			return procSample{}, false
		}
		return samples[i-1], true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %7s %5s %8s %5s | %s | %5s %6s %5s | events\n", "t", "pubs", "p99", "slow", strings.Join(names, " "), "busy", "iowait", "disk")
	for t := start; t.Before(end); t = t.Add(step) {
		var lat []time.Duration
		slow := 0
		for _, p := range pubs {
			if !p.sent.Before(t) && p.sent.Before(t.Add(step)) {
				lat = append(lat, p.lat)
				if p.lat > over {
					slow++
				}
			}
		}
		slices.Sort(lat)
		p99 := time.Duration(0)
		if len(lat) > 0 {
			p99 = lat[min(len(lat)-1, int(0.99*float64(len(lat))))]
		}
		a, ok1 := at(t)
		z, ok2 := at(t.Add(step))
		var cols []string
		busy, iow, disk := "", "", ""
		if ok1 && ok2 && z.at.After(a.at) {
			dt := z.at.Sub(a.at).Seconds()
			for _, n := range names {
				if a.cpu[n] < 0 || z.cpu[n] < 0 || z.cpu[n] < a.cpu[n] {
					cols = append(cols, fmt.Sprintf("%*s", max(4, len(n)), "-"))
					continue
				}
				cols = append(cols, fmt.Sprintf("%*.0f%%", max(3, len(n)-1), 100*(z.cpu[n]-a.cpu[n])/dt))
			}
			tot := z.total - a.total
			if tot > 0 {
				busy = fmt.Sprintf("%4.0f%%", 100*(z.busy-a.busy)/tot)
				iow = fmt.Sprintf("%5.0f%%", 100*(z.iowait-a.iowait)/tot)
			}
			disk = fmt.Sprintf("%4.0f%%", 100*(z.diskBusy-a.diskBusy)/dt)
		} else {
			for _, n := range names {
				cols = append(cols, fmt.Sprintf("%*s", max(4, len(n)), "?"))
			}
		}
		var ev []string
		for _, e := range events {
			if !e.at.Before(t) && e.at.Before(t.Add(step)) {
				ev = append(ev, e.what)
			}
		}
		fmt.Fprintf(&b, "  %6.2fs %5d %8v %5d | %s | %5s %6s %5s | %s\n", t.Sub(start).Seconds(), len(lat), p99.Round(time.Millisecond), slow,
			strings.Join(cols, " "), busy, iow, disk, strings.Join(ev, "; "))
	}
	return b.String()
}
