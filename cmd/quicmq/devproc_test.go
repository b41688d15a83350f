package main

import (
	"context"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// runBinary runs the binary with args and returns its standard output.
func runBinary(bin string, args ...string) (string, error) {
	out, err := osexec.Command(bin, args...).Output()
	return string(out), err
}

// startDevProcess starts `quicmq dev ARGS...` as a real process, the way a user starts it,
// from a directory of its own, and returns it with its banner: its standard output up to
// "Press Ctrl-C to stop.". The test's cleanup interrupts it.
func startDevProcess(t *testing.T, args ...string) (dev *nodeproc.Child, banner string) {
	t.Helper()
	cmd := osexec.Command(quicmqBinary(t), append([]string{"dev"}, args...)...)
	cmd.Dir = t.TempDir()
	dev = nodeproc.StartChild(t, "quicmq dev", cmd)
	return dev, dev.WaitOutput(t, "Press Ctrl-C to stop.", 60*time.Second)
}

// bannerCommands returns the export lines and the suggested commands of the banner.
func bannerCommands(banner string) (exports, commands []string) {
	section := ""
	for _, l := range strings.Split(banner, "\n") {
		switch {
		case strings.HasPrefix(l, "Client settings"):
			section = "env"
		case strings.HasPrefix(l, "Try,"):
			section = "try"
		case strings.TrimSpace(l) == "":
			section = ""
		case section == "env":
			exports = append(exports, strings.TrimSpace(l))
		case section == "try":
			commands = append(commands, strings.TrimSpace(l))
		}
	}
	return exports, commands
}

// startShell starts line in sh (exec'd, so that a signal reaches the command) with the
// test's environment less its client settings, as a user pasting it would.
func startShell(t *testing.T, line string) *nodeproc.Child {
	t.Helper()
	cmd := osexec.Command("sh", "-c", "exec "+line)
	cmd.Env = cleanEnv()
	return nodeproc.StartChild(t, line, cmd)
}

// waitChild waits until c exits and returns how (Err); if ctx ends first it kills c and
// returns ctx's error.
func waitChild(ctx context.Context, c *nodeproc.Child) error {
	select {
	case <-c.Done():
		return c.Err()
	case <-ctx.Done():
		c.Kill()
		return ctx.Err()
	}
}

// shell runs line in sh as a user pasting it would, from a directory of its own.
func shell(t *testing.T, ctx context.Context, line string) (string, error) {
	cmd := osexec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = t.TempDir()
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// cleanEnv is the test's environment without client settings it may have inherited.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUICMQ_") {
			out = append(out, kv)
		}
	}
	return out
}

// Every command the dev banner prints runs as printed, with one node per region, two, and
// a token file: the export lines (each followed by 'topics'), sub (which gets the record
// pub publishes in another region), pub, topics, members and links.
func TestDevBannerCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	tokens := writeTemp(t, "tokens", "dev-token-0123456789abcdef\n")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"nodes1", []string{"--nodes", "1"}},
		{"nodes2", []string{"--nodes", "2"}},
		{"token-file", []string{"--token-file", tokens}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, banner := startDevProcess(t, append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--regions", "eu,us"}, c.args...)...)
			exports, cmds := bannerCommands(banner)
			if len(exports) != 2 || len(cmds) != 5 {
				t.Fatalf("want 2 export lines and 5 commands in:\n%s", banner)
			}
			bin := quicmqBinary(t)
			for _, cmd := range cmds {
				if !strings.HasPrefix(cmd, bin+" ") && !strings.HasPrefix(cmd, "echo hello | "+bin+" ") {
					t.Errorf("%q does not run %s", cmd, bin)
				}
				if c.name == "token-file" && strings.Contains(cmd, "--server") && !strings.Contains(cmd, "--token-file ") {
					t.Errorf("%q lacks the client token", cmd)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, e := range exports {
				if c.name == "token-file" && !strings.Contains(e, "QUICMQ_TOKEN_FILE=") {
					t.Errorf("%q lacks the client token", e)
				}
				if out, err := shell(t, ctx, e+"; "+bin+" topics"); err != nil {
					t.Errorf("%s; quicmq topics: %v\n%s", e, err, out)
				}
			}
			// sub first, in the background: the record published in the other region
			// reaches it once interest has travelled.
			sub := startShell(t, cmds[0])
			for _, cmd := range cmds[1:] {
				if out, err := shell(t, ctx, cmd); err != nil {
					t.Errorf("%s: %v\n%s", cmd, err, out)
				}
			}
			testlog.WaitForErr(t, 30*time.Second, cmds[0]+" to print the record", func() error {
				if strings.Contains(sub.Stdout(), "\tdemo.hello\thello\n") {
					return nil
				}
				return fmt.Errorf("its output:\n%s%s\ndev:\n%s", sub.Stdout(), sub.Stderr(), d.Stderr())
			})
			if !sub.Stop(30*time.Second) || sub.Err() != nil {
				t.Errorf("%s: interrupted: %v\n%s%s", cmds[0], sub.Err(), sub.Stdout(), sub.Stderr())
			}
		})
	}
}

