package campaign

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
)

// Campaign 4, gossip only: the claim "no node falsely declared dead at 20 % loss" measured
// with enough pools to be worth something. Campaign 4 proper runs one mesh (two regions of two
// nodes) for a few minutes, which sees a handful of suspicions; a false death that happens
// once in ten such runs slips through. Here one process inside a namespace that drops 20 % of
// every packet runs several independent meshes of the same shape with the production timers
// (gossip.ProfileDefault, encrypted pools): each mesh is two regions of two nodes, so a LAN
// pool of two members (nobody to ask for an indirect probe) and a WAN pool of four. The judge
// is the same as campaign 4's (no member failure reported by any pool); the suspicions and
// refutations memberlist logged are reported beside it, as the rate the false deaths would
// come from.
//
// QUICMQ_CAMPAIGN_GOSSIP_MESHES (default 4) and QUICMQ_CAMPAIGN_GOSSIP_DURATION (default 20 s;
// 3 min with QUICMQ_CAMPAIGN_LONG=1) size it; QUICMQ_CAMPAIGN_GOSSIP_LOSS (percent, default 20)
// sets the loss.
func TestCampaignGossipLoss(t *testing.T) {
	needHarness(t)
	meshes, d, loss := 4, 20*time.Second, 20.0
	if long() {
		d = 3 * time.Minute
	}
	if v := os.Getenv("QUICMQ_CAMPAIGN_GOSSIP_MESHES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 32 {
			t.Fatalf("QUICMQ_CAMPAIGN_GOSSIP_MESHES=%q: want 1-32", v)
		}
		meshes = n
	}
	if v := os.Getenv("QUICMQ_CAMPAIGN_GOSSIP_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 || d > time.Hour {
			t.Fatalf("QUICMQ_CAMPAIGN_GOSSIP_DURATION=%q: want a duration up to 1h", v)
		}
	}
	if v := os.Getenv("QUICMQ_CAMPAIGN_GOSSIP_LOSS"); v != "" {
		var err error
		if loss, err = strconv.ParseFloat(v, 64); err != nil || loss < 0 || loss >= 100 {
			t.Fatalf("QUICMQ_CAMPAIGN_GOSSIP_LOSS=%q: want a percentage in [0, 100)", v)
		}
	}
	ns, err := lossy.New("c4g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })

	// The worker forms its meshes without loss, then signals on stdout; the loss starts
	// after that and lasts d; the worker counts for d plus a margin in which the loss is
	// removed again (a suspicion raised just before the end is given time to play out).
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	cmd, lines, err := streamWorker(ctx, ns, "gossip", "W_MESHES="+strconv.Itoa(meshes), "W_DURATION="+d.String())
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	var report []string
	for l := range lines {
		switch {
		case l == "READY":
			if err := ns.SetLoss(loss / 100); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d meshes formed; %g %% loss for %v", meshes, loss, d)
		case l == "STOPLOSS":
			dropped, _ := ns.Dropped()
			if err := ns.SetLoss(0); err != nil {
				t.Fatal(err)
			}
			t.Logf("loss removed; %d packets dropped", dropped)
		default:
			report = append(report, l)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gossip worker: %v\n%s", err, strings.Join(report, "\n"))
	}
	fails := 0
	for _, l := range report {
		t.Log(l)
		var pool string
		var s, r, f, ev int
		if n, _ := fmt.Sscanf(l, "POOL %s suspicions=%d refutations=%d marked_failed=%d fail_events=%d", &pool, &s, &r, &f, &ev); n == 5 {
			fails += ev
		}
	}
	if fails > 0 {
		t.Errorf("%g %% loss: gossip declared live members failed %d times", loss, fails)
	}
}

// streamWorker is worker, but hands the worker's stdout lines over as they come (closed at
// its end), so that the test can act on them while it runs.
func streamWorker(ctx context.Context, ns *lossy.Namespace, mode string, env ...string) (interface{ Wait() error }, <-chan string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := ns.Command(ctx, self, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), workerEnv+"="+mode), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var once sync.Once
	var waitErr error
	return waitFunc(func() error {
		once.Do(func() { waitErr = cmd.Wait() })
		return waitErr
	}), lines, nil
}

type waitFunc func() error

func (f waitFunc) Wait() error { return f() }

// ---- the worker side ----

// memberlistCounter counts memberlist's own log lines about suspicion, per pool: they are
// how the library reports a probe that failed (a suspicion), a suspicion the suspect
// answered (a refutation) and a suspicion that ran out (a member marked failed).
// Every pool's recent lines are kept, and when a member is marked failed the last lines of
// both members of that pool go to stderr: the sequence that led to a false death.
type memberlistCounter struct {
	mu                                  sync.Mutex
	suspicions, refutations, markedDead map[string]int
	recent                              map[string][]string // "pool node" -> last lines
}

const recentLines = 40

