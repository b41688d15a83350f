package main

// The "quicshare" command: a node's CPU profile split by what it was doing, with quic-go's
// part split by what quic-go was doing (crypto, acks, flow control, UDP send and receive,
// packing, unpacking, the streams' Read/Write), in cpu-µs per record. Issue 29's QUIC share
// of a replicated record is attributed with it (docs/benchmarks.md, scenario 9):
//
//	qmqbench replicated ... --profile DIR
//	qmqbench quicshare --bin QUICMQ --records N DIR/quicmq-r3-c16-r1-n*.pprof
//
// where N is the records of the profiled window (records/s times --duration). It reads
// `go tool pprof -traces`: each sample's stack goes to the first class whose pattern matches
// a frame, so crypto under packing counts as crypto, and quic-go's work on an application
// goroutine (a stream's Read) as that.

import (
	"flag"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// shareClasses are the classes in the order they are tried.
var shareClasses = []struct {
	name string
	re   *regexp.Regexp
}{
	{"quic: crypto (AEAD seal/open, header protection)", regexp.MustCompile(`fips140/aes|xorNonceAEAD|HeaderProtector|updatableAEAD|longHeaderSealer|longHeaderOpener|crypto/internal`)},
	{"quic: acks (sent/received packet history, RTT, congestion)", regexp.MustCompile(`quic-go/internal/ackhandler|quic-go/internal/congestion`)},
	{"quic: flow control", regexp.MustCompile(`[Ff]lowController|flow_controller`)},
	{"quic: UDP send (sendmsg with GSO, send queue)", regexp.MustCompile(`syscall\.sendmsg|sendQueue\)\.Run|WriteMsgUDP|sconn\)\.Write`)},
	{"quic: UDP receive (recvmmsg)", regexp.MustCompile(`oobConn\)\.ReadPacket`)},
	{"quic: packing and stream framing (send)", regexp.MustCompile(`quic-go\.\(\*packetPacker\)|quic-go\.\(\*framer\)|SendStream\)\.(popStream|getData|popNewStream)|sendPacketsWithGSO|appendOneShortHeader`)},
	{"quic: unpacking and frames (receive)", regexp.MustCompile(`quic-go\.\(\*packetUnpacker\)|handleFrames|ParseStreamFrame|frameSorter|handleStreamFrame|quic-go/internal/wire\.`)},
	{"quic: streams' Read/Write (application goroutines)", regexp.MustCompile(`quic-go\.\(\*(Stream|ReceiveStream|SendStream)\)\.(Read|Write|readImpl)`)},
	{"quic: other (run loop, dispatch, timers)", regexp.MustCompile(`quic-go`)},
	{"pebble", regexp.MustCompile(`cockroachdb/pebble`)},
	{"raft, replica, protobuf", regexp.MustCompile(`etcd\.io/raft|quicmq/replica|protobuf`)},
	{"raft streams (federation, wire)", regexp.MustCompile(`quicmq/federation|quicmq/internal/wire`)},
	{"node, wal", regexp.MustCompile(`quicmq/node|quicmq/wal`)},
	{"gc", regexp.MustCompile(`gcBgMarkWorker|runtime\.gcDrain|bgsweep|bgscavenge`)},
	{"other", regexp.MustCompile(`.`)},
}

var traceValue = regexp.MustCompile(`^\s*([\d.]+)(ns|us|µs|ms|s)\s+(.*)$`)

// shareOf sums a `go tool pprof -traces` listing by class, in microseconds.
func shareOf(traces string) map[string]float64 {
	sum := map[string]float64{}
	for _, block := range strings.Split(traces, "-----------+-------------------------------------------------------")[1:] {
		lines := strings.Split(strings.Trim(block, "\n"), "\n")
		for i, l := range lines {
			m := traceValue.FindStringSubmatch(l)
			if m == nil {
				continue // a label line (pebble's) comes before the value
			}
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				break
			}
			d, _ := time.ParseDuration("1" + strings.Replace(m[2], "µs", "us", 1))
			stack := m[3] + " " + strings.Join(lines[i+1:], " ")
			for _, c := range shareClasses {
				if c.re.MatchString(stack) {
					sum[c.name] += v * float64(d) / float64(time.Microsecond)
					break
				}
			}
			break
		}
	}
	return sum
}

func runQUICShare(args []string) error {
	fs := flag.NewFlagSet("quicshare", flag.ExitOnError)
	bin := fs.String("bin", "", "the quicmq binary the profiles are of")
	records := fs.Float64("records", 0, "records of the profiled window (records/s times the window)")
	fs.Parse(args)
	if *bin == "" || *records <= 0 || fs.NArg() == 0 {
		return fmt.Errorf("want --bin QUICMQ --records N PROFILE...")
	}
	for _, prof := range fs.Args() {
		out, err := exec.Command("go", "tool", "pprof", "-traces", *bin, prof).Output()
		if err != nil {
			return fmt.Errorf("go tool pprof -traces %s: %w", prof, err)
		}
		sum := shareOf(string(out))
		var total, quic float64
		for name, v := range sum {
			total += v
			if strings.HasPrefix(name, "quic:") {
				quic += v
			}
		}
		fmt.Printf("%s: %.2f cpu-µs a record, QUIC %.2f\n", prof, total / *records, quic / *records)
		for _, c := range shareClasses {
			if v, ok := sum[c.name]; ok {
				fmt.Printf("  %6.2f  %s\n", v / *records, c.name)
			}
		}
	}
	return nil
}
