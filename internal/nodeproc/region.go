package nodeproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// MeshFlags are the flags every node of a test mesh runs with, before its own: anonymous
// clients, gossip in the clear, clients on a free loopback port (a later --listen wins).
func MeshFlags(name string) []string {
	return []string{"--anonymous", "--insecure-gossip", "--listen", "127.0.0.1:0", "--name", name}
}

// Region is a region of `quicmq node` processes on loopback (see the package doc). Its
// fields are set before the first start and read only afterwards; a Node's process is
// replaced by a start while other goroutines read it (Node.Proc).
type Region struct {
	T testing.TB
	// Bin is the binary the nodes run (a Node's own Bin wins).
	Bin string
	// Name is the region's name (--region).
	Name string
	// CADir is the nodes' shared --ca-dir (a t.TempDir()); the clients' CA is CAFile.
	CADir string
	// Nodes are the region's nodes; each joins the others' gossip addresses.
	Nodes []*Node
	// Replicas is --replicas; 0 leaves it out (a single-copy region).
	Replicas int
	// WANJoin are the other regions' WAN gossip addresses a node with a WAN address joins.
	WANJoin []string
	// Flags, when set, gives a node's flags beyond the region's, on every start.
	Flags func(n *Node) []string
	// Options are how a process is started (the log lines to keep, the start timeout).
	Options Options

	mu      sync.Mutex
	extras  map[string]*Node
	started []*Process // every process started, killed ones too: their log lines
}

// Node is a node of a Region: its name, data directory and gossip address stay for the
// whole test, so it restarts as itself.
type Node struct {
	Name, Data, LAN string
	// Bin is the binary this node runs, when not the region's (a rolling upgrade).
	Bin string
	// Metrics, when set, is the node's fixed --metrics address (its admin API too, with
	// --admin-api), passed on every start.
	Metrics string
	// Listen, when set, is the node's fixed client address (--listen), so that a client
	// given it reaches the node again after a restart; otherwise a free port each start.
	Listen string
	// WAN, when set, is the node's WAN gossip address (--wan); it joins Region.WANJoin.
	WAN string

	mu sync.Mutex // guards p: a start replaces it while a load reads its address
	p  *Process
}

// Proc is the node's current process; nil before its first start.
func (n *Node) Proc() *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p
}

// NewRegion names n nodes of region (REGION1, REGION2, ...), with --replicas n when n > 1,
// their data directories and gossip addresses, and starts none (StartAll, Start). It skips
// the test, saying why, when n > 1 and bin's node has no --replicas flag.
func NewRegion(t testing.TB, bin, region string, n int) *Region {
	t.Helper()
	r := &Region{T: t, Bin: bin, Name: region, CADir: t.TempDir()}
	if n > 1 {
		if out, _ := exec.Command(bin, "node", "-h").CombinedOutput(); !bytes.Contains(out, []byte("-replicas")) {
			t.Skip("this build's quicmq node has no --replicas flag: replicated topics are not wired into the node")
		}
		r.Replicas = n
	}
	for i := range n {
		r.Nodes = append(r.Nodes, &Node{Name: fmt.Sprintf("%s%d", region, i+1), Data: t.TempDir(), LAN: FreeAddr(t)})
	}
	return r
}

// CAFile is the CA certificate clients of the region trust.
func (r *Region) CAFile() string { return filepath.Join(r.CADir, "ca.pem") }

// Index is the index in Nodes of the node named name; -1 if none is.
func (r *Region) Index(name string) int {
	return slices.IndexFunc(r.Nodes, func(n *Node) bool { return n.Name == name })
}

