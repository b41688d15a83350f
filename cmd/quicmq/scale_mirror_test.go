package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestScaleMirrorManyTopics measures figure 1 of issue 34 on real node processes, on
// demand: two regions of one node each (us, eu), both --mirror 'm.>', and a third node
// (solo, its own gossip pool, no mirroring) that is published the same topics. QUICMQ_SCALE_TOPICS
// topics are created at us (and at solo) by one publish each, pipelined from one SDK
// client; the test reports the time until eu lists them all, then, after
// QUICMQ_SCALE_SETTLE seconds (default 10: mirrors park after 5 s of quiet, and eu collects
// the catch-up's garbage and returns it to the OS as its last mirror parks), each node's CPU over
// QUICMQ_SCALE_WINDOW seconds (default 10, /proc/PID/stat) and its RSS; then a record to a
// parked topic, and a publisher under load (mirrorUnderLoad).
//
//	QUICMQ_SCALE_TOPICS=100000 go test -run TestScaleMirrorManyTopics -v -timeout 30m ./cmd/quicmq
//
// QUICMQ_SCALE_STREAMS sets --mirror-streams (default: the node's default, 1024);
// QUICMQ_SCALE_BIN runs the nodes from another build of quicmq (a comparison);
// QUICMQ_SCALE_FAULT=kill-eu, kill-us or cut-eu adds killUnderLoad (cut-eu: root and nft).
func TestScaleMirrorManyTopics(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("QUICMQ_SCALE_TOPICS"))
	if n <= 0 {
		t.Skip("on demand: set QUICMQ_SCALE_TOPICS (e.g. 100000)")
	}
	settle := time.Duration(envIntT("QUICMQ_SCALE_SETTLE", 10)) * time.Second
	window := time.Duration(envIntT("QUICMQ_SCALE_WINDOW", 10)) * time.Second
	var extra []string
	if s := os.Getenv("QUICMQ_SCALE_STREAMS"); s != "" {
		extra = []string{"--mirror-streams", s}
	}
	if os.Getenv("QUICMQ_SCALE_PPROF") != "" { // profiles of us and eu, e.g. while QUICMQ_SCALE_HOLD holds them
		extra = append(extra, "--metrics", "127.0.0.1:0", "--pprof")
	}
	bin := quicmqBinary(t)
	if b := os.Getenv("QUICMQ_SCALE_BIN"); b != "" { // another build's nodes, to compare in the same conditions
		bin = b
	}
	caDir := t.TempDir()
	usWAN := freeAddr(t)
	// us listens on a fixed port (the later --listen wins), so that a publisher reconnects
	// to it after a restart (killUnderLoad).
	usListen, usGossip, euGossip, euWAN := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	usArgs := append([]string{"--listen", usListen, "--data", t.TempDir(), "--region", "us", "--ca-dir", caDir,
		"--gossip", usGossip, "--wan", usWAN, "--mirror", "m.>"}, extra...)
	us := startMeshProcess(t, bin, "us1", usArgs...)
	euArgs := append([]string{"--data", t.TempDir(), "--region", "eu", "--ca-dir", caDir,
		"--gossip", euGossip, "--wan", euWAN, "--wan-join", usWAN, "--mirror", "m.>"}, extra...)
	eu := startMeshProcess(t, bin, "eu1", euArgs...)
	// The ports that stay a node's own for its life (cut-eu: nodeproc.Isolate).
	fixedPorts := func(addrs ...string) []int {
		var ps []int
		for _, a := range addrs {
			ps = append(ps, nodeproc.AddrPort(t, a))
		}
		return ps
	}
	// solo runs gossip (its own pool, no WAN) and a federation with no peer, as us and eu do.
	solo := startMeshProcess(t, bin, "solo1", "--data", t.TempDir(), "--region", "solo", "--ca-dir", caDir, "--gossip", freeAddr(t))
	usConn, euConn, soloConn := dialPatient(t, us.Addr, caDir), dialPatient(t, eu.Addr, caDir), dialPatient(t, solo.Addr, caDir)
	// The link is up once a topic created at us is listed at eu.
	if _, err := usConn.Publish(context.Background(), client.Message{Topic: "m.hello", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	listed := func(c *client.Conn) int {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		count := 0
		err := c.TopicsEach(ctx, "m.>", func(client.TopicInfo) error { count++; return nil })
		if err != nil {
			t.Logf("listing: %v", err)
			if c == euConn && strings.Contains(err.Error(), "lost") { // a node starved of CPU on a loaded machine: dial again
				euConn = dialPatient(t, eu.Addr, caDir)
			}
			return -1
		}
		return count
	}
	testlog.WaitForErr(t, 60*time.Second, "the link to come up", atMost(100*time.Millisecond, func() error {
		if listed(euConn) >= 1 {
			return nil
		}
		return fmt.Errorf("us:\n%s\neu:\n%s", us.Tail(), eu.Tail())
	}))

	name := func(i int) string { return fmt.Sprintf("m.t%06d", i) }
	publishAll := func(c *client.Conn) time.Duration {
		start := time.Now()
		ctx := context.Background()
		futures := make(chan *client.Future, 4096)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range futures {
				if _, err := f.Wait(ctx); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
		}()
		for i := range n {
			f, err := c.PublishAsync(ctx, client.Message{Topic: name(i), Payload: []byte("first")})
			if err != nil {
				t.Fatalf("publish %s: %v", name(i), err)
			}
			futures <- f
		}
		close(futures)
		wg.Wait()
		return time.Since(start)
	}
	created := publishAll(usConn)
	createdAt := time.Now()
	want := n + 1 // m.hello too
	testlog.WaitForErr(t, 10*time.Minute, fmt.Sprintf("eu to list %d topics", want), atMost(250*time.Millisecond, func() error {
		if got := listed(euConn); got < want {
			return fmt.Errorf("eu lists %d\neu:\n%s", got, eu.Tail())
		}
		return nil
	}))
	allListed := time.Since(createdAt)
	t.Logf("%d topics created at us in %v; all listed at eu %v after the last was acknowledged (%.1f s from the first publish)",
		n, created.Round(time.Millisecond), allListed.Round(time.Millisecond), (created + allListed).Seconds())
	soloCreated := publishAll(soloConn)
	t.Logf("the same %d topics created at solo (no mirroring) in %v", n, soloCreated.Round(time.Millisecond))

	testlog.Pause(context.Background(), settle) // quiet, so that every mirror parks (MirrorParkAfter 5 s): not a wait for an event
	procs := []*nodeproc.Process{us, eu, solo}
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu0[i] = procCPU(t, p.Pid())
	}
	t0 := time.Now()
	testlog.Pause(context.Background(), window) // the measurement window
	elapsed := time.Since(t0).Seconds()
	for i, p := range procs {
		cpu := procCPU(t, p.Pid()) - cpu0[i]
		mem := procMemory(t, p.Pid())
		t.Logf("%-5s idle CPU %.2f%% of a core over %.0f s; RSS %.0f MiB (peak %.0f MiB)", p.Name, cpu.Seconds()/elapsed*100, elapsed, mem.rss, mem.hwm)
	}
	// A record published now to a parked topic reaches eu (the head notice reopens it).
	late := name(n / 2)
	ack, err := usConn.Publish(context.Background(), client.Message{Topic: late, Payload: []byte("late")})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testlog.WaitFor(t, 30*time.Second, fmt.Sprintf("a record published to parked %s (offset %d) to reach eu", late, ack.Offset), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		next, err := topicNext(ctx, euConn, late)
		return err == nil && next > 1
	})
	t.Logf("a record published to a parked topic was mirrored at eu within %v", time.Since(start).Round(time.Millisecond))
	mirrorUnderLoad(t, usConn, euConn, n, name)
	switch f := os.Getenv("QUICMQ_SCALE_FAULT"); f {
	case "":
	case "kill-eu":
		eu = killUnderLoad(t, f, us, eu, func() *nodeproc.Process { return startMeshProcess(t, bin, "eu1", euArgs...) }, caDir, n, name)
	case "kill-us":
		us = killUnderLoad(t, f, us, eu, func() *nodeproc.Process { return startMeshProcess(t, bin, "us1", usArgs...) }, caDir, n, name)
	case "cut-eu":
		cut := func() *nodeproc.Isolation {
			return nodeproc.Isolate(t, fixedPorts(eu.Addr, euGossip, euWAN), fixedPorts(usListen, usGossip, usWAN), []int{us.Pid()})
		}
		killUnderLoad(t, f, us, eu, func() *nodeproc.Process {
			iso := cut()
			t.Logf("eu cut off from us (nftables drops, both ways) under load")
			testlog.Pause(context.Background(), 30*time.Second) // cut for 30 s
			t.Logf("%d packets dropped; the link heals", iso.Dropped())
			iso.Heal()
			return eu
		}, caDir, n, name)
	default:
		t.Fatalf("QUICMQ_SCALE_FAULT=%q: want kill-eu, kill-us or cut-eu", f)
	}
	if hold := envIntT("QUICMQ_SCALE_HOLD", 0); hold > 0 {
		t.Logf("holding the nodes for %d s (pids us %d, eu %d, solo %d)", hold, us.Pid(), eu.Pid(), solo.Pid())
		testlog.Pause(context.Background(), time.Duration(hold)*time.Second) // for a profile by hand
	}
}

