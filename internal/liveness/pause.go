package liveness

import (
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// A process that cannot run its goroutines on time does not take in what its peers sent: the
// packets wait in its sockets, or in quic-go's queues, while the goroutines that would read
// them wait for a CPU. Its watches, which may themselves run on time, then see a silence that
// is the process's, not the peer's. On a 2-core machine a client process holding 10,000
// connections (about 1 GB of heap) was measured in a trace (issue 31): during a garbage
// collection's mark phase its goroutines waited up to 2.4 s to run, on average 0.95 s for a
// quarter of a second, while the node answered every packet within 0.25 s; thousands of its
// watches took the node as lost at once.
//
// pauses is the process's record of such stalls. While any watch runs, one goroutine samples
// every pauseSample the runtime's histogram of how long runnable goroutines waited to run
// (runtime/metrics /sched/latencies:seconds, which the runtime fills for a sample of
// scheduling events): a wait of pauseDelay or more, or the sampler itself waking late, marks
// the process as paused at that moment. A watch counts a peer's silence only from the end of
// the last pause: a peer that really is gone is then noticed up to Timeout after the process
// runs normally again, and a process that stays starved for good leaves the decision to
// QUIC's own idle timer (IdleTimeoutFor).
var pauses pauseClock

const (
	// pauseSample is how often the sampler looks at the histogram.
	pauseSample = 100 * time.Millisecond
	// pauseDelay is a wait to run that counts as a pause: well above what a process with a
	// CPU to spare shows (tens of microseconds; a few milliseconds under load), well below a
	// watch's tick and timeout.
	pauseDelay = 100 * time.Millisecond
)

type pauseClock struct {
	mu struct {
		sync.Mutex
		watches int           // watches running
		stop    chan struct{} // ends the sampler; nil while none runs
	}
	last atomic.Int64 // UnixNano of the latest sample that saw a pause; 0: none yet
}

// acquire starts the sampler for the first watch; release stops it after the last.
func (p *pauseClock) acquire() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.watches++
	if p.mu.watches == 1 {
		p.mu.stop = make(chan struct{})
		go p.sample(p.mu.stop)
	}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.mu.watches--
		if p.mu.watches == 0 {
			close(p.mu.stop)
			p.mu.stop = nil
		}
	}
}

// lastPause is when a pause was last seen (the zero Time if never).
func (p *pauseClock) lastPause() time.Time {
	if ns := p.last.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// sample runs until stop is closed.
func (p *pauseClock) sample(stop chan struct{}) {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	slow := func() uint64 { // scheduling waits of pauseDelay or more, since the process began
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindFloat64Histogram {
			return 0 // a runtime without the metric: only the sampler's own lateness counts
		}
		h := s[0].Value.Float64Histogram()
		var n uint64
		for i, c := range h.Counts {
			if h.Buckets[i] >= pauseDelay.Seconds() { // Buckets[i] is bucket i's lower bound
				n += c
			}
		}
		return n
	}
	t := time.NewTicker(pauseSample)
	defer t.Stop()
	before, prev := slow(), time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n := slow()
			if n != before || now.Sub(prev) > pauseSample+pauseDelay {
				p.last.Store(now.UnixNano())
			}
			before, prev = n, now
		}
	}
}

// IdleTimeoutFor is the QUIC idle timeout (quic.Config.MaxIdleTimeout) to give a connection
// whose peer a Watch with this Timeout watches: twice as long, so that QUIC's own timer, which
// knows nothing of the process's pauses, ends the connection only when the process stayed
// starved for that long, and the watch decides otherwise. 0 stays 0 (quic-go's default).
func IdleTimeoutFor(timeout time.Duration) time.Duration {
	return 2 * timeout
}
