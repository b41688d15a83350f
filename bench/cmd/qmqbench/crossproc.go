package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// The child processes of scenario 6 (cross.go), nodes and clients in network namespaces:
// started with their output watched for the lines a run waits on, and stopped. buildQuicmq
// serves the replicated scenario too.

// buildQuicmq builds ./cmd/quicmq of the main module in dir into a temporary directory.
func buildQuicmq(dir string) (string, func(), error) {
	if _, err := os.Stat(filepath.Join(dir, "cmd", "quicmq")); err != nil {
		return "", nil, fmt.Errorf("no %s/cmd/quicmq: run from the repository root or pass --quicmq", dir)
	}
	tmp, err := os.MkdirTemp("", "qmqbench-quicmq-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(tmp, "quicmq")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/quicmq")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return "", nil, fmt.Errorf("go build ./cmd/quicmq: %w\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(tmp) }, nil
}

func killCrossProcs() {
	crossProcs.Lock()
	defer crossProcs.Unlock()
	for c := range crossProcs.m {
		if c.Process != nil {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
}

// proc is a child process in a namespace: its stdout lines arrive on lines, its stderr is
// scanned for patterns (and kept, the last 30 lines, for errors) by one goroutine each.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{} // closed when the process was reaped

	mu      sync.Mutex
	tail    []string
	matched map[*regexp.Regexp][]string
	wg      sync.WaitGroup // the output readers
}

func startProc(ns *lossy.Namespace, name, bin string, watch []*regexp.Regexp, args ...string) (*proc, error) {
	cmd := ns.Command(context.Background(), bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan struct{}),
		matched: make(map[*regexp.Regexp][]string)}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	crossProcs.Lock()
	if crossProcs.m == nil {
		crossProcs.m = make(map[*exec.Cmd]struct{})
	}
	crossProcs.m[cmd] = struct{}{}
	crossProcs.Unlock()
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 256<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() {
		defer p.wg.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 30 {
				p.tail = p.tail[1:]
			}
			for _, re := range watch {
				if m := re.FindStringSubmatch(line); m != nil {
					p.matched[re] = m
				}
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		p.wg.Wait()
		cmd.Wait()
		crossProcs.Lock()
		delete(crossProcs.m, cmd)
		crossProcs.Unlock()
		close(p.done)
	}()
	return p, nil
}

// waitMatch waits until a stderr line matched re, and returns its submatches.
func (p *proc) waitMatch(re *regexp.Regexp, d time.Duration) ([]string, error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		m := p.matched[re]
		p.mu.Unlock()
		if m != nil {
			return m, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before %q:\n%s", p.name, re, p.tailText())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("%s: no %q within %v:\n%s", p.name, re, d, p.tailText())
}

// line waits for the next stdout line.
func (p *proc) line(d time.Duration) (string, error) {
	select {
	case l, ok := <-p.lines:
		if ok {
			return l, nil
		}
		<-p.done
		return "", fmt.Errorf("%s ended (%v):\n%s", p.name, p.cmd.ProcessState, p.tailText())
	case <-time.After(d):
		return "", fmt.Errorf("%s: no answer within %v:\n%s", p.name, d, p.tailText())
	}
}

func (p *proc) tailText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// stop closes stdin (the helpers' signal to end) and kills the process group after grace.
// The nodes get none: their data is thrown away, and a graceful leave takes seconds.
func (p *proc) stop(grace time.Duration) {
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}