var logLevelRE = regexp.MustCompile(`level=(WARN|ERROR)`)

// 'quicmq dev' stops within 2 s of Ctrl-C, exit 0, and logs no warning or error while it
// stops (a deliberate shutdown is not a failure), even with links carrying records.
func TestDevStopsFastAndQuietly(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	d, banner := startDevProcess(t, "--listen", "127.0.0.1:0", "--metrics", "", "--log-level", "info")
	_, cmds := bannerCommands(banner)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A subscription in the last region and a record from the first: the links carry it.
	sub := startShell(t, cmds[0]+" --count 1")
	if out, err := shell(t, ctx, cmds[1]); err != nil {
		t.Fatalf("%s: %v\n%s", cmds[1], err, out)
	}
	if err := waitChild(ctx, sub); err != nil {
		t.Fatalf("%s: %v\n%s", cmds[0], err, sub.Stderr())
	}
	t.Logf("the record crossed regions")
	before := len(d.Stderr())
	start := time.Now()
	if err := d.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Done():
	case <-time.After(10 * time.Second):
		d.Kill()
		t.Fatalf("dev still running 10 s after SIGINT:\n%s", d.Stderr()[before:])
	}
	took := time.Since(start)
	err := d.Err()
	after := d.Stderr()[before:]
	t.Logf("dev exited %v after SIGINT", took)
	if err != nil {
		t.Errorf("dev exited with %v:\n%s", err, after)
	}
	if took > 2*time.Second {
		t.Errorf("dev took %v to stop, want under 2 s", took)
	}
	for _, l := range strings.Split(after, "\n") {
		if logLevelRE.MatchString(l) {
			t.Errorf("a deliberate shutdown logged: %s", l)
		}
	}
}

// dev --data DIR keeps its data: the banner says so, and a second dev on the same
// directory serves the topics of the first.
func TestDevDataKept(t *testing.T) {
	data := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--metrics", "", "--regions", "eu", "--data", data}
	d := startDev(t, args...)
	if !strings.Contains(d.stdout.String(), "data "+data+" (kept on exit") {
		t.Fatalf("the banner does not say %s is kept:\n%s", data, d.stdout.String())
	}
	if code, _, stderr := runCLI(t, "", "pub", "--server", d.nodes[0].addr, "--ca", d.ca, "--topic", "kept.t", "survives"); code != 0 {
		t.Fatalf("pub: %d %s", code, stderr)
	}
	d.stop()
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("--data %s removed: %v", data, err)
	}
	d2 := startDev(t, args...)
	code, stdout, stderr := runCLI(t, "", "sub", "--server", d2.nodes[0].addr, "--ca", d2.ca, "--topic", "kept.t", "--count", "1")
	if code != 0 || stdout != "0\tkept.t\tsurvives\n" {
		t.Fatalf("after a restart on --data: %d %q %s", code, stdout, stderr)
	}
	d2.stop()

	// Without --data the banner says the temporary directory goes, and it does.
	d3 := startDev(t, "--listen", "127.0.0.1:0", "--metrics", "", "--regions", "eu")
	m := regexp.MustCompile(`data (\S+) \(a new temporary directory, removed on exit`).FindStringSubmatch(d3.stdout.String())
	if m == nil {
		t.Fatalf("the banner does not say the temporary directory is removed:\n%s", d3.stdout.String())
	}
	d3.stop()
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Fatalf("temporary %s left behind: %v", m[1], err)
	}
}

