package main

// Issue 15's publish figure: the node's own process CPU per durable record (clients in the
// worker, another process) beside raw Pebble's CPU per record, measured in the same run by a
// raw synced-batch writer in a process of its own ("rawpebble", a hidden command), as the raw
// leaf of node/bench_test.go does it: writers goroutines, each committing synced batches
// (batch.Commit(pebble.Sync)) of as many records as the node put in each of its commits
// during the node's window (its quicmq_wal_records_per_commit histogram), the log's keys
// and value sizes, a fresh store with the log's Pebble options.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicmq/quicmq/wal"
)

// walValueOverhead is what the log stores beside a payload without headers or producer id
// (as node/bench_test.go's constant of the same name): raw values are this much longer.
const walValueOverhead = 22

// nodeMetricsAddr is where the quicmq broker of a publish run serves its metrics (inside the
// run's own namespace).
const nodeMetricsAddr = "127.0.0.1:7701"

type rawParams struct {
	Writers  int
	Batch    int
	Size     int
	Warmup   time.Duration
	Duration time.Duration
}

type rawResult struct {
	rawParams
	Records int
	Rate    float64 // records/s
	CPUus   float64 // this process's CPU (user + system) per record, µs
	Fsyncs  int64
}

// runRawPebble is the hidden "rawpebble" command: it writes to a fresh store in a temporary
// directory and prints its rawResult as JSON.
func runRawPebble(args []string) error {
	var p rawParams
	fs := flag.NewFlagSet("rawpebble", flag.ExitOnError)
	fs.IntVar(&p.Writers, "writers", 16, "writer goroutines, each committing its own synced batches")
	fs.IntVar(&p.Batch, "batch", 64, "records per synced batch")
	fs.IntVar(&p.Size, "size", 1024, "payload bytes (values are 22 bytes longer, as the log's)")
	fs.DurationVar(&p.Warmup, "warmup", time.Second, "writing before the measured window")
	fs.DurationVar(&p.Duration, "duration", 10*time.Second, "measured window")
	fs.Parse(args)
	if p.Writers < 1 || p.Batch < 1 || p.Size < 0 {
		return fmt.Errorf("rawpebble: --writers %d, --batch %d, --size %d: want positive counts", p.Writers, p.Batch, p.Size)
	}
	dir, err := os.MkdirTemp("", "qmqbench-rawpebble-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := pebble.Open(dir, &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       wal.DefaultMemTableSize,
		CacheSize:          wal.DefaultCacheSize,
		Logger:             quietPebble{},
	})
	if err != nil {
		return fmt.Errorf("rawpebble: open: %w", err)
	}
	defer db.Close()
	value := make([]byte, walValueOverhead+p.Size)
	var next atomic.Int64 // the next offset to claim, a batch at a time
	var counting atomic.Bool
	var counted atomic.Int64
	stop := make(chan struct{})
	var failed atomic.Value
	var wg sync.WaitGroup
	for range p.Writers {
		wg.Go(func() {
			key := make([]byte, 13)
			key[0] = 'm'
			for {
				select {
				case <-stop:
					return
				default:
				}
				first := next.Add(int64(p.Batch)) - int64(p.Batch)
				bt := db.NewBatch()
				for off := first; off < first+int64(p.Batch); off++ {
					binary.BigEndian.PutUint64(key[5:], uint64(off))
					_ = bt.Set(key, value, nil)
				}
				err := bt.Commit(pebble.Sync)
				_ = bt.Close()
				if err != nil {
					failed.Store(err)
					return
				}
				if counting.Load() {
					counted.Add(int64(p.Batch))
				}
			}
		})
	}
	time.Sleep(p.Warmup)
	fsyncs0 := fsyncs(db)
	cpu0, t0 := brokerCPU(os.Getpid()), time.Now()
	counting.Store(true)
	time.Sleep(p.Duration)
	counting.Store(false)
	cpu1, el := brokerCPU(os.Getpid()), time.Since(t0)
	fsyncs1 := fsyncs(db)
	close(stop)
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return fmt.Errorf("rawpebble: commit: %w", err)
	}
	res := rawResult{rawParams: p, Records: int(counted.Load()), Fsyncs: fsyncs1 - fsyncs0}
	res.Rate = float64(res.Records) / el.Seconds()
	if res.Records > 0 {
		res.CPUus = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(res.Records)
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func fsyncs(db *pebble.DB) int64 {
	if h := db.Metrics().LogWriter.FsyncLatency; h != nil {
		var m dto.Metric
		if h.Write(&m) == nil {
			return int64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)           {}
func (quietPebble) Errorf(string, ...any)          {}
func (quietPebble) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

// runRawChild runs the rawpebble command as a child of this process (in its namespace) and
// returns its result.
func runRawChild(p rawParams) (*rawResult, error) {
	cmd := exec.Command("/proc/self/exe", "rawpebble", "--writers", fmt.Sprint(p.Writers), "--batch", fmt.Sprint(p.Batch),
		"--size", fmt.Sprint(p.Size), "--warmup", p.Warmup.String(), "--duration", p.Duration.String())
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("rawpebble: %w", err)
	}
	var res rawResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("rawpebble output: %w", err)
	}
	return &res, nil
}

// commitStats reads the node's records appended and commits so far from its metrics
// (quicmq_wal_records_per_commit: _sum is records, _count commits).
func commitStats(addr string) (records, commits float64, err error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0, fmt.Errorf("node metrics: %w", err)
	}
	defer resp.Body.Close()
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "quicmq_wal_records_per_commit_sum":
			records, err = strconv.ParseFloat(strings.Fields(val)[0], 64)
			found++
		case "quicmq_wal_records_per_commit_count":
			commits, err = strconv.ParseFloat(strings.Fields(val)[0], 64)
			found++
		}
		if err != nil {
			return 0, 0, fmt.Errorf("node metrics: %s: %w", name, err)
		}
	}
	if found != 2 {
		return 0, 0, errors.New("node metrics: no quicmq_wal_records_per_commit histogram")
	}
	return records, commits, sc.Err()
}