// Node is the node named name, of Nodes or an Extra; nil if there is none.
func (r *Region) Node(name string) *Node {
	if i := r.Index(name); i >= 0 {
		return r.Nodes[i]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.extras[name]
}

// Extra is the node named name that is not one of Nodes (a load that dials Nodes never
// dials it), made on the first call with its own data directory and gossip address, and
// joining Nodes when started (StartNode).
func (r *Region) Extra(name string) *Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.extras == nil {
		r.extras = map[string]*Node{}
	}
	n := r.extras[name]
	if n == nil {
		n = &Node{Name: name, Data: r.T.TempDir(), LAN: FreeAddr(r.T)}
		r.extras[name] = n
	}
	return n
}

// Args are node n's flags: the region's (data, region, CA, gossip, the other Nodes to join,
// --replicas, the node's fixed addresses and the WAN pool to join), then Flags'.
func (r *Region) Args(n *Node) []string {
	var join []string
	for _, o := range r.Nodes {
		if o != n {
			join = append(join, o.LAN)
		}
	}
	args := []string{"--data", n.Data, "--region", r.Name, "--ca-dir", r.CADir, "--gossip", n.LAN}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	if r.Replicas > 0 {
		args = append(args, "--replicas", fmt.Sprint(r.Replicas))
	}
	if n.Metrics != "" {
		args = append(args, "--metrics", n.Metrics)
	}
	if n.Listen != "" {
		args = append(args, "--listen", n.Listen)
	}
	if n.WAN != "" {
		args = append(args, "--wan", n.WAN, "--wan-join", strings.Join(r.WANJoin, ","))
	}
	if r.Flags != nil {
		args = append(args, r.Flags(n)...)
	}
	return args
}

// Start starts node i's process (again, after a kill) on its data directory and returns it
// once it listens.
func (r *Region) Start(i int) *Process { return r.StartNode(r.Nodes[i]) }

// StartNode is Start for any node of the region, one of Nodes or an Extra.
func (r *Region) StartNode(n *Node) *Process {
	r.T.Helper()
	bin := cmpOr(n.Bin, r.Bin)
	p := r.Options.Start(r.T, bin, n.Name, append(MeshFlags(n.Name), r.Args(n)...)...)
	n.mu.Lock()
	n.p = p
	n.mu.Unlock()
	r.mu.Lock()
	r.started = append(r.started, p)
	r.mu.Unlock()
	return p
}

// StartAll starts every node of Nodes and waits until each has its links to the others up.
func (r *Region) StartAll() {
	r.T.Helper()
	for i := range r.Nodes {
		r.Start(i)
	}
	for _, n := range r.Nodes {
		r.WaitLinks(n, len(r.Nodes)-1)
	}
}

// linksWithin bounds WaitLinks.
const linksWithin = 30 * time.Second

// WaitLinks waits up to 30 s until k more of node n's links have come up since its start
// (or since the links an earlier wait took).
func (r *Region) WaitLinks(n *Node, k int) {
	r.T.Helper()
	if err := n.Proc().WaitLinks(k, linksWithin); err != nil {
		r.T.Fatal(err)
	}
}

// Started is every process the region started so far, killed ones too (their log lines).
func (r *Region) Started() []*Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.started)
}

// Kill SIGKILLs node i and waits until it has exited: a crash.
func (r *Region) Kill(i int) { r.Nodes[i].Proc().Kill() }

// Stop stops node i gracefully (SIGTERM) and fails the test unless it stopped within grace.
func (r *Region) Stop(i int, grace time.Duration) {
	r.T.Helper()
	if p := r.Nodes[i].Proc(); !p.Stop(grace) {
		r.T.Fatalf("%s did not stop within %v of SIGTERM\n%s", p.Name, grace, p.Tail())
	}
}

// Pause stops node i's process (SIGSTOP): it holds its sockets and answers nothing.
func (r *Region) Pause(i int) { r.signal(i, syscall.SIGSTOP) }

// Resume resumes node i's process after Pause (SIGCONT).
func (r *Region) Resume(i int) { r.signal(i, syscall.SIGCONT) }

func (r *Region) signal(i int, sig syscall.Signal) {
	r.T.Helper()
	if err := r.Nodes[i].Proc().Signal(sig); err != nil {
		r.T.Fatalf("%v to %s: %v", sig, r.Nodes[i].Name, err)
	}
}