// mirrorUnderLoad publishes QUICMQ_SCALE_RATE records/s (default 1000) for
// QUICMQ_SCALE_SECONDS (default 10) at us, each to a random topic of the n (a seeded
// schedule), and reads them at eu through one subscription to m.> from its set-up on: every
// record must arrive exactly once and in order per topic; it reports the mirror delay (the
// publish's send time to eu's delivery, one clock) at p50, p99 and max.
func mirrorUnderLoad(t *testing.T, usConn, euConn *client.Conn, n int, name func(int) string) {
	rate := envIntT("QUICMQ_SCALE_RATE", 1000)
	secs := envIntT("QUICMQ_SCALE_SECONDS", 10)
	rng := testlog.Rand(t, "the topics published to under load")
	sub, err := euConn.Subscribe(context.Background(), "m.>", client.SubscribeOptions{From: client.Latest})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	type key struct {
		topic string
		off   uint64
	}
	var (
		mu     sync.Mutex
		delays []time.Duration
		// appendDelays: the publish's send to eu's append; deliverDelays: eu's append to
		// the delivery.
		appendDelays, deliverDelays []time.Duration
		seen                        = make(map[key]bool)
		last                        = make(map[string]uint64)
		dups                        int
		reorder                     int
	)
	got := make(chan struct{}, 1)
	go func() {
		for {
			rec, err := sub.Next(context.Background())
			if err != nil {
				return
			}
			if rec.OriginRegion != "us" || !strings.HasPrefix(string(rec.Payload), "load-") {
				continue
			}
			sent, _ := strconv.ParseInt(strings.TrimPrefix(string(rec.Payload), "load-"), 10, 64)
			d := time.Since(time.Unix(0, sent))
			// Where it went: to eu's append (rec.Time, eu's clock: the same host), and from
			// there to the delivery (eu's fsync and the subscription).
			toAppend, toDeliver := rec.Time.Sub(time.Unix(0, sent)), time.Since(rec.Time)
			mu.Lock()
			appendDelays, deliverDelays = append(appendDelays, toAppend), append(deliverDelays, toDeliver)
			k := key{rec.Topic, rec.OriginOffset}
			if seen[k] {
				dups++
			}
			seen[k] = true
			if prev, ok := last[rec.Topic]; ok && rec.OriginOffset <= prev {
				reorder++
			}
			last[rec.Topic] = rec.OriginOffset
			delays = append(delays, d)
			mu.Unlock()
			select {
			case got <- struct{}{}:
			default:
			}
		}
	}()
	testlog.Pause(context.Background(), 2*time.Second) // the subscription's set-up over the n topics: not a wait for an event we can observe here
	total := rate * secs
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	futures := make([]*client.Future, 0, total)
	for range total {
		<-tick.C
		f, err := usConn.PublishAsync(context.Background(), client.Message{Topic: name(rng.IntN(n)),
			Payload: fmt.Appendf(nil, "load-%d", time.Now().UnixNano())})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		if _, err := f.Wait(context.Background()); err != nil {
			t.Fatalf("publish under load: %v", err)
		}
	}
	deadline := time.After(60 * time.Second)
	for {
		mu.Lock()
		have := len(seen)
		mu.Unlock()
		if have >= total {
			break
		}
		select {
		case <-got:
		case <-deadline:
			t.Fatalf("%d of %d records published under load reached eu within 60 s", have, total)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if dups > 0 || reorder > 0 || len(seen) != total {
		t.Fatalf("under load: %d records, %d distinct (want %d), %d duplicates, %d out of order", len(delays), len(seen), total, dups, reorder)
	}
	slices.Sort(delays)
	slices.Sort(appendDelays)
	slices.Sort(deliverDelays)
	q := func(ds []time.Duration, p float64) time.Duration {
		return ds[int(p*float64(len(ds)-1))].Round(time.Millisecond)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d records at %d/s over random topics of %d: all at eu exactly once, in order per topic; mirror delay p50 %v, p99 %v, max %v (load %.14s)",
		total, rate, n, q(delays, 0.5), q(delays, 0.99), delays[len(delays)-1].Round(time.Millisecond), load)
	t.Logf("  of which send to eu's append p50 %v, p99 %v; eu's append to delivery p50 %v, p99 %v",
		q(appendDelays, 0.5), q(appendDelays, 0.99), q(deliverDelays, 0.5), q(deliverDelays, 0.99))
}

// killUnderLoad publishes 1,000 records/s at us for 20 s, each to a random topic of the n
// (seeded), from a connection that reconnects and resends idempotently; it kills eu or us
// (fault kill-eu, kill-us) with SIGKILL 5 s in and restarts it on its data 5 s later
// (restart), or (cut-eu) has restart cut eu off from us for 30 s from 5 s in and heal it,
// then reports how long after the return eu's log of every topic matches us's,
// and checks that it does: eu publishes nothing, so each topic's log at eu holds exactly us's
// records (a mirror refuses a record out of order), and a next offset at eu above us's would
// be a duplicate, below it a loss. It returns the restarted node.
func killUnderLoad(t *testing.T, fault string, us, eu *nodeproc.Process, restart func() *nodeproc.Process, caDir string, n int, name func(int) string) *nodeproc.Process {
	rng := testlog.Rand(t, "the topics published to around the kill")
	ctx := context.Background()
	heads := func(c *client.Conn) map[string]uint64 {
		out := make(map[string]uint64, n)
		lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := c.TopicsEach(lctx, "m.>", func(ti client.TopicInfo) error { out[ti.Name] = ti.Next; return nil }); err != nil {
			return nil
		}
		return out
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	pub, err := client.Dial(dctx, client.Options{CAFile: filepath.Join(caDir, "ca.pem"), IdleTimeout: 30 * time.Second, Reconnect: true, Idempotent: true}, us.Addr)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	futures := make(chan *client.Future, 30000)
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		defer close(futures)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for range 20000 {
			<-tick.C
			f, err := pub.PublishAsync(ctx, client.Message{Topic: name(rng.IntN(n)), Payload: []byte("fault")})
			if err != nil {
				t.Errorf("publish around the kill: %v", err)
				return
			}
			futures <- f
		}
	}()
	victim := eu
	if fault == "kill-us" {
		victim = us
	}
	testlog.Pause(context.Background(), 5*time.Second) // the fault schedule: the load's first 5 s
	what := fmt.Sprintf("%s killed 5 s in and back 5 s later", victim.Name)
	if fault == "cut-eu" {
		what = "the link cut 5 s in for 30 s"
	} else {
		victim.Kill()
		t.Logf("%s killed (SIGKILL) under load", victim.Name)
		testlog.Pause(context.Background(), 5*time.Second) // the fault schedule: down for 5 s
	}
	victim = restart() // cut-eu: the cut, healed
	back := time.Now()
	if fault != "cut-eu" {
		t.Logf("%s restarted on its data (listening after %v)", victim.Name, victim.Listen.Round(time.Millisecond))
	}
	if fault == "kill-us" {
		us = victim
	} else {
		eu = victim
	}
	<-pubDone
	dups := 0
	for f := range futures {
		ack, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("publish around the kill: %v", err)
		}
		if ack.Duplicate {
			dups++
		}
	}
	acked := time.Since(back) // the publisher's backlog (it waited while us was down) is in by now
	want := heads(dialPatient(t, us.Addr, caDir))
	if want == nil {
		t.Fatal("us's listing failed after the load")
	}
	euConn := dialPatient(t, eu.Addr, caDir)
	testlog.WaitForErr(t, 5*time.Minute, fmt.Sprintf("eu's logs equal to us's after %s's restart", victim.Name), atMost(500*time.Millisecond, func() error {
		got := heads(euConn)
		diff := ""
		if got != nil {
			for topic, next := range want {
				if got[topic] != next {
					diff = fmt.Sprintf("%s: eu next %d, us next %d", topic, got[topic], next)
					if got[topic] > next {
						t.Fatalf("duplicate at eu after the kill: %s", diff)
					}
					break
				}
			}
		}
		if got != nil && diff == "" {
			return nil
		}
		return fmt.Errorf("%s\neu:\n%s", diff, eu.Tail())
	}))
	t.Logf("20,000 records at 1,000/s with %s (%d publishes resent and found stored): every topic at eu equal to us's (none lost or duplicated) %v after the return; the last publish was acknowledged %v after it (load %s)",
		what, dups, time.Since(back).Round(100*time.Millisecond), acked.Round(100*time.Millisecond), loadAvg())
	return victim
}

// dialPatient dials as dialCA, with a 30 s idle timeout: on the 2 shared cores a node busy
// with 100,000 topics can be starved of CPU for seconds, which is not what the test measures.
func dialPatient(t *testing.T, addr, caDir string) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, client.Options{CAFile: filepath.Join(caDir, "ca.pem"), IdleTimeout: 30 * time.Second}, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func envIntT(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// atMost returns cond looked at no more often than every d (a listing of 100,000 topics per
// look is heavy beside what is measured); between two looks it answers as it did last.
func atMost(d time.Duration, cond func() error) func() error {
	var asked time.Time
	last := errors.New("not looked at yet")
	return func() error {
		if time.Since(asked) < d {
			return last
		}
		asked = time.Now()
		last = cond()
		return last
	}
}
