package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/linearize"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// The region-resizing campaigns with node processes (issue 30; docs/reliability.md,
// "Region resizing"), beside TestGrowCampaign (figure 1) and TestRollingRestartCampaign
// (figure 4):
//
//   - TestShrinkCampaign (figure 2): five nodes, --replicas 3, go back to three with
//     `quicmq nodes remove` under pipelined idempotent publishing into many topics.
//   - TestReplaceCampaign (figure 3): a node of three SIGKILLed, its data directory wiped;
//     a node with another name joins and `quicmq nodes remove --dead` runs.
//   - TestMoveFaultsCampaign (figure 5): moves interrupted by the SIGKILL of their source,
//     their destination or the metadata leader.
//
// The load is the replicated campaigns' (replicaLoad: producers through random nodes, readers
// from offset 0), and the whole history is judged at the end by internal/linearize
// (porcupine per topic: nothing acknowledged lost or stored twice, offsets dense and
// identical on every replica). Every move is also judged from the nodes' own log lines
// (movePromotions): a group leader that promoted a new replica (removing the old one)
// while raft's progress showed it far behind the commit index fails the campaign; that is
// what the build tagged quicmq_broken_move does.

// newResizeRegion names n nodes (rc1...) with --replicas 3 whose nodes also serve the admin
// API (on their --metrics address), so the campaign drives the region with the CLI as an
// operator does, and starts the first start: the others are started later (Start) and dialed
// by the load only once they are (dialNode). The moveWatch reads the moves.
func newResizeRegion(t *testing.T, bin string, n, start int) (*nodeproc.Region, *moveWatch) {
	t.Helper()
	r := newReplicaRegion(t, bin, n)
	for _, nd := range r.Nodes {
		nd.Metrics = freeAddr(t)
	}
	r.Flags = func(*nodeproc.Node) []string {
		return []string{"--replicas", "3", "--admin-api", "--raft-balance-interval", "2s"}
	}
	for i := range start {
		r.Start(i)
	}
	for i := range start {
		r.WaitLinks(r.Nodes[i], start-1)
	}
	return r, &moveWatch{r: r, seen: map[string]uint64{}}
}

// startExtra starts node name, not one of the load's nodes (the load never dials it), on
// its data, joining the region's nodes: a node that only holds replicas
// (TestMoveFaultsCampaign).
func startExtra(r *nodeproc.Region, name string) *nodeproc.Node {
	r.T.Helper()
	n := r.Extra(name)
	if n.Metrics == "" {
		n.Metrics = freeAddr(r.T)
	}
	r.StartNode(n)
	return n
}

// moveWatch is what a resize campaign learns of the moves: from `quicmq nodes` (the bytes
// each move showed fetched) and from the region's node logs (promotions, ends).
type moveWatch struct {
	r    *nodeproc.Region
	mu   sync.Mutex
	seen map[string]uint64 // "group from->to" -> the most bytes `quicmq nodes` showed for that move
}

// admin is node name's admin API address.
func (w *moveWatch) admin(name string) string { return w.r.Node(name).Metrics }

// nodeRow is a row of `quicmq nodes --format json`.
type nodeRow struct {
	Name       string `json:"name"`
	Role       string `json:"role"`
	State      string `json:"state"`
	Held       int    `json:"held"`
	Led        int    `json:"led"`
	MetaLeader bool   `json:"meta_leader"`
	Moves      []struct {
		Group, From, To, State string
		Entries, Of, Bytes     uint64
	} `json:"moves"`
}

// listNodes runs `quicmq nodes --format json` against via's admin API.
func (w *moveWatch) listNodes(via string) ([]nodeRow, error) {
	code, out, errOut := runCLI(w.r.T, "", "nodes", "--admin", w.admin(via), "--format", "json", "--timeout", "5s")
	if code != 0 {
		return nil, fmt.Errorf("quicmq nodes at %s: exit %d: %s", via, code, strings.TrimSpace(errOut))
	}
	var rows []nodeRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, fmt.Errorf("quicmq nodes at %s: %w", via, err)
	}
	w.mu.Lock()
	for _, n := range rows {
		for _, m := range n.Moves {
			k := m.Group + " " + m.From + "->" + m.To
			w.seen[k] = max(w.seen[k], m.Bytes)
		}
	}
	w.mu.Unlock()
	return rows, nil
}