func TestInvocation(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(root+"/cmd/quicmq", 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := func(string) (string, error) { return "/usr/local/bin/quicmq", nil }
	notOnPath := func(string) (string, error) { return "", fmt.Errorf("not found") }
	for _, c := range []struct {
		argv0, wd string
		look      func(string) (string, error)
		want      string
	}{
		{"/tmp/go-build123/b001/exe/quicmq", root, onPath, "go run ./cmd/quicmq"},
		{"/tmp/go-build123/b001/exe/quicmq", "/", onPath, "go run github.com/quicmq/quicmq/cmd/quicmq"},
		{"quicmq", root, onPath, "quicmq"},
		{"quicmq", root, notOnPath, "go run ./cmd/quicmq"},
		{"/opt/quicmq/bin/quicmq", root, onPath, "/opt/quicmq/bin/quicmq"},
		{"/opt/my dir/quicmq", root, onPath, "'/opt/my dir/quicmq'"},
	} {
		if got := invocationOf(c.argv0, c.look, c.wd); got != c.want {
			t.Errorf("invocationOf(%q, %q) = %q, want %q", c.argv0, c.wd, got, c.want)
		}
	}
	// A relative path becomes absolute: the banner's commands work from any directory.
	if got := invocationOf("./bin/quicmq", onPath, root); !strings.HasPrefix(got, "/") || !strings.HasSuffix(got, "/bin/quicmq") {
		t.Errorf("./bin/quicmq: %q", got)
	}
}

// The README's "Using it" commands run as printed against 'quicmq dev' on its default ports,
// with the random part of the CA path filled in and the built binary for 'go run
// ./cmd/quicmq' (the same program). Skipped when the default ports are taken.
func TestReadmeUsingItRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "## Using it\n")
	section, _, _ = strings.Cut(section, "\n## ")
	section, _, _ = strings.Cut(section, "\n### ") // its subsections are not commands against dev
	var lines []string
	for _, l := range strings.Split(section, "\n") {
		if strings.HasPrefix(l, "    ") && strings.TrimSpace(l) != "" {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) < 6 {
		t.Fatalf("want the export line and five commands in README's Using it:\n%s", section)
	}
	for _, p := range []string{"127.0.0.1:7400", "127.0.0.1:7401", "127.0.0.1:7402"} {
		if pc, err := net.ListenPacket("udp", p); err != nil {
			t.Skipf("default port %s is taken: %v", p, err)
		} else {
			pc.Close()
		}
	}
	if ln, err := net.Listen("tcp", "127.0.0.1:9400"); err != nil {
		t.Skipf("default admin port is taken: %v", err)
	} else {
		ln.Close()
	}
	_, banner := startDevProcess(t)
	ca := regexp.MustCompile(`CA\s+(\S+)`).FindStringSubmatch(banner)[1]
	xxxx := regexp.MustCompile(`quicmq-dev-([^/]+)/ca`).FindStringSubmatch(ca)[1]
	bin := quicmqBinary(t)
	fill := func(l string) string {
		return strings.ReplaceAll(strings.ReplaceAll(l, "quicmq-dev-XXXX", "quicmq-dev-"+xxxx), "go run ./cmd/quicmq", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The export line is one dev prints (but for the comment's spacing) and works.
	export := fill(lines[0])
	if !strings.Contains(banner, strings.SplitN(export, "   #", 2)[0]) {
		t.Errorf("dev does not print %q:\n%s", export, banner)
	}
	if out, err := shell(t, ctx, export+"; "+bin+" topics"); err != nil {
		t.Errorf("%s: %v\n%s", export, err, out)
	}
	sub := startShell(t, fill(lines[1])+" --count 1")
	for _, l := range lines[2:] {
		if out, err := shell(t, ctx, fill(l)); err != nil {
			t.Errorf("%s: %v\n%s", l, err, out)
		}
	}
	if err := waitChild(ctx, sub); err != nil || !strings.Contains(sub.Stdout(), "\tdemo.hello\thello\n") {
		t.Errorf("%s: %v\n%s%s", lines[1], err, sub.Stdout(), sub.Stderr())
	}
}
