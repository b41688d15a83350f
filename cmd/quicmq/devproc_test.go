package main

import (
	"bufio"
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

	"github.com/quicmq/quicmq/internal/testlog"
)

// runBinary runs the binary with args and returns its standard output.
func runBinary(bin string, args ...string) (string, error) {
	out, err := osexec.Command(bin, args...).Output()
	return string(out), err
}

// devProcess is `quicmq dev` as a real process, started the way a user starts it.
type devProcess struct {
	cmd    *osexec.Cmd
	banner string      // standard output up to "Press Ctrl-C to stop."
	stderr *syncBuffer // all of standard error
	exited chan error
}

func startDevProcess(t *testing.T, args ...string) *devProcess {
	t.Helper()
	bin := quicmqBinary(t)
	d := &devProcess{stderr: &syncBuffer{}, exited: make(chan error, 1)}
	d.cmd = osexec.Command(bin, append([]string{"dev"}, args...)...)
	d.cmd.Dir = t.TempDir()
	d.cmd.Stderr = d.stderr
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() { // owned: ends at the process's end of output
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var b strings.Builder
	timeout := time.After(60 * time.Second)
	for !strings.Contains(b.String(), "Press Ctrl-C to stop.") {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("dev ended before its banner:\n%s\n%s", b.String(), d.stderr.String())
			}
			b.WriteString(l + "\n")
		case <-timeout:
			d.cmd.Process.Kill()
			t.Fatalf("no banner within 60 s:\n%s\n%s", b.String(), d.stderr.String())
		}
	}
	d.banner = b.String()
	go func() {
		for range lines { // drain what dev prints later
		}
		d.exited <- d.cmd.Wait()
	}()
	t.Cleanup(func() {
		d.cmd.Process.Signal(os.Interrupt)
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
			d.cmd.Process.Kill()
		}
	})
	return d
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
			d := startDevProcess(t, append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--regions", "eu,us"}, c.args...)...)
			exports, cmds := bannerCommands(d.banner)
			if len(exports) != 2 || len(cmds) != 5 {
				t.Fatalf("want 2 export lines and 5 commands in:\n%s", d.banner)
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
			sub := osexec.Command("sh", "-c", "exec "+cmds[0])
			sub.Env = cleanEnv()
			subOut := &syncBuffer{}
			sub.Stdout, sub.Stderr = subOut, subOut
			if err := sub.Start(); err != nil {
				t.Fatal(err)
			}
			subDone := make(chan error, 1)
			go func() { subDone <- sub.Wait() }()
			for _, cmd := range cmds[1:] {
				if out, err := shell(t, ctx, cmd); err != nil {
					t.Errorf("%s: %v\n%s", cmd, err, out)
				}
			}
			t.Cleanup(func() { sub.Process.Kill() })
			testlog.WaitForErr(t, 30*time.Second, cmds[0]+" to print the record", func() error {
				if strings.Contains(subOut.String(), "\tdemo.hello\thello\n") {
					return nil
				}
				return fmt.Errorf("its output:\n%s\ndev:\n%s", subOut.String(), d.stderr.String())
			})
			sub.Process.Signal(os.Interrupt)
			if err := <-subDone; err != nil {
				t.Errorf("%s: interrupted: %v\n%s", cmds[0], err, subOut.String())
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
	d := startDevProcess(t, "--listen", "127.0.0.1:0", "--metrics", "", "--log-level", "info")
	_, cmds := bannerCommands(d.banner)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A subscription in the last region and a record from the first: the links carry it.
	sub := osexec.CommandContext(ctx, "sh", "-c", "exec "+cmds[0]+" --count 1")
	sub.Env = cleanEnv()
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := shell(t, ctx, cmds[1]); err != nil {
		t.Fatalf("%s: %v\n%s", cmds[1], err, out)
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("%s: %v", cmds[0], err)
	}
	t.Logf("the record crossed regions")
	before := len(d.stderr.String())
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-d.exited:
	case <-time.After(10 * time.Second):
		d.cmd.Process.Kill()
		t.Fatalf("dev still running 10 s after SIGINT:\n%s", d.stderr.String()[before:])
	}
	took := time.Since(start)
	after := d.stderr.String()[before:]
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
	d := startDevProcess(t)
	ca := regexp.MustCompile(`CA\s+(\S+)`).FindStringSubmatch(d.banner)[1]
	xxxx := regexp.MustCompile(`quicmq-dev-([^/]+)/ca`).FindStringSubmatch(ca)[1]
	bin := quicmqBinary(t)
	fill := func(l string) string {
		return strings.ReplaceAll(strings.ReplaceAll(l, "quicmq-dev-XXXX", "quicmq-dev-"+xxxx), "go run ./cmd/quicmq", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The export line is one dev prints (but for the comment's spacing) and works.
	export := fill(lines[0])
	if !strings.Contains(d.banner, strings.SplitN(export, "   #", 2)[0]) {
		t.Errorf("dev does not print %q:\n%s", export, d.banner)
	}
	if out, err := shell(t, ctx, export+"; "+bin+" topics"); err != nil {
		t.Errorf("%s: %v\n%s", export, err, out)
	}
	sub := osexec.CommandContext(ctx, "sh", "-c", "exec "+fill(lines[1])+" --count 1")
	sub.Env = cleanEnv()
	subOut := &syncBuffer{}
	sub.Stdout, sub.Stderr = subOut, subOut
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines[2:] {
		if out, err := shell(t, ctx, fill(l)); err != nil {
			t.Errorf("%s: %v\n%s", l, err, out)
		}
	}
	if err := sub.Wait(); err != nil || !strings.Contains(subOut.String(), "\tdemo.hello\thello\n") {
		t.Errorf("%s: %v\n%s", lines[1], err, subOut.String())
	}
}