// settled waits until via lists exactly names, every one up, none with a move in progress,
// holding groups*3 replicas between them, each within one of the others (every group back
// to three replicas, on these nodes); it returns the rows.
func (w *moveWatch) settled(via string, names []string, within time.Duration) []nodeRow {
	w.r.T.Helper()
	var rows []nodeRow
	last := ""
	start := time.Now()
	testlog.WaitForErr(w.r.T, within, fmt.Sprintf("%v listed, up, balanced, no move in progress", names), func() error {
		var err error
		if rows, err = w.listNodes(via); err != nil {
			return err
		}
		var got, held []string
		moving, sum, lo, hi := 0, 0, -1, 0
		ok := true
		for _, n := range rows {
			got = append(got, n.Name)
			held = append(held, fmt.Sprintf("%s %s %s %d/%d", n.Name, n.Role, n.State, n.Held, n.Led))
			moving += len(n.Moves)
			sum += n.Held
			if lo < 0 || n.Held < lo {
				lo = n.Held
			}
			hi = max(hi, n.Held)
			ok = ok && n.State == "up" && n.Role != "none"
		}
		s := fmt.Sprintf("%v, %d moves in progress", held, moving)
		if s != last {
			w.r.T.Logf("%v at %s: %s", time.Since(start).Round(time.Millisecond), via, s)
			last = s
		}
		slices.Sort(got)
		if !ok || moving > 0 || !slices.Equal(got, slices.Sorted(slices.Values(names))) || hi-lo > 1 || sum%3 != 0 {
			return errors.New(s)
		}
		return nil
	})
	return rows
}

// moveLines is every replica-move log line of every process the campaign started.
func (w *moveWatch) moveLines() []string {
	var out []string
	for _, p := range w.r.Started() {
		out = append(out, p.Kept(moveLineRE)...)
	}
	return out
}

var (
	promoteRE = regexp.MustCompile(`msg="replica move".* group=(\d+) from=(\S+) to=(\S+) learner_match=(\d+) commit=(\d+) state="promote and remove"`)
	moveEndRE = regexp.MustCompile(`msg="region metadata: a group's replica (moved|move was undone)[^"]*".* group=(\d+) from=(\S+) to=(\S+)`)
)

// moveLag is the most a new replica may trail the commit index when it is promoted
// (node's rejoinMaxLag).
const moveLag = 64

// movePromotions reads the group leaders' "replica move" lines: every promotion (the new
// replica made a voter, the old one removed) and those made while the new replica trailed
// the commit index by more than moveLag entries, or had acknowledged nothing.
func (w *moveWatch) movePromotions() (promotions int, early []string) {
	for _, line := range w.moveLines() {
		m := promoteRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		promotions++
		match, _ := strconv.ParseUint(m[4], 10, 64)
		commit, _ := strconv.ParseUint(m[5], 10, 64)
		if match == 0 || match+moveLag < commit {
			early = append(early, fmt.Sprintf("group %s: %s's replica removed, %s's promoted with %d of %d entries", m[1], m[2], m[3], match, commit))
		}
	}
	return promotions, early
}

// moveEnds counts, by "group:from:to", the moves the nodes' metadata recorded done and
// undone (each node logs each record it applies: a move counts once).
func (w *moveWatch) moveEnds() (done, undone map[string]bool) {
	done, undone = map[string]bool{}, map[string]bool{}
	for _, line := range w.moveLines() {
		if m := moveEndRE.FindStringSubmatch(line); m != nil {
			key := m[2] + ":" + m[3] + ":" + m[4]
			if m[1] == "moved" {
				done[key] = true
			} else {
				undone[key] = true
			}
		}
	}
	return done, undone
}

