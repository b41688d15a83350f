package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// Issue 31's consumer, with the client's defaults only: a durable subscriber at home in eu
// with us as its failover region (what `quicmq sub --server EU --failover US --durable d
// --topic x.t` dials: Reconnect, Failover, nothing else), two real node processes mirroring
// x.t both ways, and a publisher in each region. Again and again, at a random moment, eu is
// SIGKILLed mid-stream and restarted on its data 4 s later. Each kill is measured twice:
//   - move: from the kill to the first record that us's publisher sent after the kill,
//     received by the subscriber (it can only come from us directly);
//   - back: from eu's return (its listener up) to the subscriber's connection being to eu
//     again (Stats().Region).
//
// At the end every acknowledged record of both regions has been received exactly once,
// each region's records in order. QUICMQ_FAILOVER_KILLS sets the number of kills (default
// 2, CI's short version; 20 for docs/benchmarks.md). It stays serial (no t.Parallel): it
// bounds the failover's time, which the parallel process tests' load pushed past 5 s.
func TestCampaignFailoverDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	kills := envInt("QUICMQ_FAILOVER_KILLS", 2)
	const downFor = 4 * time.Second
	rng := testlog.Rand(t, "the publishing time before each kill")
	regions := []string{"eu", "us"}
	m := newTestMesh(t, quicmqBinary(t), regions, nil, func(string) []string { return []string{"--mirror", "x.t"} })
	listen := map[string]string{}
	for _, r := range m.Regions {
		listen[r.Name] = r.Nodes[0].Listen
	}
	for _, r := range regions {
		m.Start(r)
	}
	ca := m.CAFile()

	// The publishers: one record at a time, "REGION-i"; what was acknowledged is recorded,
	// with when each record was sent.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type pubState struct {
		mu     sync.Mutex
		acked  map[int]bool
		sentAt []time.Time
	}
	pubs := map[string]*pubState{}
	var pubWG sync.WaitGroup
	for _, r := range regions {
		ps := &pubState{acked: map[int]bool{}}
		pubs[r] = ps
		conn, err := client.Dial(ctx, client.Options{CAFile: ca, Name: "pub-" + r, Reconnect: true, Idempotent: true}, listen[r])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			for i := 0; ctx.Err() == nil; i++ {
				ps.mu.Lock()
				ps.sentAt = append(ps.sentAt, time.Now())
				ps.mu.Unlock()
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := conn.Publish(pctx, client.Message{Topic: "x.t", Payload: fmt.Appendf(nil, "%s-%d", r, i)})
				pcancel()
				if err == nil {
					ps.mu.Lock()
					ps.acked[i] = true
					ps.mu.Unlock()
				}
				select { // ~200 records/s per region; a refused publish (eu down) waits as long
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
	}
	stopPublishers := sync.OnceFunc(func() { cancel(); pubWG.Wait() })
	defer stopPublishers()

	// The consumer, defaults only.
	sc, err := client.Dial(context.Background(), client.Options{CAFile: ca, Name: "failover-consumer", Reconnect: true,
		Failover: []string{listen["us"]}}, listen["eu"])
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sub, err := sc.Subscribe(context.Background(), "x.t", client.SubscribeOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		region string
		seq    int
		at     time.Time
	}
	recs := make(chan got, 1<<16)
	subCtx, subCancel := context.WithCancel(context.Background())
	subDone := make(chan error, 1)
	go func() {
		for {
			rec, err := sub.Next(subCtx)
			if err != nil {
				subDone <- err
				return
			}
			r, s, _ := strings.Cut(string(rec.Payload), "-")
			i, err := strconv.Atoi(s)
			if err != nil {
				subDone <- fmt.Errorf("payload %q", rec.Payload)
				return
			}
			recs <- got{r, i, time.Now()}
		}
	}()
	defer func() { subCancel(); <-subDone }()

	// The judge: every record once, each region in order.
	next := map[string]int{} // per region: the smallest sequence not received yet if in order
	seen := map[string]map[int]bool{"eu": {}, "us": {}}
	received := 0
	take := func(g got) {
		t.Helper()
		if seen[g.region][g.seq] {
			t.Fatalf("%s-%d received twice", g.region, g.seq)
		}
		if g.seq < next[g.region] {
			t.Fatalf("%s-%d received after %s-%d: out of order", g.region, g.seq, g.region, next[g.region]-1)
		}
		seen[g.region][g.seq], next[g.region] = true, g.seq+1
		received++
	}
	// until takes records until cond holds, failing after d.
	until := func(d time.Duration, what string, cond func(got) bool) got {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case g := <-recs:
				take(g)
				if cond(g) {
					return g
				}
			case err := <-subDone:
				t.Fatalf("%s: the subscription ended: %v", what, err)
			case <-deadline:
				t.Fatalf("%s: not within %v (received %d, next %v, on %s)", what, d, received, next, sc.Stats().Region)
			}
		}
	}
	// region waits for the consumer's connection to be to region (Stats().Region: looked at
	// every 5 ms), taking records meanwhile.
	region := func(want string, d time.Duration, what string) time.Time {
		t.Helper()
		deadline := time.After(d)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if sc.Stats().Region == want {
				return time.Now()
			}
			select {
			case g := <-recs:
				take(g)
			case err := <-subDone:
				t.Fatalf("%s: the subscription ended: %v", what, err)
			case <-tick.C:
			case <-deadline:
				t.Fatalf("%s: the consumer is on %s after %v", what, sc.Stats().Region, d)
			}
		}
	}
	sentAfter := func(r string, at time.Time) func(got) bool {
		return func(g got) bool {
			ps := pubs[r]
			ps.mu.Lock()
			defer ps.mu.Unlock()
			return g.region == r && g.seq < len(ps.sentAt) && ps.sentAt[g.seq].After(at)
		}
	}

	until(30*time.Second, "records of both regions flowing", func(got) bool { return next["eu"] > 50 && next["us"] > 50 })
	var moves, backs []time.Duration
	for k := range kills {
		run := time.Duration(300+rng.IntN(1200)) * time.Millisecond
		until(30*time.Second, fmt.Sprintf("kill %d: records flowing", k), sentAfter("eu", time.Now().Add(run)))
		killAt := time.Now()
		m.Kill("eu")
		g := until(20*time.Second, fmt.Sprintf("kill %d: a record sent to us after the kill", k), sentAfter("us", killAt))
		moves = append(moves, g.at.Sub(killAt))
		if sc.Stats().Region != "us" {
			t.Fatalf("kill %d: a record us's publisher sent after the kill arrived while the consumer is on %s", k, sc.Stats().Region)
		}
		until(20*time.Second, fmt.Sprintf("kill %d: eu's restart is due", k), func(got) bool { return time.Since(killAt) >= downFor })
		m.Start("eu")
		returned := time.Now()
		backAt := region("eu", 20*time.Second, fmt.Sprintf("kill %d: back home", k))
		backs = append(backs, backAt.Sub(returned))
		t.Logf("kill %d after %v of publishing: records from us %v after the kill; back on eu %v after its return",
			k, run, moves[k].Round(time.Millisecond), backs[k].Round(time.Millisecond))
	}

	// Fence: the publishers stop; every acknowledged record of both regions arrives.
	stopPublishers()
	missing := func() (n int, first string) {
		for _, r := range regions {
			ps := pubs[r]
			ps.mu.Lock()
			for i := range ps.sentAt {
				if ps.acked[i] && !seen[r][i] {
					if n == 0 {
						first = fmt.Sprintf("%s-%d", r, i)
					}
					n++
				}
			}
			ps.mu.Unlock()
		}
		return n, first
	}
	deadline := time.After(60 * time.Second)
	for n, first := missing(); n > 0; n, first = missing() {
		select {
		case g := <-recs:
			take(g)
		case err := <-subDone:
			t.Fatalf("fence: the subscription ended with %d acknowledged records missing (first %s): %v", n, first, err)
		case <-deadline:
			t.Fatalf("fence: %d acknowledged records never arrived (first %s)", n, first)
		}
	}
	acked := 0
	for _, r := range regions {
		acked += len(pubs[r].acked)
	}

	pct := func(d []time.Duration) (p50, p99 time.Duration) {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2], s[(len(s)*99+99)/100-1]
	}
	m50, m99 := pct(moves)
	b50, b99 := pct(backs)
	t.Logf("%d kills: records from us after the kill p50 %v p99 %v; back on eu after its return p50 %v p99 %v; %d acknowledged records of %d received, each once, in order",
		kills, m50.Round(time.Millisecond), m99.Round(time.Millisecond), b50.Round(time.Millisecond), b99.Round(time.Millisecond), acked, received)
	// Issue 31 asks for 3 s and 1 s; the bounds here leave room for a loaded 2-core machine
	// running the race detector, and still fail QUIC's old 30 s idle timeout at once.
	if m99 > 5*time.Second || b99 > 3*time.Second {
		t.Fatalf("p99 over the bounds (5 s to move, 3 s back): moves %v, backs %v", moves, backs)
	}
}
