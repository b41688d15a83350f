package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// publishLines publishes lines to topic through the pub command.
func publishLines(t *testing.T, n *cliNode, topic string, lines ...string) {
	t.Helper()
	code, _, stderr := runCLI(t, strings.Join(lines, "\n")+"\n", append([]string{"pub", "--topic", topic}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("pub: exit %d:\n%s", code, stderr)
	}
}

func TestSubCountAndIdle(t *testing.T) {
	n := startCLINode(t)
	publishLines(t, n, "demo.a", "a0", "a1", "a2", "a3")
	publishLines(t, n, "demo.b", "b0")
	publishLines(t, n, "other", "o0")

	code, stdout, stderr := runCLI(t, "", append([]string{"sub", "--topic", "demo.a", "--count", "3"}, n.conn()...)...)
	if code != 0 || stdout != "0\tdemo.a\ta0\n1\tdemo.a\ta1\n2\tdemo.a\ta2\n" {
		t.Fatalf("--count 3: exit %d, stdout %q:\n%s", code, stdout, stderr)
	}

	start := time.Now()
	code, stdout, stderr = runCLI(t, "", append([]string{"sub", "--topic", "demo.>", "--idle", "300ms"}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("--idle: exit %d:\n%s", code, stderr)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("exited after %v, before the idle time", el)
	}
	got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(got) != 5 || !contains(got, "3\tdemo.a\ta3") || !contains(got, "0\tdemo.b\tb0") || contains(got, "0\tother\to0") {
		t.Fatalf("demo.> printed %q", got)
	}
	if !strings.Contains(stderr, "no record for 300ms") {
		t.Fatalf("no idle notice:\n%s", stderr)
	}
}

// TestSubUntilCaughtUp reads a topic to its end with no idle timeout: the node's CAUGHT_UP
// ends the command, after exactly the records stored before it subscribed.
func TestSubUntilCaughtUp(t *testing.T) {
	n := startCLINode(t)
	publishLines(t, n, "cu.a", "r0", "r1", "r2")
	code, stdout, stderr := runCLI(t, "", append([]string{"sub", "--topic", "cu.>", "--until-caught-up"}, n.conn()...)...)
	if code != 0 || stdout != "0\tcu.a\tr0\n1\tcu.a\tr1\n2\tcu.a\tr2\n" {
		t.Fatalf("exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "caught up after 3 records") {
		t.Fatalf("no caught-up notice:\n%s", stderr)
	}
	// An empty topic pattern is caught up at once.
	code, stdout, stderr = runCLI(t, "", append([]string{"sub", "--topic", "nothing.here", "--until-caught-up"}, n.conn()...)...)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "caught up after 0 records") {
		t.Fatalf("empty: exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func TestSubFrom(t *testing.T) {
	n := startCLINode(t)
	publishLines(t, n, "from.t", "r0", "r1", "r2")
	mid := time.Now()
	testlog.WaitFor(t, 5*time.Second, "the clock to move past mid", func() bool { return time.Since(mid) > 20*time.Millisecond })
	publishLines(t, n, "from.t", "r3")
	sub := func(from string) string {
		t.Helper()
		code, stdout, stderr := runCLI(t, "", append([]string{"sub", "--topic", "from.t", "--from", from, "--idle", "200ms"}, n.conn()...)...)
		if code != 0 {
			t.Fatalf("--from %s: exit %d:\n%s", from, code, stderr)
		}
		return stdout
	}
	if got := sub("2"); got != "2\tfrom.t\tr2\n3\tfrom.t\tr3\n" {
		t.Errorf("--from 2: %q", got)
	}
	if got := sub("latest"); got != "" {
		t.Errorf("--from latest: %q", got)
	}
	if got := sub(mid.Format(time.RFC3339Nano)); got != "3\tfrom.t\tr3\n" {
		t.Errorf("--from %s: %q", mid.Format(time.RFC3339Nano), got)
	}
	if got := sub("earliest"); strings.Count(got, "\n") != 4 {
		t.Errorf("--from earliest: %q", got)
	}
}

// sub acks what it printed before it exits: a durable consumer continues where it stopped.
func TestSubDurable(t *testing.T) {
	n := startCLINode(t)
	publishLines(t, n, "dur.t", "d0", "d1", "d2", "d3", "d4")
	args := append([]string{"sub", "--topic", "dur.t", "--durable", "cli", "--count", "2"}, n.conn()...)
	for _, want := range []string{"0\tdur.t\td0\n1\tdur.t\td1\n", "2\tdur.t\td2\n3\tdur.t\td3\n"} {
		code, stdout, stderr := runCLI(t, "", args...)
		if code != 0 || stdout != want {
			t.Fatalf("exit %d, stdout %q, want %q:\n%s", code, stdout, want, stderr)
		}
	}
	code, stdout, stderr := runCLI(t, "", append([]string{"sub", "--topic", "dur.t", "--durable", "cli", "--idle", "200ms"}, n.conn()...)...)
	if code != 0 || stdout != "4\tdur.t\td4\n" {
		t.Fatalf("resume after idle exit: exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
}

func TestSubErrors(t *testing.T) {
	n := startCLINode(t)
	code, _, stderr := runCLI(t, "", append([]string{"sub", "--topic", "bad..pattern"}, n.conn()...)...)
	if code != 2 || !strings.Contains(stderr, `--topic: invalid pattern "bad..pattern"`) {
		t.Fatalf("invalid pattern: exit %d:\n%s", code, stderr)
	}
}

func TestParseStart(t *testing.T) {
	at := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	zone := time.FixedZone("test", 2*3600) // dates without a zone are in now's location
	now := time.Date(2025, 3, 4, 10, 0, 0, 0, zone)
	for in, want := range map[string]client.Start{
		"earliest":                  client.Earliest,
		"latest":                    client.Latest,
		"0":                         client.AtOffset(0),
		"42":                        client.AtOffset(42),
		"2025-01-02T15:04:05Z":      client.AtTime(at),
		"2025-01-02T16:04:05+01:00": client.AtTime(at),
		"5m":                        client.AtTime(now.Add(-5 * time.Minute)),
		"2h30m":                     client.AtTime(now.Add(-150 * time.Minute)),
		"0s":                        client.AtTime(now),
		"2025-01-02":                client.AtTime(time.Date(2025, 1, 2, 0, 0, 0, 0, zone)),
		"2025-01-02T15:04":          client.AtTime(time.Date(2025, 1, 2, 15, 4, 0, 0, zone)),
		"2025-01-02T15:04:05":       client.AtTime(time.Date(2025, 1, 2, 15, 4, 5, 0, zone)),
	} {
		got, err := parseStart(in, now)
		if err != nil || got != want {
			t.Errorf("parseStart(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1", "yesterday", "-5m", "2025-13-02", "2025-01-02T25:00", "1e3", "5 minutes"} {
		if _, err := parseStart(bad, now); err == nil || !strings.Contains(err.Error(), `--from "`+bad+`"`) || !strings.Contains(err.Error(), "5m") {
			t.Errorf("parseStart(%q): %v, want a refusal saying what is accepted", bad, err)
		}
	}
}

// TestSubFormatJSON: --format json prints one object per record with every field; a payload
// that is not UTF-8 comes as payload_base64, so nothing is mangled.
func TestSubFormatJSON(t *testing.T) {
	n := startCLINode(t)
	code, _, stderr := runCLI(t, "hello\tworld\n", append([]string{"pub", "--topic", "fmt.t", "--header", "h1=a=b", "--header", "h2="}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("pub --header: exit %d:\n%s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "x\n", append([]string{"pub", "--topic", "fmt.t", "--header", "novalue"}, n.conn()...)...); code == 0 || !strings.Contains(stderr, "KEY=VALUE") {
		t.Fatalf("pub --header novalue: exit %d:\n%s", code, stderr)
	}
	c, err := client.Dial(context.Background(), client.Options{CAFile: n.ca}, n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Publish(context.Background(), client.Message{Topic: "fmt.t", Payload: []byte{0xff, 0x00, '\n'},
		Headers: []client.Header{{Key: "k", Value: []byte("v")}}}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "", append([]string{"sub", "--topic", "fmt.t", "--count", "2", "--format", "json"}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", stdout)
	}
	var recs [2]jsonRecord
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &recs[i]); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
	}
	if r := recs[0]; r.Topic != "fmt.t" || r.Offset != 0 || r.Payload == nil || *r.Payload != "hello\tworld" || r.Time.IsZero() ||
		len(r.Headers) != 2 || r.Headers["h1"] != "a=b" || r.Headers["h2"] != "" {
		t.Fatalf("first record: %+v", r)
	}
	if r := recs[1]; r.Offset != 1 || r.Payload != nil || !bytes.Equal(r.PayloadBase64, []byte{0xff, 0x00, '\n'}) || r.Headers["k"] != "v" {
		t.Fatalf("second record: %+v", r)
	}
	if code, _, stderr := runCLI(t, "", append([]string{"sub", "--topic", "fmt.t", "--format", "yaml"}, n.conn()...)...); code == 0 || !strings.Contains(stderr, `--format "yaml"`) {
		t.Fatalf("--format yaml: exit %d:\n%s", code, stderr)
	}
}

// TestSubReconnect: sub --reconnect goes on across a restart of its node, printing each
// record once.
func TestSubReconnect(t *testing.T) {
	data := t.TempDir()
	n, stop := nodetest.Start(t, func(c *node.Config) { c.DataDir = data })
	cn := &cliNode{addr: n.Addr().String(), ca: n.CAFile()}
	publishLines(t, cn, "rc.t", "before")
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		done <- runMain(ctx, &env{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr},
			append([]string{"sub", "--topic", "rc.t", "--count", "2", "--reconnect"}, cn.conn()...))
	}()
	testlog.WaitFor(t, 20*time.Second, `sub to print "before"`, func() bool { return strings.Contains(stdout.String(), "before") })
	stop()
	nodetest.Start(t, func(c *node.Config) { c.DataDir, c.Listen = data, cn.addr })
	publishLines(t, cn, "rc.t", "after")
	if code := <-done; code != 0 || stdout.String() != "0\trc.t\tbefore\n1\trc.t\tafter\n" {
		t.Fatalf("exit %d, stdout %q:\n%s", code, stdout.String(), stderr.String())
	}
}

// sub --idle-timeout: a node that goes silent under a subscription (a crash, a cut path) is
// given up after about that long instead of QUIC's default 30 s; with two servers and
// --reconnect the subscription goes on through the other node of the region.
func TestSubIdleTimeoutFailover(t *testing.T) {
	n1, _, n2 := nodetest.StartTwo(t)
	topic := nodetest.OwnedBy("it", "n2", "n1", "n2") // available through n2 alone
	direct := &cliNode{addr: n2.Addr().String(), ca: n1.CAFile()}
	publishLines(t, direct, topic, "before")
	path := nodetest.NewCutter(t, n1.Addr().String())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		done <- runMain(ctx, &env{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr},
			[]string{"sub", "--server", path.Addr() + "," + n2.Addr().String(), "--ca", n1.CAFile(),
				"--topic", topic, "--count", "2", "--reconnect", "--idle-timeout", "1s"})
	}()
	testlog.WaitForErr(t, 20*time.Second, `sub through n1 to print "before"`, func() error {
		if strings.Contains(stdout.String(), "before") {
			return nil
		}
		return fmt.Errorf("stderr: %s", stderr.String())
	})
	path.Cut()
	cut := time.Now()
	publishLines(t, direct, topic, "after")
	code := <-done
	took := time.Since(cut)
	if code != 0 || stdout.String() != "0\t"+topic+"\tbefore\n1\t"+topic+"\tafter\n" {
		t.Fatalf("exit %d, stdout %q:\n%s", code, stdout.String(), stderr.String())
	}
	if took > 10*time.Second {
		t.Fatalf("the cut was noticed after %v, want about 1 s (--idle-timeout 1s)", took)
	}
	t.Logf("the record published after the cut arrived through n2 %v after it", took.Round(time.Millisecond))
}