// movesSeen reports the moves `quicmq nodes` showed in progress and the bytes it showed
// them fetch.
func (w *moveWatch) movesSeen() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	withBytes, most, sum := 0, uint64(0), uint64(0)
	for _, b := range w.seen {
		if b > 0 {
			withBytes++
		}
		most, sum = max(most, b), sum+b
	}
	return fmt.Sprintf("%d moves shown in progress by quicmq nodes, %d of them with bytes fetched (most %d, in all %d)", len(w.seen), withBytes, most, sum)
}

// checkPromotions fails the test when a move promoted a replica before it caught up.
func (w *moveWatch) checkPromotions() {
	w.r.T.Helper()
	n, early := w.movePromotions()
	w.r.T.Logf("%s", w.movesSeen())
	w.r.T.Logf("promotions of a moving replica seen in the group leaders' logs: %d, made before the replica caught up: %d", n, len(early))
	if len(early) > 0 {
		w.r.T.Errorf("a move removed the old replica before its new one had caught up (%d times):\n%s", len(early), strings.Join(early[:min(10, len(early))], "\n"))
	}
	if n == 0 {
		w.r.T.Errorf("no promotion seen in the group leaders' logs: the check of moves judged nothing")
	}
}

// countBytesLines counts the CLI's progress lines that show a move's bytes fetched.
func countBytesLines(lines []string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, " bytes") {
			n++
		}
	}
	return n
}

// publishP99 is the 99th percentile of the latency of the publishes acknowledged that
// were invoked in [from, to) of the history's clock, and their number.
func publishP99(h *linearize.History, from, to int64) (time.Duration, int) {
	pubs, _ := h.Ops()
	var lat []time.Duration
	for _, p := range pubs {
		if p.Outcome == linearize.OK && p.Call >= from && p.Call < to {
			lat = append(lat, time.Duration(p.Return-p.Call))
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, len(lat)*99/100)].Round(10 * time.Microsecond), len(lat)
}

// moveTestBinary is this package built with the test's own build tags for moves (the
// quicmq_broken_move build when the test runs with -tags quicmq_broken_move), so that the
// campaign runs the build it is asked to judge.
func moveTestBinary(t *testing.T) string {
	t.Helper()
	bin := quicmqBinaryTags(t, moveBuildTags)
	if moveBuildTags != "" {
		t.Logf("node processes built with -tags %s", moveBuildTags)
	}
	return bin
}

