package nodeproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The log lines a Process learns from.
var (
	listeningRE = regexp.MustCompile(`msg="node listening".* addr=(\S+)`)
	metricsRE   = regexp.MustCompile(`metrics on (http://[^\s,]+/metrics)`)
	linkUpRE    = regexp.MustCompile(`msg="link (up|reconnected)"`)
	snapshotRE  = regexp.MustCompile(`msg="snapshot installed"`)
)

// tailLines is how many of its last log lines a Process keeps for failure messages.
const tailLines = 40

// keptMax bounds the lines kept for each of Options.Keep.
const keptMax = 100_000

// Options are how a process is started; the zero value runs the binary directly and waits
// 60 s for it to listen.
type Options struct {
	// Command makes the process's command from the binary and its arguments; nil is
	// exec.Command. The network campaigns pass their namespace's.
	Command func(bin string, args ...string) *exec.Cmd
	// Keep are patterns of log lines to keep every one of (up to 100,000 each), read with
	// Kept: the campaigns judge moves and promotions from what the nodes logged.
	Keep []*regexp.Regexp
	// StartTimeout bounds the wait for "node listening" (default 60 s: a node opening a
	// large data directory takes a while).
	StartTimeout time.Duration
	// Env, when set, is the process's environment instead of this process's.
	Env []string
}

// Process is a `quicmq node` child process.
type Process struct {
	Name string
	// Addr is its QUIC listener; Metrics its metrics URL (http://HOST:PORT/metrics) when
	// it was started with --metrics.
	Addr, Metrics string
	// Begin is when it was executed, Listen how long it took from there to listen.
	Begin  time.Time
	Listen time.Duration

	cmd    *exec.Cmd
	exited chan struct{}
	linkUp chan time.Duration
	snaps  atomic.Int64

	mu   sync.Mutex // guards tail and kept: the log reader writes them
	tail []string
	kept map[*regexp.Regexp][]string
}

// Start runs `bin node ARGS...` as the node named name (the name is for messages: pass
// --name among args) and waits until it listens. t.Cleanup kills it.
func Start(t testing.TB, bin, name string, args ...string) *Process {
	t.Helper()
	return Options{}.Start(t, bin, name, args...)
}

// Start is Start with these options.
func (o Options) Start(t testing.TB, bin, name string, args ...string) *Process {
	t.Helper()
	command := o.Command
	if command == nil {
		command = exec.Command
	}
	cmd := command(bin, append([]string{"node"}, args...)...)
	if o.Env != nil {
		cmd.Env = o.Env
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Name: name, cmd: cmd, Begin: time.Now(), exited: make(chan struct{}),
		linkUp: make(chan time.Duration, 64), kept: map[*regexp.Regexp][]string{}}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	listening := make(chan [2]string, 1)
	go p.readLog(stderr, o.Keep, listening)
	timeout := o.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	select {
	case addrs := <-listening:
		p.Addr, p.Metrics, p.Listen = addrs[0], addrs[1], time.Since(p.Begin)
	case <-p.exited:
		t.Fatalf("%s exited before listening: %v\n%s", name, cmd.ProcessState, p.Tail())
	case <-time.After(timeout):
		p.Kill()
		t.Fatalf("%s did not listen within %v\n%s", name, timeout, p.Tail())
	}
	t.Cleanup(p.Kill)
	return p
}

