package lossy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

var (
	// ErrNotRoot: namespaces and nftables need root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
	ErrNotRoot = errors.New("lossy: needs root to create network namespaces and nftables rules")
	// ErrNoNft: the nft command is missing (Debian: apt-get install -y nftables).
	ErrNoNft = errors.New("lossy: nft not found (Debian/Ubuntu: apt-get install -y nftables)")
	// ErrNoIP: the ip command (iproute2) is missing.
	ErrNoIP = errors.New("lossy: ip (iproute2) not found")
)

// Prefix starts the name of every namespace and interface the harness creates.
const Prefix = "qmqb-"

// Check reports why the harness cannot run on this machine, or nil.
func Check() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return ErrNoIP
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return ErrNoNft
	}
	return nil
}

// registry holds every namespace not yet removed, for CloseAll.
var registry struct {
	sync.Mutex
	live map[*Namespace]struct{}
}

var seq atomic.Int64

// Namespace is a network namespace created by the harness. Its methods are safe for
// concurrent use (each runs a command).
type Namespace struct {
	Name string

	mu     sync.Mutex
	closed bool
}

// New creates a namespace named Prefix+pid+"-"+n+"-"+tag with its loopback up.
func New(tag string) (*Namespace, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s%d-%d-%s", Prefix, os.Getpid(), seq.Add(1), tag)
	if len(name) > 64 {
		name = name[:64]
	}
	if err := run("ip", "netns", "add", name); err != nil {
		return nil, fmt.Errorf("lossy: create namespace %s: %w", name, err)
	}
	ns := &Namespace{Name: name}
	registry.Lock()
	if registry.live == nil {
		registry.live = make(map[*Namespace]struct{})
	}
	registry.live[ns] = struct{}{}
	registry.Unlock()
	if err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
		ns.Close()
		return nil, fmt.Errorf("lossy: %s: loopback up: %w", name, err)
	}
	// One table per namespace; its input chain holds the loss and partition rules.
	if err := ns.nft("add table inet lossy\nadd chain inet lossy in { type filter hook input priority 0; policy accept; }\n"); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// Command returns a command that runs name with args inside the namespace.