// TestShrinkCampaign (issue 30, figure 2): five node processes with --replicas 3 take
// pipelined idempotent publishes into many topics through every node; `quicmq nodes
// remove` removes two of them, one after the other, as an operator does, and their
// processes are stopped once the CLI reports them removed. The three that stay must hold
// every group, the history must pass the linearizability checker, and no move may have
// promoted a replica before it caught up. It reports the time each removal took and publish
// p99 during the removals against before them.
//
// QUICMQ_SHRINK_CAMPAIGN=1 runs it; QUICMQ_SHRINK_TOPICS (default 1000) and
// QUICMQ_SHRINK_RATE (publishes/s, default 1000) size it.
func TestShrinkCampaign(t *testing.T) {
	if os.Getenv("QUICMQ_SHRINK_CAMPAIGN") == "" {
		t.Skip("the shrink campaign runs five node processes for a few minutes: set QUICMQ_SHRINK_CAMPAIGN=1")
	}
	r, w := newResizeRegion(t, moveTestBinary(t), 5, 5)
	l := startResizeLoad(t, r, "SHRINK", "through 5 nodes")
	w.settled("rc1", []string{"rc1", "rc2", "rc3", "rc4", "rc5"}, 2*time.Minute)
	before := l.hist.Now()
	l.goesOn(t, 5*time.Second)

	during := l.hist.Now()
	start := time.Now()
	for _, name := range []string{"rc5", "rc4"} {
		t0 := time.Now()
		code, _, errOut := runCLI(t, "", "nodes", "remove", name, "--admin", w.admin("rc1"), "--timeout", "10m")
		if code != 0 {
			t.Fatalf("quicmq nodes remove %s: exit %d\n%s", name, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		t.Logf("quicmq nodes remove %s: %v (%d progress lines, %d showing bytes fetched; last: %s)", name, time.Since(t0).Round(time.Millisecond), len(lines), countBytesLines(lines), lines[len(lines)-1])
		stopGracefully(t, r.Nodes[r.Index(name)].Proc())
	}
	took := time.Since(start)
	after := l.hist.Now()
	rows := w.settled("rc1", []string{"rc1", "rc2", "rc3"}, 2*time.Minute)
	l.goesOn(t, 2*time.Second)
	l.Stop()
	pb, nb := publishP99(l.hist, before, during)
	pd, nd := publishP99(l.hist, during, after)
	var table []string
	for _, n := range rows {
		table = append(table, fmt.Sprintf("%s %d/%d", n.Name, n.Held, n.Led))
	}
	done, undone := w.moveEnds()
	t.Logf("shrink 5 -> 3 (nodes remove rc5, rc4) with %d topics at %d publishes/s: %v; %d moves done, %d undone; held/led after: %s; publish p99 before %v (%d), during %v (%d), %.1fx",
		len(l.topics), l.rate, took.Round(time.Millisecond), len(done), len(undone), strings.Join(table, ", "), pb, nb, pd, nd, float64(pd)/float64(max(1, pb)))
	w.checkPromotions()
	checkReplicaCampaign(t, l, []int{0, 1, 2})
}

// TestReplaceCampaign (issue 30, figure 3): three node processes with --replicas 3 under the
// load; rc3 is SIGKILLed and its data directory deleted; rc4, a node with another name and
// an empty directory, joins; `quicmq nodes remove --dead rc3` re-creates rc3's replicas on
// rc4 from the survivors. The region must be back to three replicas of every group (rc1,
// rc2, rc4 each holding all), the history must pass the checker, and no move may have
// promoted a replica before it caught up.
//
// QUICMQ_REPLACE_CAMPAIGN=1 runs it; QUICMQ_REPLACE_TOPICS (default 1000) and
// QUICMQ_REPLACE_RATE (publishes/s, default 1000) size it.
func TestReplaceCampaign(t *testing.T) {
	if os.Getenv("QUICMQ_REPLACE_CAMPAIGN") == "" {
		t.Skip("the replace campaign runs four node processes for a few minutes: set QUICMQ_REPLACE_CAMPAIGN=1")
	}
	r, w := newResizeRegion(t, moveTestBinary(t), 4, 3)
	l := startResizeLoad(t, r, "REPLACE", "through 3 nodes (rc4 joins later)")
	before := l.hist.Now()
	l.goesOn(t, 5*time.Second)

	during := l.hist.Now()
	start := time.Now()
	r.Kill(2)
	r.Wipe(2)
	t.Logf("rc3 SIGKILLed, its data directory deleted")
	testlog.WaitForErr(t, 60*time.Second, "rc3 listed down", func() error {
		rows, err := w.listNodes("rc1")
		for _, n := range rows {
			if n.Name == "rc3" && n.State == "down" {
				return nil
			}
		}
		return fmt.Errorf("%+v %v", rows, err)
	})
	down := time.Since(start)
	r.Start(3)
	r.WaitLinks(r.Nodes[3], 2)
	// rc4 must be a member of the metadata group before rc3 can go: the region keeps
	// --replicas nodes.
	testlog.WaitForErr(t, 60*time.Second, "rc4 listed as a member of the metadata group", func() error {
		rows, err := w.listNodes("rc1")
		for _, n := range rows {
			if n.Name == "rc4" && n.Role != "none" {
				return nil
			}
		}
		return fmt.Errorf("%+v %v", rows, err)
	})
	joined := time.Since(start)
	code, _, errOut := runCLI(t, "", "nodes", "remove", "rc3", "--dead", "--admin", w.admin("rc1"), "--timeout", "10m")
	if code != 0 {
		t.Fatalf("quicmq nodes remove --dead rc3: exit %d\n%s", code, errOut)
	}
	removed := time.Since(start)
	t.Logf("quicmq nodes remove --dead rc3: %d progress lines, %d showing bytes fetched", strings.Count(errOut, "\n"), countBytesLines(strings.Split(errOut, "\n")))
	after := l.hist.Now()
	rows := w.settled("rc1", []string{"rc1", "rc2", "rc4"}, 2*time.Minute)
	for _, n := range rows {
		if n.Held != rows[0].Held {
			t.Errorf("after the replacement %s holds %d groups, %s %d: not every group on all three", n.Name, n.Held, rows[0].Name, rows[0].Held)
		}
	}
	l.goesOn(t, 2*time.Second)
	l.Stop()
	pb, nb := publishP99(l.hist, before, during)
	pd, nd := publishP99(l.hist, during, after)
	done, undone := w.moveEnds()
	t.Logf("replace rc3 by rc4: rc3 seen down %v after the kill, rc4 a member at %v, nodes remove --dead returned at %v; %d moves done, %d undone; every node holds %d groups; publish p99 before %v (%d), from the kill to the end of the removal %v (%d), %.1fx",
		down.Round(time.Millisecond), joined.Round(time.Millisecond), removed.Round(time.Millisecond), len(done), len(undone), rows[0].Held, pb, nb, pd, nd, float64(pd)/float64(max(1, pb)))
	w.checkPromotions()
	checkReplicaCampaign(t, l, []int{0, 1, 3})
}

// TestMoveFaultsCampaign (issue 30, figure 5): moves interrupted by a SIGKILL. Three node
// processes with --replicas 3 under the load; each run starts a new node (the replica
// balancer moves groups onto it) and then removes it again with `quicmq nodes remove` (its
// groups move back), and in the middle of one of these moves SIGKILLs, by a seeded
// schedule, the move's source, its destination or the metadata leader, keeps it down for a
// seeded time (past gossip's failure detection or not) and starts it again on its data.
// Each run must end with the region back to rc1-rc3 holding every group and no move in
// progress: the interrupted move finished or was undone (both are reported). At the end
// the whole history must pass the checker, and no move may have promoted a replica before
// it caught up.
//
// QUICMQ_MOVE_FAULTS_CAMPAIGN=1 runs it; QUICMQ_MOVE_FAULTS_RUNS (runs per kind of victim,
// default 10), QUICMQ_MOVE_FAULTS_TOPICS (default 200) and QUICMQ_MOVE_FAULTS_RATE
// (publishes/s, default 500) size it; QUICMQ_TEST_SEED replays a schedule.
func TestMoveFaultsCampaign(t *testing.T) {
	if os.Getenv("QUICMQ_MOVE_FAULTS_CAMPAIGN") == "" {
		t.Skip("the move-faults campaign runs four node processes for many minutes: set QUICMQ_MOVE_FAULTS_CAMPAIGN=1")
	}
	runs := envInt("QUICMQ_MOVE_FAULTS_RUNS", 10)
	rng := testlog.Rand(t, "victims' order, when each is killed, how long each stays down")
	r, w := newResizeRegion(t, moveTestBinary(t), 3, 3)
	l := newReplicaLoad(r, envInt("QUICMQ_MOVE_FAULTS_TOPICS", 200), envInt("QUICMQ_MOVE_FAULTS_RATE", 500))
	t.Logf("%d topics at %d publishes/s through rc1-rc3; %d runs per victim", len(l.topics), l.rate, runs)
	l.warmUp(t)
	l.run(2)
	t.Cleanup(l.Stop)
	l.goesOn(t, 3*time.Second)

	var kinds []string
	for range runs {
		kinds = append(kinds, "source", "destination", "metadata leader")
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	type outcome struct{ done, undone, unknown int }
	outcomes := map[string]*outcome{}
	base := []string{"rc1", "rc2", "rc3"}
	for run, kind := range kinds {
		extra := fmt.Sprintf("rc%d", 4+run)
		phase := "grow"
		if rng.IntN(2) == 1 {
			phase = "remove"
		}
		delay := time.Duration(rng.IntN(300)) * time.Millisecond
		downFor := time.Duration(rng.IntN(10000)) * time.Millisecond
		t.Logf("run %d: %s kills the %s of a move while %s %s, %v after the move is seen, down %v", run+1, extra, kind, extra, map[string]string{"grow": "joins", "remove": "is removed"}[phase], delay, downFor)
		x := startExtra(r, extra)
		if phase == "remove" {
			w.settled("rc1", append(slices.Clone(base), extra), 3*time.Minute)
			code, out, errOut := runCLI(t, "", "nodes", "remove", extra, "--no-wait", "--admin", w.admin("rc1"))
			if code != 0 {
				t.Fatalf("run %d: quicmq nodes remove %s: exit %d\n%s%s", run+1, extra, code, out, errOut)
			}
		}
		// A move in progress, as the operator's listing shows it.
		var mv struct{ group, from, to string }
		var meta string
		testlog.WaitForErr(t, 3*time.Minute, "a move in progress", func() error {
			rows, err := w.listNodes("rc1")
			if err != nil {
				return err
			}
			for _, n := range rows {
				if n.MetaLeader {
					meta = n.Name
				}
				for _, m := range n.Moves {
					if mv.group == "" && (phase == "grow" && m.To == extra || phase == "remove" && m.From == extra) {
						mv.group, mv.from, mv.to = m.Group, m.From, m.To
					}
				}
			}
			if mv.group == "" || meta == "" {
				return fmt.Errorf("none yet: %+v", rows)
			}
			return nil
		})
		testlog.Pause(context.Background(), delay) // a step of the fault schedule
		victim := map[string]string{"source": mv.from, "destination": mv.to, "metadata leader": meta}[kind]
		vn := x
		if victim != extra {
			vn = r.Nodes[r.Index(victim)]
		}
		vn.Proc().Kill()
		t.Logf("run %d: move of %s %s -> %s; metadata leader %s; %s (%s) SIGKILLed", run+1, mv.group, mv.from, mv.to, meta, victim, kind)
		testlog.Pause(context.Background(), downFor) // a step of the fault schedule
		if victim == extra {
			startExtra(r, extra)
		} else {
			r.Start(r.Index(victim))
		}
		if phase == "grow" {
			w.settled("rc1", append(slices.Clone(base), extra), 3*time.Minute)
			code, out, errOut := runCLI(t, "", "nodes", "remove", extra, "--no-wait", "--admin", w.admin("rc1"))
			if code != 0 {
				t.Fatalf("run %d: quicmq nodes remove %s: exit %d\n%s%s", run+1, extra, code, out, errOut)
			}
		}
		w.settled("rc1", base, 3*time.Minute)
		stopGracefully(t, x.Proc())
		done, undone := w.moveEnds()
		key := strings.TrimPrefix(mv.group, "g") + ":" + mv.from + ":" + mv.to
		o := outcomes[kind]
		if o == nil {
			o = &outcome{}
			outcomes[kind] = o
		}
		switch {
		case undone[key]:
			o.undone++
			t.Logf("run %d: the interrupted move was undone", run+1)
		case done[key]:
			o.done++
			t.Logf("run %d: the interrupted move finished", run+1)
		default:
			o.unknown++
			t.Errorf("run %d: the move of %s %s -> %s neither finished nor was undone, as the nodes' logs show", run+1, mv.group, mv.from, mv.to)
		}
		l.goesOn(t, time.Second)
	}
	l.Stop()
	for _, kind := range []string{"source", "destination", "metadata leader"} {
		if o := outcomes[kind]; o != nil {
			t.Logf("%s killed mid-move, %d runs: %d moves finished, %d undone, %d neither", kind, o.done+o.undone+o.unknown, o.done, o.undone, o.unknown)
		}
	}
	w.checkPromotions()
	checkReplicaCampaign(t, l, []int{0, 1, 2})
}

// startResizeLoad starts a campaign's pipelined load into QUICMQ_<name>_TOPICS topics
// (default 1000) at QUICMQ_<name>_RATE publishes/s (default 1000), warmed up, stopped at
// the test's end.
func startResizeLoad(t *testing.T, r *nodeproc.Region, name, through string) *replicaLoad {
	t.Helper()
	l := newReplicaLoad(r, envInt("QUICMQ_"+name+"_TOPICS", 1000), envInt("QUICMQ_"+name+"_RATE", 1000))
	t.Logf("%d topics at %d publishes/s %s", len(l.topics), l.rate, through)
	l.warmUp(t)
	l.run(2)
	t.Cleanup(l.Stop)
	return l
}
