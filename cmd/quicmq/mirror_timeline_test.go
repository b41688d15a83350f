package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/nodeproc"
)

// mirrorTimeline logs, every second until the returned stop is called, each node's link
// gauges (mirror streams open, mirrors waiting for one) and the records it mirrored in that
// second, and the share of a core it used in that second (pids: each node's process now, 0
// when down): where the mirror campaign's delays come from (QUICMQ_MIRROR_LOAD_TIMELINE). A
// node that is down shows as "-".
func mirrorTimeline(t *testing.T, start time.Time, metrics map[string]string, pids func() map[string]int) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := make(map[string]float64)
		lastCPU := make(map[string]time.Duration) // by node, of the process lastPid names
		lastPid := make(map[string]int)
		lastAt := time.Now()
		nodes := slices.Sorted(func(yield func(string) bool) {
			for n := range metrics {
				if !yield(n) {
					return
				}
			}
		})
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			line := fmt.Sprintf("timeline %5.1fs:", time.Since(start).Seconds())
			now, procs := time.Now(), pids()
			for _, n := range nodes {
				cpu := "cpu -"
				if pid := procs[n]; pid > 0 {
					if d, err := nodeproc.CPU(pid); err == nil {
						if lastPid[n] == pid {
							cpu = fmt.Sprintf("cpu %3.0f%%", 100*(d-lastCPU[n]).Seconds()/now.Sub(lastAt).Seconds())
						}
						lastCPU[n], lastPid[n] = d, pid
					}
				}
				v, err := scrapeSums(metrics[n], "quicmq_link_mirror_streams", "quicmq_link_mirrors_waiting", "quicmq_mirror_appended_records_total")
				if err != nil {
					line += fmt.Sprintf(" %s - %s;", n, cpu)
					continue
				}
				line += fmt.Sprintf(" %s streams %4.0f waiting %6.0f mirrored %5.0f/s %s;", n, v[0], v[1], v[2]-last[n], cpu)
				last[n] = v[2]
			}
			lastAt = now
			t.Log(line)
		}
	}()
	return func() { close(done); <-exited }
}

// scrapeSums sums each named metric's samples (every label set) on the node serving
// metrics at addr.
func scrapeSums(addr string, names ...string) ([]float64, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(names))
	for _, line := range strings.Split(string(body), "\n") {
		for i, n := range names {
			if !strings.HasPrefix(line, n) || len(line) <= len(n) || (line[len(n)] != ' ' && line[len(n)] != '{') {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[i] += v
			}
		}
	}
	return out, nil
}
