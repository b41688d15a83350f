package main

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
)

// BenchmarkIdleConnections measures what keeping idle client connections alive costs a real
// `quicmq node` process (issue 31): QUICMQ_BENCH_IDLE_CONNS connections (default 10000) that
// carry nothing but keep-alives, held by this process, and over QUICMQ_BENCH_IDLE_WINDOW
// (default 20 s) the node's CPU time (utime+stime from /proc) and the packets the
// connections sent and received (every one of them to or from the node). Leaves, all in one
// run and against one node:
//   - none: no connections, the node's own CPU (gossip, timers), to subtract;
//   - old: the defaults before issue 31 (IdleTimeout 30 s, keep-alives every 10 s);
//   - new: today's defaults (IdleTimeout 2 s, keep-alives every 1 s, the liveness watch);
//   - keepalive-500ms: today's defaults with keep-alives every 500 ms, the rate QUIC's idle
//     timer alone needs to notice a dead node within 2 s (IdleTimeout 1.5 s: it counts from
//     the first ack-eliciting packet after the last one received), which the watch avoids.
//
// One op is one whole run:
//
//	QUICMQ_BENCH_IDLE_CONNS=10000 go test -run '^$' -bench IdleConnections -benchtime 1x -timeout 30m ./cmd/quicmq
func BenchmarkIdleConnections(b *testing.B) {
	bin := lagBinary(b)
	conns := envInt("QUICMQ_BENCH_IDLE_CONNS", 10000)
	window := time.Duration(envInt("QUICMQ_BENCH_IDLE_WINDOW", 20)) * time.Second
	data := b.TempDir()
	p := startLagNode(b, bin, data) // a node with its metrics listener, as for the lag benchmark
	ca := filepath.Join(data, "tls", "ca.pem")
	for _, leaf := range []struct {
		name string
		opts client.Options
	}{
		{"none", client.Options{}}, // the node's CPU without connections (gossip, timers)
		{"old", client.Options{IdleTimeout: 30 * time.Second, KeepAlive: 10 * time.Second}},
		{"new", client.Options{}},
		{"keepalive-500ms", client.Options{KeepAlive: 500 * time.Millisecond}},
	} {
		b.Run(leaf.name, func(b *testing.B) {
			for range b.N {
				n := conns
				if leaf.name == "none" {
					n = 0
				}
				idleRun(b, p, ca, n, window, leaf.opts)
			}
		})
	}
}

// idleRun dials n connections with opts, lets them settle, measures the window, closes them.
func idleRun(b *testing.B, p *nodeproc.Process, ca string, n int, window time.Duration, opts client.Options) {
	opts.CAFile, opts.Name, opts.MigrateCheck = ca, "idle", -1 // no route lookups in this process
	cs := make([]*client.Conn, n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	work := make(chan int)
	// Dialers at once (QUICMQ_BENCH_IDLE_DIALERS, default 16) and a bound on new connections
	// per second (QUICMQ_BENCH_IDLE_DIAL_RATE, default none): on a machine that the node and
	// this process share, 16 handshakes at a time saturate both cores, and connections
	// dialed earlier, starved meanwhile, go silent for the 2 s watch and are taken as lost;
	// a paced dial shows what the connections cost once up, apart from that storm.
	dialers := envInt("QUICMQ_BENCH_IDLE_DIALERS", 16)
	var pace <-chan time.Time
	if rate := envInt("QUICMQ_BENCH_IDLE_DIAL_RATE", 0); rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		pace = t.C
	}
	for range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				var (
					c   *client.Conn
					err error
				)
				for range 3 { // a handshake can time out on a loaded machine: dial again
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					c, err = client.Dial(ctx, opts, p.Addr)
					cancel()
					if err == nil {
						break
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				cs[i] = c
			}
		}()
	}
	dialStart := time.Now()
	for i := range n {
		if pace != nil {
			<-pace
		}
		work <- i
	}
	close(work)
	wg.Wait()
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}()
	if len(errs) > 0 {
		b.Fatalf("%d of %d dials failed, first: %v", len(errs), n, errs[0])
	}
	dialed := time.Since(dialStart)
	// Settle: the handshakes' tails (tickets, path MTU discovery) are over after a few
	// seconds; then only keep-alives remain.
	settle := time.NewTimer(5 * time.Second)
	<-settle.C
	packets := func() (total uint64) {
		for _, c := range cs {
			st := c.Stats()
			total += st.PacketsSent + st.PacketsReceived
		}
		return total
	}
	silentNodes := func() (total uint64) {
		for _, c := range cs {
			total += c.Stats().SilentNodes
		}
		return total
	}
	silent0 := silentNodes() // taken as lost while the others dialed and settled
	cpu0, pk0, t0, self0 := procCPU(b, p.Pid()), packets(), time.Now(), procCPU(b, os.Getpid())
	timer := time.NewTimer(window)
	<-timer.C
	cpu1, pk1, t1, self1 := procCPU(b, p.Pid()), packets(), time.Now(), procCPU(b, os.Getpid())
	elapsed := t1.Sub(t0).Seconds()
	silent := silentNodes()
	// Connections taken as lost although the node runs: on a machine short of CPU the node
	// (or this process) answers late; reported, not failed, as the figure to watch.
	b.ReportMetric(float64(silent), "conns-lost")
	b.ReportMetric(float64(silent-silent0), "conns-lost-in-window")
	cpuPct := (cpu1 - cpu0).Seconds() / elapsed * 100
	pps := float64(pk1-pk0) / elapsed
	b.ReportMetric(cpuPct, "node-cpu-%")
	b.ReportMetric(pps, "packets/s")
	b.ReportMetric(pps/float64(max(n, 1)), "packets/s/conn")
	b.ReportMetric((cpu1-cpu0).Seconds()*1e6/float64(pk1-pk0+1), "node-cpu-µs/packet")
	b.Logf("%d connections (dialed in %v): node CPU %.2f%% of a core, %.0f packets/s (%.2f per connection), over %v; the clients' process %.2f%% of a core; %d taken as lost (%d of them during the window, %d while dialing and settling)",
		n, dialed.Round(time.Millisecond), cpuPct, pps, pps/float64(max(n, 1)), t1.Sub(t0).Round(time.Millisecond),
		(self1-self0).Seconds()/elapsed*100, silent, silent-silent0, silent0)
}