// Wipe deletes everything in node i's data directory, which stays, empty: a replaced
// disk. The node must be down (Kill first).
func (r *Region) Wipe(i int) {
	r.T.Helper()
	n := r.Nodes[i]
	if n.Proc().State() == nil {
		r.T.Fatalf("wipe %s: its process runs", n.Name)
	}
	if err := os.RemoveAll(n.Data); err != nil {
		r.T.Fatal(err)
	}
	if err := os.MkdirAll(n.Data, 0o700); err != nil {
		r.T.Fatal(err)
	}
}

// Restart kills node i and starts it again on its data directory.
func (r *Region) Restart(i int) *Process {
	r.T.Helper()
	r.Kill(i)
	return r.Start(i)
}

// TopicRow is a row of `quicmq topics --format json` with replicas.
type TopicRow struct {
	Topic    string   `json:"topic"`
	Next     uint64   `json:"next"`
	Leader   string   `json:"leader"`
	Replicas []string `json:"replicas"`
}

// Topics runs `quicmq topics --format json --pattern pattern` against node i, as an
// operator would, within 5 s.
func (r *Region) Topics(ctx context.Context, i int, pattern string) ([]TopicRow, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.Bin, "topics", "--server", r.Nodes[i].Proc().Addr, "--ca", r.CAFile(), "--format", "json", "--pattern", pattern)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("quicmq topics at %s: %v: %s", r.Nodes[i].Name, err, strings.TrimSpace(stderr.String()))
	}
	var rows []TopicRow
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var row TopicRow
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			return nil, fmt.Errorf("quicmq topics at %s: %q: %w", r.Nodes[i].Name, sc.Text(), err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// Leader returns the index of the node that leads topic, as the nodes other than skip
// report it, waiting up to 20 s for one to report a leader that is not skip.
func (r *Region) Leader(ctx context.Context, topic string, skip ...int) (int, error) {
	wait, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	leader := -1
	err := testlog.UntilErr(wait, func() error {
		var last error
		for i := range r.Nodes {
			if slices.Contains(skip, i) {
				continue
			}
			rows, err := r.Topics(wait, i, topic)
			if err != nil {
				last = err
				continue
			}
			for _, row := range rows {
				if l := r.Index(row.Leader); row.Topic == topic && l >= 0 && !slices.Contains(skip, l) {
					leader = l
					return nil
				}
				last = fmt.Errorf("%s reports %s led by %q (replicas %v)", r.Nodes[i].Name, topic, row.Leader, row.Replicas)
			}
		}
		if last == nil {
			last = errors.New("no node answered")
		}
		return last
	})
	if err != nil {
		return -1, fmt.Errorf("no leader of %s within 20 s: %w", topic, err)
	}
	return leader, nil
}

// Isolate cuts node i off from the region's other nodes and from this test's process with
// nftables, both ways, silently, until the Isolation is healed (also by the test's
// cleanup). It skips the test, saying why, without root or nft.
func (r *Region) Isolate(i int) *Isolation {
	t := r.T
	t.Helper()
	fixed := func(n *Node) []int {
		return []int{AddrPort(t, n.Proc().Addr), AddrPort(t, n.LAN)}
	}
	victim := fixed(r.Nodes[i])
	var peers []int
	var pids []int
	for j, n := range r.Nodes {
		if j != i {
			peers = append(peers, fixed(n)...)
			pids = append(pids, n.Proc().Pid())
		}
	}
	return Isolate(t, victim, peers, pids)
}

func cmpOr(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// Pids is the process id of each started node of Nodes (its latest process), by name.
func (r *Region) Pids() map[string]int {
	pids := map[string]int{}
	for _, n := range r.Nodes {
		if p := n.Proc(); p != nil {
			pids[n.Name] = p.Pid()
		}
	}
	return pids
}