// printRawPebble is the table of the node's CPU per durable record against raw Pebble's in
// the same run (medians over repeats, the ratio within each repeat), with the bound that the
// transport sets: (sink + raw) / raw, the least node/raw a broker on quic-go could show.
func printRawPebble(rs []*durResult, pubs []int) {
	var rows []string
	for _, np := range pubs {
		var node, raw, ratio, batch, rawRate, sink, bound []float64
		for _, r := range rs {
			if r.System != "quicmq" || r.Publishers != np || r.RawCPUus <= 0 {
				continue
			}
			node = append(node, r.BrokerCPUus)
			raw = append(raw, r.RawCPUus)
			ratio = append(ratio, r.BrokerCPUus/r.RawCPUus)
			batch = append(batch, r.NodeRecordsPerCommit)
			rawRate = append(rawRate, r.RawRate)
			if r.SinkCPUus > 0 {
				sink = append(sink, r.SinkCPUus)
				bound = append(bound, (r.SinkCPUus+r.RawCPUus)/r.RawCPUus)
			}
		}
		if len(node) > 0 {
			rows = append(rows, fmt.Sprintf("| %d | %v | %v | %v | %v | %v | %v | %v |", np, median(batch), median(node),
				median(rawRate), median(raw), median(ratio), orDash(sink), orDash(bound)))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("| publishers | node records/commit | node process cpu-µs/record | raw pebble records/s | raw pebble cpu-µs/record | node/raw cpu (goal <= 2) | quic sink cpu-µs/record | bound: (sink + raw)/raw |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r)
	}
}

// orDash is the median of vs, or "-" without figures.
func orDash(vs []float64) string {
	if len(vs) == 0 {
		return "-"
	}
	return median(vs).String()
}
