package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// builds are this command built once per set of build tags per test process.
var builds struct {
	sync.Mutex
	by map[string]*build
}

type build struct {
	once sync.Once
	dir  string // removed by TestMain when the tests are over
	bin  string
	err  error
}

// The longest tests here run node processes and spend most of their time waiting on them
// (starts, kills, gossip's failure detection, campaigns' fault windows and settles), so they
// call t.Parallel(): go test runs them after the serial tests, -parallel (GOMAXPROCS) at a
// time. Each has its own ports (nodeproc.FreeAddr hands a port out once per test process)
// and t.TempDir(), sets no environment and shares nothing but the builds below; a test that
// does any of that (t.Setenv, a fixed port, a package variable it writes), or bounds how long
// a failover may take (TestCampaignFailoverDefaults), stays serial.
func TestMain(m *testing.M) {
	code := m.Run()
	removeBuilds()
	os.Exit(code)
}

// removeBuilds deletes every binary quicmqBinaryTags built (39 MB each), which would
// otherwise stay in the system's temporary directory after every run of this package.
func removeBuilds() {
	builds.Lock()
	defer builds.Unlock()
	for _, b := range builds.by {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	}
}

// testVersion is the version quicmqBinary stamps into the binary it builds.
const testVersion = "v0.0.0-clitest"

// testCommit is the -X commit quicmqBinary stamps: printed unless go build recorded one.
const testCommit = "0123456789abcdef0123"

// quicmqBinary builds this command once per test process, so tests can run real node
// processes and kill them.
func quicmqBinary(t *testing.T) string {
	t.Helper()
	return quicmqBinaryTags(t, "")
}

// quicmqBinaryTags is quicmqBinary built with -tags tags (a deliberately broken build, for a
// campaign that must catch it), once per tags.
func quicmqBinaryTags(t *testing.T, tags string) string {
	t.Helper()
	builds.Lock()
	if builds.by == nil {
		builds.by = map[string]*build{}
	}
	b := builds.by[tags]
	if b == nil {
		b = &build{}
		builds.by[tags] = b
	}
	builds.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "quicmq-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.dir, b.bin = dir, filepath.Join(dir, "quicmq")
		args := []string{"build", "-buildvcs=auto", "-ldflags", "-X main.version=" + testVersion + " -X main.commit=" + testCommit}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		if out, err := exec.Command("go", append(args, "-o", b.bin, ".")...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// startNodeProcess starts `quicmq node` alone on data (internal/nodeproc), as node "crash"
// of region "test" with anonymous clients on a free loopback port.
func startNodeProcess(t *testing.T, bin, data string) *nodeproc.Process {
	t.Helper()
	o := nodeproc.Options{StartTimeout: 30 * time.Second}
	return o.Start(t, bin, "crash", "--anonymous", "--data", data, "--listen", "127.0.0.1:0", "--name", "crash", "--region", "test")
}

// Real node processes, killed with SIGKILL in the middle of pipelined publishing, 20 times:
// every record whose ack reached the publisher is read back after the restart at the same
// offset with the same payload; no payload appears twice and offsets are dense (I2).
func TestKill9LosesNoAckedRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills 20 node processes")
	}
	t.Parallel()
	bin := quicmqBinary(t)
	data := t.TempDir()
	rng := testlog.Rand(t, "the kill times")
	const cycles = 20
	acked := map[uint64]string{} // offset -> payload, across all cycles
	var startTimes []time.Duration
	totalAcked := 0

	for cycle := 0; cycle < cycles; cycle++ {
		p := startNodeProcess(t, bin, data)
		startTimes = append(startTimes, p.Listen)
		conn := dial(t, p.Addr, data)

		verifyLog(t, conn, acked, cycle)

		// Publish pipelined until the kill; collect acks in order.
		ctx, cancel := context.WithCancel(context.Background())
		type pending struct {
			f       *client.Future
			payload string
		}
		futures := make(chan pending, 4096)
		go func() {
			defer close(futures)
			for i := 0; ctx.Err() == nil; i++ {
				payload := fmt.Sprintf("c%d-%d", cycle, i)
				f, err := conn.PublishAsync(ctx, client.Message{Topic: "crash.test", Payload: []byte(payload)})
				if err != nil {
					return
				}
				futures <- pending{f, payload}
			}
		}()
		killAt := time.Duration(150+rng.IntN(350)) * time.Millisecond
		killed := make(chan struct{})
		go func() {
			testlog.Pause(context.Background(), killAt) // the seeded kill schedule
			p.Kill()
			// A killed peer sends nothing: QUIC would notice only at the idle timeout. The
			// publisher gives up at once instead; acks not read by now were never received.
			conn.Close()
			close(killed)
		}()
		n := 0
		for p := range futures {
			ack, err := p.f.Wait(context.Background())
			if err != nil {
				cancel()
				continue
			}
			want := p.payload
			n++
			if old, dup := acked[ack.Offset]; dup {
				t.Fatalf("cycle %d: offset %d acked twice (%q, then %q)", cycle, ack.Offset, old, want)
			}
			acked[ack.Offset] = want
		}
		cancel()
		<-killed
		conn.Close()
		totalAcked += n
		t.Logf("cycle %d: killed after %v with %d acks this cycle (start took %v)", cycle, killAt, n, p.Listen.Round(time.Millisecond))
	}

	p := startNodeProcess(t, bin, data)
	conn := dial(t, p.Addr, data)
	verifyLog(t, conn, acked, cycles)
	slices.Sort(startTimes)
	t.Logf("%d cycles, %d acked records, all present at their offsets; restart to listening p50 %v max %v",
		cycles, totalAcked, startTimes[len(startTimes)/2].Round(time.Millisecond), startTimes[len(startTimes)-1].Round(time.Millisecond))
}

func dial(t *testing.T, addr, data string) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, client.Options{CAFile: filepath.Join(data, "tls", "ca.pem")}, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// verifyLog reads the whole topic and checks it against what was acknowledged.
func verifyLog(t *testing.T, conn *client.Conn, acked map[uint64]string, cycle int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics, err := conn.Topics(ctx, "crash.test")
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) == 0 {
		if len(acked) > 0 {
			t.Fatalf("before cycle %d: topic gone, %d records were acked", cycle, len(acked))
		}
		return
	}
	next := topics[0].Next
	sub, err := conn.Subscribe(ctx, "crash.test", client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	seen := make(map[string]uint64, next)
	for off := uint64(0); off < next; off++ {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("before cycle %d: reading offset %d of %d: %v", cycle, off, next, err)
		}
		if rec.Offset != off {
			t.Fatalf("before cycle %d: got offset %d, want %d: the log has a gap", cycle, rec.Offset, off)
		}
		p := string(rec.Payload)
		if prev, dup := seen[p]; dup {
			t.Fatalf("before cycle %d: payload %q at offsets %d and %d", cycle, p, prev, off)
		}
		seen[p] = off
		if want, ok := acked[off]; ok && want != p {
			t.Fatalf("before cycle %d: offset %d holds %q, acked as %q", cycle, off, p, want)
		}
	}
	for off, p := range acked {
		if off >= next {
			t.Fatalf("before cycle %d: acked offset %d (%q) is past the recovered end %d", cycle, off, p, next)
		}
	}
}