func (ns *Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Run runs a command inside the namespace and waits for it.
func (ns *Namespace) Run(name string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// nft runs an nft script inside the namespace.
func (ns *Namespace) nft(script string) error {
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("lossy: %s: nft: %w: %s", ns.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// SetLoss replaces the namespace's random loss with rate (0 to 1, e.g. 0.01 for 1%), applied
// to every packet arriving on any interface of the namespace, on the input hook. Rates are
// rounded to 1/100,000. Zero removes the loss.
func (ns *Namespace) SetLoss(rate float64) error { return ns.SetLossMatch(rate, "") }

// ExceptRelays is a SetLossMatch expression for a namespace with a Relay in it: every UDP
// packet but those the relay sends, so that a relayed datagram meets the loss once per
// direction (on its way into the relay), as on a direct path, instead of twice. Only for a
// relay inside the lossy namespace: a relay elsewhere has its packets cross the loss once
// anyway (and TCP packets do not match it).
var ExceptRelays = fmt.Sprintf("udp sport != %d-%d", RelayPortLow, RelayPortHigh)

// SetLossMatch is SetLoss for the packets that match, an nftables expression such as
// "th sport { 7400, 4222 }" (packets sent from those ports) or "iifname lo"; empty matches
// every packet.
func (ns *Namespace) SetLossMatch(rate float64, match string) error {
	if rate < 0 || rate > 1 {
		return fmt.Errorf("lossy: loss rate %v outside [0, 1]", rate)
	}
	script := "flush chain inet lossy in\n"
	if per := int(rate*100000 + 0.5); per > 0 {
		script += fmt.Sprintf("add rule inet lossy in %s numgen random mod 100000 < %d counter drop\n", match, per)
	}
	// Partitions live in their own chain ("cut") and survive a loss change.
	return ns.nft(script)
}

// Dropped returns how many packets the loss rule dropped so far (0 without a rule).
func (ns *Namespace) Dropped() (int64, error) {
	out, err := exec.Command("ip", "netns", "exec", ns.Name, "nft", "list", "chain", "inet", "lossy", "in").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("lossy: %s: list rules: %w: %s", ns.Name, err, bytes.TrimSpace(out))
	}
	var total int64
	for _, f := range strings.Split(string(out), "\n") {
		i := strings.Index(f, "counter packets ")
		if i < 0 {
			continue
		}
		fs := strings.Fields(f[i+len("counter packets "):])
		if len(fs) > 0 {
			n, _ := strconv.ParseInt(fs[0], 10, 64)
			total += n
		}
	}
	return total, nil
}

// Close removes the namespace and its links; processes still running in it keep running
// (kill them first). Safe to call more than once.
func (ns *Namespace) Close() error {
	ns.mu.Lock()
	if ns.closed {
		ns.mu.Unlock()
		return nil
	}
	ns.closed = true
	ns.mu.Unlock()
	registry.Lock()
	delete(registry.live, ns)
	registry.Unlock()
	// Deleting a namespace deletes its end of a veth pair, which deletes the pair.
	if err := run("ip", "netns", "del", ns.Name); err != nil {
		return fmt.Errorf("lossy: remove namespace %s: %w", ns.Name, err)
	}
	return nil
}

// Link is a veth pair joining two namespaces, with addresses 10.77.N.1/24 in A and
// 10.77.N.2/24 in B.
type Link struct {
	A, B     *Namespace
	AddrA    string
	AddrB    string
	ifA, ifB string
}

var linkSeq atomic.Int64

// Connect joins a and b with a veth pair on a private /24 (10.77.N.0/24, N counting from 1
// in this process).
func Connect(a, b *Namespace) (*Link, error) {
	n := linkSeq.Add(1) % 250
	l := &Link{A: a, B: b,
		AddrA: fmt.Sprintf("10.77.%d.1", n), AddrB: fmt.Sprintf("10.77.%d.2", n),
		ifA: fmt.Sprintf("qa%d-%d", os.Getpid()%100000, n), ifB: fmt.Sprintf("qb%d-%d", os.Getpid()%100000, n),
	}
	steps := [][]string{
		{"ip", "link", "add", l.ifA, "netns", a.Name, "type", "veth", "peer", "name", l.ifB, "netns", b.Name},
		{"ip", "-n", a.Name, "addr", "add", l.AddrA + "/24", "dev", l.ifA},
		{"ip", "-n", b.Name, "addr", "add", l.AddrB + "/24", "dev", l.ifB},
		{"ip", "-n", a.Name, "link", "set", l.ifA, "up"},
		{"ip", "-n", b.Name, "link", "set", l.ifB, "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return nil, fmt.Errorf("lossy: link %s-%s: %w", a.Name, b.Name, err)
		}
	}
	return l, nil
}

// Partition drops every packet arriving from the other end of the link, in both
// namespaces, until Heal.
func (l *Link) Partition() error {
	if err := l.A.nft(fmt.Sprintf("add chain inet lossy cut { type filter hook input priority -10; policy accept; }\nflush chain inet lossy cut\nadd rule inet lossy cut iifname %q drop\n", l.ifA)); err != nil {
		return err
	}
	return l.B.nft(fmt.Sprintf("add chain inet lossy cut { type filter hook input priority -10; policy accept; }\nflush chain inet lossy cut\nadd rule inet lossy cut iifname %q drop\n", l.ifB))
}

// Heal ends a partition.
func (l *Link) Heal() error {
	if err := l.A.nft("add chain inet lossy cut { type filter hook input priority -10; policy accept; }\nflush chain inet lossy cut\n"); err != nil {
		return err
	}
	return l.B.nft("add chain inet lossy cut { type filter hook input priority -10; policy accept; }\nflush chain inet lossy cut\n")
}

// CloseAll removes every namespace this process created and has not removed.
func CloseAll() {
	registry.Lock()
	live := make([]*Namespace, 0, len(registry.live))
	for ns := range registry.live {
		live = append(live, ns)
	}
	registry.Unlock()
	for _, ns := range live {
		ns.Close()
	}
}

// CleanupOnSignal removes every namespace of this process on SIGINT or SIGTERM, calls
// before (e.g. to kill children) first, then exits with status 130. stop undoes it.
func CleanupOnSignal(before func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			fmt.Fprintf(os.Stderr, "lossy: %v: removing network namespaces\n", sig)
			if before != nil {
				before()
			}
			CloseAll()
			os.Exit(130)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// RemoveStale removes namespaces named by the harness whose creating process is gone (left
// by a run that was killed with SIGKILL). It returns the names removed.
func RemoveStale() ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("lossy: list namespaces: %w: %s", err, bytes.TrimSpace(out))
	}
	var removed []string
	for _, line := range strings.Split(string(out), "\n") {
		fs := strings.Fields(line)
		if len(fs) == 0 || !strings.HasPrefix(fs[0], Prefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(fs[0], Prefix), "-", 2)[0])
		if err != nil {
			continue
		}
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue // still running (or us)
		}
		if err := run("ip", "netns", "del", fs[0]); err == nil {
			removed = append(removed, fs[0])
		}
	}
	return removed, nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