// readLog reads the process's log until it ends, then reaps the process. It is the only
// writer of what the log says. It sends the listener's and the metrics' addresses once the
// node listens (the metrics line comes first).
func (p *Process) readLog(stderr io.Reader, keep []*regexp.Regexp, listening chan<- [2]string) {
	var metrics string
	var logFile io.Writer = io.Discard
	if dir := os.Getenv("QUICMQ_NODE_LOGS"); dir != "" {
		if f, err := os.OpenFile(filepath.Join(dir, p.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			defer f.Close()
			logFile = f
		}
	}
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logFile, line)
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > tailLines {
			p.tail = p.tail[1:]
		}
		for _, re := range keep {
			if len(p.kept[re]) < keptMax && re.MatchString(line) {
				p.kept[re] = append(p.kept[re], line)
			}
		}
		p.mu.Unlock()
		if m := metricsRE.FindStringSubmatch(line); m != nil && metrics == "" {
			metrics = m[1]
		}
		if m := listeningRE.FindStringSubmatch(line); m != nil {
			select {
			case listening <- [2]string{m[1], metrics}:
			default:
			}
		}
		if snapshotRE.MatchString(line) {
			p.snaps.Add(1)
		}
		if linkUpRE.MatchString(line) {
			select {
			case p.linkUp <- time.Since(p.Begin):
			default: // nobody counts this many; a full buffer drops the excess
			}
		}
	}
	io.Copy(io.Discard, stderr) // a line too long for the scanner: drain, so the node never blocks
	p.cmd.Wait()
	close(p.exited)
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// State is how the process exited; nil while it runs.
func (p *Process) State() *os.ProcessState {
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Kill kills the process with SIGKILL (a crash: nothing flushed, nothing said to peers)
// and waits until it has exited. Killing an exited process is fine.
func (p *Process) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Stop asks the process to stop with SIGTERM (a graceful stop) and waits up to grace for
// it; then it kills it. It reports whether the process stopped by itself.
func (p *Process) Stop(grace time.Duration) bool {
	return signalThenKill(p.cmd.Process, syscall.SIGTERM, p.exited, grace)
}

// signalThenKill sends proc sig and waits up to grace for exited to close; then it kills
// proc (SIGKILL) and waits for exited. It reports whether proc exited by itself.
func signalThenKill(proc *os.Process, sig os.Signal, exited <-chan struct{}, grace time.Duration) bool {
	proc.Signal(sig)
	select {
	case <-exited:
		return true
	case <-time.After(grace):
		proc.Signal(syscall.SIGKILL)
		<-exited
		return false
	}
}

// Signal sends sig: SIGSTOP pauses the process, SIGCONT resumes it.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// LinkUp yields, for each "link up" or "link reconnected" line, how long after Begin it
// came. Each line is received once, by whichever receiver takes it.
func (p *Process) LinkUp() <-chan time.Duration { return p.linkUp }

// WaitLinks waits until n more links have come up, for at most d.
func (p *Process) WaitLinks(n int, d time.Duration) error {
	deadline := time.After(d)
	for i := range n {
		select {
		case <-p.linkUp:
		case <-deadline:
			return fmt.Errorf("%s: %d of %d links up within %v\n%s", p.Name, i, n, d, p.Tail())
		}
	}
	return nil
}

// Snapshots is how many raft snapshots the node has installed.
func (p *Process) Snapshots() int64 { return p.snaps.Load() }

// Kept is every log line so far that matched re, one of Options.Keep.
func (p *Process) Kept(re *regexp.Regexp) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.kept[re]...)
}

// Tail is the process's last log lines, for a failure message.
func (p *Process) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// CPU is the CPU time the process has used so far (user and system).
func (p *Process) CPU() (time.Duration, error) { return CPU(p.Pid()) }

// RSS is the process's resident memory in bytes.
func (p *Process) RSS() (uint64, error) {
	m, err := Memory(p.Pid())
	return m.RSS, err
}

// CPU is process pid's CPU time so far: utime and stime of /proc/PID/stat.
func CPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

// Sched is what the scheduler says of process pid's threads now (/proc/PID/task/*/schedstat,
// summed): the time they ran and the time they were runnable but waited for a CPU. On a
// shared machine the second tells a process held up by its own work (a lock, the disk, a
// peer) from one waiting for a core: a node that uses a fifth of a core while its threads
// wait seconds a second is short of CPU, not of work. Threads that exited are not counted.
func Sched(pid int) (ran, waited time.Duration, err error) {
	paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(paths) == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/task: no schedstat (%v)", pid, err)
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(raw))
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("%s: %d fields", p, len(f))
		}
		r, err1 := strconv.ParseUint(f[0], 10, 64)
		w, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("%s: %q", p, raw)
		}
		ran += time.Duration(r)
		waited += time.Duration(w)
	}
	return ran, waited, nil
}

// Mem is a process's memory from /proc/PID/status, in bytes.
type Mem struct {
	RSS uint64 // VmRSS: resident now
	HWM uint64 // VmHWM: the most it has been resident
}

// Memory reads process pid's memory.
func Memory(pid int) (Mem, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Mem{}, err
	}
	var m Mem
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			m.RSS = kb << 10
		case "VmHWM:":
			m.HWM = kb << 10
		}
	}
	if m.RSS == 0 {
		return Mem{}, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}
