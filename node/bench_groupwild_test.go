package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/wal"
)

// BenchmarkGroupWildcardReplay reads, from earliest, QUICMQ_BENCH_GROUP_WILD_TOPICS (default
// 20,000) topics "gr.N" of one record each, three ways side by side on one node in this
// process (issue 35):
//
//	go test -run '^$' -bench GroupWildcardReplay -benchtime 3x -count 1 ./node
//
// group-one-topic: a new consumer group over "gr1.one", a topic of as many records;
// plain-wildcard: a plain subscription "gr.>"; group-wildcard: a new consumer group over
// "gr.>". A group's member acknowledges every record and commits at the end (so its stores
// are in the time). Each leaf reports records/s and this process's CPU per record (node and
// client: on a loaded machine the steadier figure); the last reports its rate and CPU (the
// medians of the others' runs) against the other two: "group-wild/one" (the target
// for wildcards is >= 0.5) and "group-wild/plain", "cpu-group-wild/one" (CPU per record,
// wildcard over one topic's). With QUICMQ_BENCH_PROFILE_DIR set, each leaf writes a CPU profile
// of its own runs alone (not the set-up's) to DIR/<leaf>.prof.
func BenchmarkGroupWildcardReplay(b *testing.B) {
	topics := 20_000
	if v := os.Getenv("QUICMQ_BENCH_GROUP_WILD_TOPICS"); v != "" {
		var err error
		if topics, err = strconv.Atoi(v); err != nil || topics < 1 {
			b.Fatalf("QUICMQ_BENCH_GROUP_WILD_TOPICS=%q: want a positive number", v)
		}
	}
	n := newTestNode(b)
	ctx := context.Background()
	done := make(chan error, topics)
	for i := range topics {
		n.Log().AppendAsync(wal.AppendRequest{Topic: fmt.Sprintf("gr.%d", i), Records: []wal.Record{{Payload: []byte("x")}}},
			func(r wal.AppendResult) { done <- r.Err })
	}
	for range topics {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	one := make([]wal.Record, 512)
	for i := range one {
		one[i].Payload = []byte("x")
	}
	for off := 0; off < topics; off += len(one) {
		if res := n.Log().Append(ctx, wal.AppendRequest{Topic: "gr1.one", Records: one[:min(len(one), topics-off)]}); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	c := dialNode(b, n, client.Options{})
	rates, cpus := map[string][]float64{}, map[string][]float64{}
	groups := 0
	for _, leaf := range []struct {
		name, pattern string
		group         bool
	}{{"group-one-topic", "gr1.one", true}, {"plain-wildcard", "gr.>", false}, {"group-wildcard", "gr.>", true}} {
		b.Run(leaf.name, func(b *testing.B) {
			defer profileLeaf(b, leaf.name)()
			cpu0 := processCPU(b)
			for b.Loop() {
				opts := client.SubscribeOptions{From: client.Earliest}
				if leaf.group {
					groups++
					opts.Group = "bench" + strconv.Itoa(groups)
				}
				benchReadAll(b, c, leaf.pattern, opts, topics)
			}
			rate := float64(topics*b.N) / b.Elapsed().Seconds()
			cpu := float64((processCPU(b) - cpu0).Microseconds()) / float64(topics*b.N)
			b.ReportMetric(rate, "records/s")
			b.ReportMetric(cpu, "cpu-µs/record")
			rates[leaf.name] = append(rates[leaf.name], rate)
			cpus[leaf.name] = append(cpus[leaf.name], cpu)
			if leaf.name == "group-wildcard" && len(rates["group-one-topic"]) > 0 && len(rates["plain-wildcard"]) > 0 {
				med := func(xs []float64) float64 {
					xs = slices.Sorted(slices.Values(xs))
					return xs[len(xs)/2]
				}
				b.ReportMetric(rate/med(rates["group-one-topic"]), "group-wild/one")
				b.ReportMetric(rate/med(rates["plain-wildcard"]), "group-wild/plain")
				b.ReportMetric(cpu/med(cpus["group-one-topic"]), "cpu-group-wild/one")
			}
		})
	}
}

// benchReadAll subscribes to pattern with opts and reads count records, each once; a group's
// member acknowledges each and commits at the end.
func benchReadAll(b *testing.B, c *client.Conn, pattern string, opts client.SubscribeOptions, count int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sub, err := c.Subscribe(ctx, pattern, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	seen := make(map[string]bool, count)
	for len(seen) < count {
		rec, err := sub.Next(ctx)
		if err != nil {
			b.Fatalf("%s after %d records: %v", pattern, len(seen), err)
		}
		k := rec.Topic + "@" + strconv.FormatUint(rec.Offset, 10)
		if seen[k] {
			b.Fatalf("%s: %s came twice", pattern, k)
		}
		seen[k] = true
		if opts.Group != "" {
			if err := sub.Ack(rec); err != nil {
				b.Fatal(err)
			}
		}
	}
	if opts.Group != "" {
		if err := sub.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// profileLeaf starts a CPU profile of leaf into $QUICMQ_BENCH_PROFILE_DIR/<leaf>.prof, if set,
// and returns what stops it.
func profileLeaf(b *testing.B, leaf string) (stop func()) {
	dir := os.Getenv("QUICMQ_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, leaf+".prof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// processCPU is the user and system CPU this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
