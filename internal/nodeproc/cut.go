package nodeproc

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Isolation cuts one node process off from every other process on loopback with nftables,
// both ways, silently (drops on the input hook, which every packet on lo passes once: a drop
// on output would be reported to the sender as an error instead of being lost).
//
// Every node's packets have its own fixed ports (QUIC listener, gossip) at one end or its
// peers' at the other; the isolated node's links, though, dial from ephemeral sockets, which
// no rule can name in advance. So the table drops every packet to or from the isolated node's
// fixed ports, and every packet between a peer's fixed port and a port that is not known to
// belong to the peers or to this test process: the peers' and the test's sockets are read
// from /proc every 50 ms and allowed. A socket of theirs opened since the last scan loses its
// first packets for up to 50 ms (QUIC resends them); a socket of the isolated node never gets
// through. Only packets with one of the region's fixed ports at one end are touched: other
// processes on the machine are not. The table is created in the host's namespace, named with
// this process's id, and deleted by Heal and by the test's cleanup.
type Isolation struct {
	table string
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// Isolate cuts off the node process whose fixed ports are victim from the processes pids
// (whose fixed ports are peers) and from this test's process, as Isolation says. It
// skips the test, saying why, without root or nft.
func Isolate(t testing.TB, victim, peers, pids []int) *Isolation {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("isolating a node needs root (nftables rules on lo)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("isolating a node needs nft (nftables): not on PATH")
	}
	pids = append(slices.Clone(pids), os.Getpid())
	iso := &Isolation{table: fmt.Sprintf("qmqrepcheck%d", os.Getpid()), stop: make(chan struct{}), done: make(chan struct{})}
	allowed := map[int]bool{}
	for _, p := range peers {
		allowed[p] = true
	}
	for _, p := range socketPorts(pids) {
		allowed[p] = true
	}
	rule := `iifname "lo" meta l4proto { tcp, udp }`
	script := fmt.Sprintf(`table inet %[1]s {
  set victim { type inet_service; elements = { %[2]s } }
  set peers { type inet_service; elements = { %[3]s } }
  set allowed { type inet_service; elements = { %[4]s } }
  chain in {
    type filter hook input priority 0; policy accept;
    %[5]s th dport @victim counter drop
    %[5]s th sport @victim counter drop
    %[5]s th sport @peers th dport != @allowed counter drop
    %[5]s th dport @peers th sport != @allowed counter drop
  }
}
`, iso.table, joinPorts(victim), joinPorts(peers), joinPorts(keys(allowed)), rule)
	if out, err := nft(script); err != nil {
		t.Fatalf("nft: %v\n%s\n%s", err, out, script)
	}
	t.Cleanup(iso.Heal)
	go func() {
		defer close(iso.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-iso.stop:
				return
			case <-tick.C:
			}
			var add []int
			for _, p := range socketPorts(pids) {
				if !allowed[p] && !slices.Contains(victim, p) {
					allowed[p] = true
					add = append(add, p)
				}
			}
			if len(add) > 0 {
				if out, err := nft(fmt.Sprintf("add element inet %s allowed { %s }\n", iso.table, joinPorts(add))); err != nil {
					t.Logf("nft add element: %v: %s", err, out)
				}
			}
		}
	}()
	return iso
}

// Heal deletes the table; safe twice.
func (iso *Isolation) Heal() {
	iso.once.Do(func() {
		close(iso.stop)
		<-iso.done
		nft(fmt.Sprintf("delete table inet %s\n", iso.table))
	})
}

// Dropped is the number of packets the table dropped so far.
func (iso *Isolation) Dropped() int64 {
	out, err := exec.Command("nft", "list", "table", "inet", iso.table).CombinedOutput()
	if err != nil {
		return -1
	}
	var n int64
	fields := strings.Fields(string(out))
	for j := 0; j+1 < len(fields); j++ {
		if fields[j] == "packets" {
			v, _ := strconv.ParseInt(fields[j+1], 10, 64)
			n += v
		}
	}
	return n
}

func nft(script string) ([]byte, error) {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	return cmd.CombinedOutput()
}

// AddrPort is the port of addr ("host:port").
func AddrPort(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func joinPorts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// socketPorts returns the local ports of the UDP and TCP sockets the processes hold.
func socketPorts(pids []int) []int {
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	var out []int
	for _, table := range []string{"udp", "udp6", "tcp", "tcp6"} {
		f, err := os.Open("/proc/net/" + table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || !inodes[fs[9]] {
				continue
			}
			if i := strings.LastIndexByte(fs[1], ':'); i >= 0 {
				if p, err := strconv.ParseInt(fs[1][i+1:], 16, 32); err == nil && p != 0 {
					out = append(out, int(p))
				}
			}
		}
		f.Close()
	}
	return out
}