type countHandler struct {
	c          *memberlistCounter
	pool, node string
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	key := h.pool + " " + h.node
	lines := append(h.c.recent[key], r.Time.Format("15:04:05.000")+" "+h.node+" "+r.Message)
	if len(lines) > recentLines {
		lines = lines[len(lines)-recentLines:]
	}
	h.c.recent[key] = lines
	switch {
	case strings.Contains(r.Message, "memberlist: Suspect "):
		h.c.suspicions[h.pool]++
	case strings.Contains(r.Message, "Refuting a suspect message"):
		h.c.refutations[h.pool]++
	case strings.Contains(r.Message, "memberlist: Marking ") && strings.Contains(r.Message, "as failed"):
		h.c.markedDead[h.pool]++
		// "Marking NAME as failed, ...": dump the marker's and NAME's recent lines.
		f := strings.Fields(r.Message[strings.Index(r.Message, "Marking "):])
		fmt.Fprintf(os.Stderr, "--- %s pool: %s marked %s failed; recent lines of both:\n%s\n%s\n",
			h.pool, h.node, f[1], strings.Join(lines, "\n"), strings.Join(h.c.recent[h.pool+" "+f[1]], "\n"))
	}
	return nil
}

func (h countHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	for _, a := range attrs {
		switch a.Key {
		case "pool":
			h.pool = a.Value.String()
		case "node":
			h.node = a.Value.String()
		}
	}
	return h
}

func (h countHandler) WithGroup(string) slog.Handler { return h }

// workerGossip runs W_MESHES meshes of two regions of two nodes on the namespace's loopback,
// prints READY once every pool is whole, counts for W_DURATION, prints STOPLOSS, waits for
// suspicions in flight to play out, and prints one POOL line per pool kind.
func workerGossip() error {
	meshes, err := strconv.Atoi(os.Getenv("W_MESHES"))
	if err != nil {
		return fmt.Errorf("W_MESHES: %w", err)
	}
	d, err := time.ParseDuration(os.Getenv("W_DURATION"))
	if err != nil {
		return fmt.Errorf("W_DURATION: %w", err)
	}
	key := make([]byte, gossip.KeySize)
	rand.Read(key)
	counter := &memberlistCounter{suspicions: map[string]int{}, refutations: map[string]int{}, markedDead: map[string]int{}, recent: map[string][]string{}}
	logger := slog.New(countHandler{c: counter})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var all []*gossip.Gossip
	defer func() { // graceful leaves, all at once (each waits for its broadcasts)
		var wg sync.WaitGroup
		for _, g := range all {
			wg.Go(func() { g.Close() })
		}
		wg.Wait()
	}()
	for m := range meshes {
		var mesh []*gossip.Gossip
		for i, region := range []string{"a", "a", "b", "b"} {
			g, err := gossip.New(gossip.Config{
				Name: fmt.Sprintf("m%d-%s%d", m, region, i%2), Region: fmt.Sprintf("m%d%s", m, region),
				LANAddr: "127.0.0.1:0", WANAddr: "127.0.0.1:0", Key: key, Logger: logger,
			})
			if err != nil {
				return err
			}
			all = append(all, g)
			mesh = append(mesh, g)
			go g.Run(ctx)
		}
		for i, g := range mesh {
			if i%2 == 1 {
				if _, err := g.JoinLAN([]string{mesh[i-1].LANAddr()}); err != nil {
					return err
				}
			}
			if i > 0 {
				if _, err := g.JoinWAN([]string{mesh[0].WANAddr()}); err != nil {
					return err
				}
			}
		}
	}
	// Whole: every node sees its region's two members and the mesh's four alive.
	wholeCtx, wholeCancel := context.WithTimeout(ctx, 30*time.Second)
	defer wholeCancel()
	if err := testlog.Until(wholeCtx, func() bool {
		for _, g := range all {
			alive := 0
			for _, m := range g.Members() {
				if m.Status == gossip.StatusAlive {
					alive++
				}
			}
			if alive != 4 {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("meshes not whole within 30 s: %w", err)
	}
	before := make([]gossip.Stats, len(all))
	for i, g := range all {
		before[i] = g.Stats()
	}
	fmt.Println("READY")
	testlog.Pause(ctx, d) // the loss, set by the parent process
	fmt.Println("STOPLOSS")
	testlog.Pause(ctx, 15*time.Second) // longer than a suspicion lasts with the default timers
	failLAN, failWAN := 0, 0
	for i, g := range all {
		s := g.Stats()
		failLAN += int(s.LANEvents[gossip.EventFail] - before[i].LANEvents[gossip.EventFail])
		failWAN += int(s.WANEvents[gossip.EventFail] - before[i].WANEvents[gossip.EventFail])
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	fmt.Printf("POOL lan(%d_pools_of_2) suspicions=%d refutations=%d marked_failed=%d fail_events=%d\n",
		2*meshes, counter.suspicions["lan"], counter.refutations["lan"], counter.markedDead["lan"], failLAN)
	fmt.Printf("POOL wan(%d_pools_of_4) suspicions=%d refutations=%d marked_failed=%d fail_events=%d\n",
		meshes, counter.suspicions["wan"], counter.refutations["wan"], counter.markedDead["wan"], failWAN)
	return nil
}
