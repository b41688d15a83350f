package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

func TestPubLines(t *testing.T) {
	n := startCLINode(t)
	args := append([]string{"pub", "--topic", "demo.lines"}, n.conn()...)
	code, stdout, stderr := runCLI(t, "alpha\nbeta\n\ngamma delta\r\n", args...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if want := "0\talpha\n1\tbeta\n2\t\n3\tgamma delta\n"; stdout != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}
	// A last line without a newline is published too; offsets continue.
	code, stdout, stderr = runCLI(t, "epsilon", args...)
	if code != 0 || stdout != "4\tepsilon\n" {
		t.Fatalf("exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "", args...)
	if code != 0 || stdout != "" {
		t.Fatalf("empty input: exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
}

func TestPubFailuresAreReported(t *testing.T) {
	n := startCLINode(t, func(c *node.Config) { c.MaxPayload = 100 })
	big := strings.Repeat("x", 101)
	code, stdout, stderr := runCLI(t, "ok1\n"+big+"\nok2\n", append([]string{"pub", "--topic", "demo.fail"}, n.conn()...)...)
	if code != 1 || stdout != "0\tok1\n1\tok2\n" {
		t.Fatalf("exit %d (want 1), stdout %q:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "line 2 not published") || !strings.Contains(stderr, "too large") ||
		!strings.Contains(stderr, "1 of 3 records failed") {
		t.Fatalf("stderr does not say which line failed and why:\n%s", stderr)
	}
	// A topic the grammar refuses is a usage error, told before connecting or reading a line.
	code, stdout, stderr = runCLI(t, "a\nb\n", append([]string{"pub", "--topic", "bad..topic"}, n.conn()...)...)
	if code != 2 || stdout != "" || !strings.Contains(stderr, `--topic: invalid topic "bad..topic": empty token at byte 4`) {
		t.Fatalf("invalid topic: exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
}

func TestPubGenerate(t *testing.T) {
	n := startCLINode(t)
	code, stdout, stderr := runCLI(t, "", append([]string{"pub", "--topic", "demo.gen", "--count", "200", "--size", "16", "--print"}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 200 || lines[0] != "0" || lines[199] != "199" {
		t.Fatalf("printed %d offsets: %q ... ", len(lines), lines[:min(3, len(lines))])
	}
	if !strings.Contains(stderr, "200 records of 16 bytes acked in") || !strings.Contains(stderr, "latency p50") {
		t.Fatalf("no summary:\n%s", stderr)
	}

	// Paced: 30 records at 25/s take over a second, so a progress line appears; no offsets
	// are printed without --print.
	start := time.Now()
	code, stdout, stderr = runCLI(t, "", append([]string{"pub", "--topic", "demo.gen", "--count", "30", "--rate", "25"}, n.conn()...)...)
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
	if el := time.Since(start); el < 1100*time.Millisecond {
		t.Fatalf("30 records at 25/s took %v", el)
	}
	if !strings.Contains(stderr, "rec/s, acked ") || !strings.Contains(stderr, "/30, latency p50 ") {
		t.Fatalf("no progress line:\n%s", stderr)
	}
	code, stdout, stderr = runCLI(t, "", append([]string{"topics", "--pattern", "demo.gen"}, n.conn()...)...)
	if code != 0 || !strings.Contains(stdout, "demo.gen  0      230") {
		t.Fatalf("topics after generate: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

func TestLatencyHist(t *testing.T) {
	var h latencyHist
	if h.quantile(0.5) != 0 {
		t.Fatal("empty histogram")
	}
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * 10 * time.Microsecond) // 10 µs .. 10 ms
	}
	for q, want := range map[float64]time.Duration{0.5: 5 * time.Millisecond, 0.99: 9900 * time.Microsecond} {
		got := h.quantile(q)
		if diff := float64(got-want) / float64(want); diff < -0.07 || diff > 0.07 {
			t.Errorf("p%v = %v, want %v within 7%%", q*100, got, want)
		}
	}
	if h.max != 10*time.Millisecond || h.quantile(1) > h.max {
		t.Errorf("max %v, p100 %v", h.max, h.quantile(1))
	}
	h.add(time.Hour) // beyond the last bucket: counted, capped
	if h.quantile(1) != time.Hour {
		t.Errorf("p100 after an hour-long sample: %v", h.quantile(1))
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestPubReconnect: pub --reconnect goes on across a restart of its node: every generated
// record is acknowledged and stored exactly once, and the resent ones the node had stored
// are counted on standard error.
func TestPubReconnect(t *testing.T) {
	data := t.TempDir()
	n, stop := nodetest.Start(t, func(c *node.Config) { c.DataDir = data })
	cn := &cliNode{addr: n.Addr().String(), ca: n.CAFile()}
	type result struct {
		code           int
		stdout, stderr string
	}
	const count = 3000
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	exited := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		exited <- runMain(ctx, &env{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr},
			append([]string{"pub", "--topic", "rc.p", "--count", fmt.Sprint(count),
				"--size", "8", "--rate", "3000", "--print", "--reconnect"}, cn.conn()...))
	}()
	testlog.WaitFor(t, 20*time.Second, "pub to have 900 records acknowledged", func() bool {
		return strings.Count(stdout.String(), "\n") >= 900
	})
	stop()
	n2, _ := nodetest.Start(t, func(c *node.Config) { c.DataDir, c.Listen = data, cn.addr })
	r := result{<-exited, stdout.String(), stderr.String()}
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	for i, l := range lines {
		if l != fmt.Sprint(i) {
			t.Fatalf("offset line %d is %q: a record was lost, stored twice or reordered\n%s", i, l, r.stderr)
		}
	}
	if len(lines) != count {
		t.Fatalf("%d offsets printed, want %d", len(lines), count)
	}
	if first, next, _ := n2.Log().Bounds("rc.p"); first != 0 || next != count {
		t.Fatalf("the log holds offsets [%d, %d), want [0, %d)", first, next, count)
	}
	verb := map[bool]string{true: "was", false: "were"}
	if d := n2.Log().Stats().Duplicates; d > 0 && !strings.Contains(r.stderr, fmt.Sprintf("quicmq pub: %s %s already stored", plural(int(d), "record"), verb[d == 1])) {
		t.Fatalf("%d duplicates, not reported:\n%s", d, r.stderr)
	}
	t.Logf("stderr:\n%s", r.stderr)
}
