package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/campaign"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/routing"
)

// Campaign 2 (docs/reliability.md): the kill -9 loop. Three regions of two real `quicmq
// node` processes each, one mesh CA, every node mirroring c2.>. Producers with unique ids
// publish sequence-numbered records to a set of topics through random nodes; every ack is
// recorded. Random nodes are killed with SIGKILL and restarted at once on the same data
// directory and gossip addresses. At the end, once every region holds the same number of
// records of each topic, every region's logs are read back and judged by campaign.Check (internal/campaign):
// nothing acknowledged lost, nothing stored twice, no two records at one offset, every
// record of every region mirrored to every other region exactly once.
//
// QUICMQ_CAMPAIGN_KILLS sets the number of kills (default 3), QUICMQ_CAMPAIGN_RATE the
// publish rate in records/s (default 2000), QUICMQ_CAMPAIGN_TOPICS the topics (default 8).
func TestCampaignKill9Loop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills six node processes")
	}
	t.Parallel()
	campaignKill9(t, 1, envInt("QUICMQ_CAMPAIGN_RATE", 2000))
}

// TestCampaignKill9LoopReplicated is the kill -9 loop on two regions of three nodes started
// with --replicas 3: each topic's log is a raft group in each region, a kill often takes a
// group's leader (the mirror on either side moves to the new leader), and mirroring must stay
// exactly once while leaders change on both sides (issue 13). Rate default 1000 records/s.
func TestCampaignKill9LoopReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills six node processes")
	}
	t.Parallel()
	campaignKill9(t, 3, envInt("QUICMQ_CAMPAIGN_RATE", 1000))
}

func campaignKill9(t *testing.T, replicas, rate int) {
	kills := envInt("QUICMQ_CAMPAIGN_KILLS", 3)
	nTopics := envInt("QUICMQ_CAMPAIGN_TOPICS", 8)
	const producers = 8
	// The mesh: names, data directories and gossip addresses fixed for the whole run.
	regions, perRegion := []string{"eu", "us", "ap"}, 2
	switch replicas {
	case 1:
	case 3:
		regions, perRegion = []string{"eu", "us"}, 3
	default:
		t.Fatalf("replicas %d: want 1 (3 regions of 2 single-copy nodes) or 3 (2 regions of 3 replicas)", replicas)
	}
	t.Logf("%d regions of %d nodes, --replicas %d", len(regions), perRegion, replicas)
	members := func(region string) []string {
		var names []string
		for i := 1; i <= perRegion; i++ {
			names = append(names, fmt.Sprintf("%s%d", region, i))
		}
		return names
	}
	m := newTestMesh(t, quicmqBinary(t), regions, func(string) int { return perRegion }, func(string) []string { return []string{"--mirror", "c2.>"} })
	for _, r := range m.Regions {
		r.Replicas = 0
		if replicas > 1 {
			r.Replicas = replicas
		}
	}
	caDir := m.Regions[0].CADir
	// specs are the nodes of every region in one list, the kill loop's choice; a node's
	// current process is its Proc (a restart replaces it while the publishers read it).
	type nodeSpec struct {
		name, region string
		r            *nodeproc.Region
		i            int // in r.Nodes
	}
	var specs []*nodeSpec
	for _, r := range m.Regions {
		for i, n := range r.Nodes {
			specs = append(specs, &nodeSpec{name: n.Name, region: r.Name, r: r, i: i})
		}
	}
	proc := func(i int) *nodeproc.Process { return specs[i].r.Nodes[specs[i].i].Proc() }
	procs := make([]*nodeproc.Process, len(specs))
	for i, s := range specs {
		procs[i] = s.r.Start(s.i)
	}
	// Topics are placed over the members known when they are created: wait until every node
	// has its links up (to its sibling and to the other regions) before publishing.
	for i, p := range procs {
		deadline := time.After(30 * time.Second)
		for n := 0; n < len(specs)-1; n++ {
			select {
			case <-p.LinkUp():
			case <-deadline:
				t.Fatalf("%s: only %d of %d links up within 30 s\n%s", specs[i].name, n, len(specs)-1, p.Tail())
			}
		}
	}
	meshUp := time.Now()

	var topics []string
	for i := range nTopics {
		topics = append(topics, fmt.Sprintf("c2.t%d", i))
	}
	// owned[name] lists the topics each node owns in its region, as every node computes it.
	// Replicated topics have no owner: every replica serves them (owned stays empty and the
	// probe after a kill publishes to the first topic through the restarted node).
	owned := map[string][]string{}
	for _, tp := range topics {
		if replicas > 1 {
			break
		}
		for _, r := range regions {
			o := routing.Owner(tp, members(r))
			owned[o] = append(owned[o], tp)
		}
	}

	// The recorder: every ack with the region of the node that gave it.
	var ackMu sync.Mutex
	var acks []campaign.Ack
	record := func(region, topic string, offset uint64, k campaign.Key) {
		ackMu.Lock()
		acks = append(acks, campaign.Ack{Region: region, Topic: topic, Offset: offset, Key: k})
		ackMu.Unlock()
	}
	var seqs [producers + 1]atomic.Uint64 // the last is the recovery probe's producer
	producerID := func(p int) string {
		if p == producers {
			return "probe"
		}
		return fmt.Sprintf("p%d", p)
	}
	var unavailable, broken, sessions, timedOut, retried, duplicates atomic.Int64
	const answerWithin = 3 * time.Second
	var slowMu sync.Mutex
	var slowest time.Duration
	var slowestWhat string
	noteSlow := func(d time.Duration, what string) {
		slowMu.Lock()
		if d > slowest {
			slowest, slowestWhat = d, what
		}
		slowMu.Unlock()
	}
	var errMu sync.Mutex
	errSamples := map[string]int{} // failed publishes by error text (offsets and names cut)
	noteErr := func(err error) {
		msg := err.Error()
		if len(msg) > 90 {
			msg = msg[:90]
		}
		errMu.Lock()
		errSamples[msg]++
		errMu.Unlock()
	}
	dial := func(i int) (*client.Conn, error) {
		addr := proc(i).Addr
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return client.Dial(ctx, client.Options{CAFile: filepath.Join(caDir, "ca.pem")}, addr)
	}

	// Producers: each publishes rate/producers records/s, pipelined, through a random node of
	// its region; when its connection breaks it moves to another random node of the region. A
	// publish refused as unavailable (its owner is down) is not stored and not acknowledged. A
	// publish whose outcome is unknown (unanswered within 3 s, or its connection broke) may
	// have been stored: it is published again, same topic, producer and sequence, at the start
	// of the next session, until it is answered. The node's de-duplication must then answer it
	// with the offset of the stored copy (the judge checks the acked offset against the log
	// and counts every (producer, sequence) stored twice). Retries stay in the region: a copy
	// published in another region is another region's record, which de-duplication does not
	// cover (docs/architecture.md, "Idempotent publish").
	type pending struct {
		f     *client.Future
		topic string
		k     campaign.Key
		sent  time.Time
	}
	pubCtx, stopPub := context.WithCancel(context.Background())
	var pubWG sync.WaitGroup
	for p := range producers {
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 42))
			perTick := max(1, rate/producers/100)
			home := regions[p%len(regions)]
			var nodes []int // the indexes of specs in the producer's region
			for i, s := range specs {
				if s.region == home {
					nodes = append(nodes, i)
				}
			}
			var retryMu sync.Mutex
			var retry []pending // outcome unknown: published again in the next session
			for pubCtx.Err() == nil {
				node := nodes[rng.IntN(len(nodes))]
				conn, err := dial(node)
				if err != nil {
					testlog.Pause(pubCtx, 100*time.Millisecond) // a retry's back-off
					continue
				}
				sessions.Add(1)
				region := specs[node].region
				futures := make(chan pending, 4096)
				var sessionBroken atomic.Bool
				readerDone := make(chan struct{})
				go func() {
					defer close(readerDone)
					for pd := range futures {
						ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
						ack, err := pd.f.Wait(ctx)
						cancel()
						noteSlow(time.Since(pd.sent), fmt.Sprintf("publish %v to %s through %s (region owner %s), sent %v after the mesh was up: err %v",
							pd.k, pd.topic, specs[node].name, routing.Owner(pd.topic, members(region)), pd.sent.Sub(meshUp).Round(time.Millisecond), err))
						var ce *client.Error
						unknown := false
						switch {
						case err == nil:
							record(region, pd.topic, ack.Offset, pd.k)
							if ack.Duplicate {
								duplicates.Add(1)
							}
						case errors.As(err, &ce) && ce.Code == client.CodeUnavailable:
							unavailable.Add(1)
							noteErr(err)
						case errors.Is(err, context.DeadlineExceeded):
							// The node is probably dead: a client learns it only from QUIC's
							// idle timeout (30 s), so give up on the connection as an
							// application would and move on (this publish may be stored).
							timedOut.Add(1)
							sessionBroken.Store(true)
							conn.Close()
							unknown = true
						default:
							if pubCtx.Err() == nil {
								noteErr(err)
							}
							sessionBroken.Store(true)
							// A refusal by the node stored nothing; anything else may have.
							unknown = errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &ce)
						}
						if unknown && pubCtx.Err() == nil {
							retryMu.Lock()
							retry = append(retry, pd)
							retryMu.Unlock()
						}
					}
				}()
				// First the publishes of earlier sessions whose outcome is unknown, in order.
				retryMu.Lock()
				again := retry
				retry = nil
				retryMu.Unlock()
				for i, pd := range again {
					f, err := conn.PublishAsync(pubCtx, client.Message{Topic: pd.topic, Payload: []byte(campaign.Payload(pd.k)), ProducerID: pd.k.Producer, Sequence: pd.k.Seq})
					if err != nil {
						sessionBroken.Store(true)
						retryMu.Lock()
						retry = append(retry, again[i:]...)
						retryMu.Unlock()
						break
					}
					retried.Add(1)
					futures <- pending{f, pd.topic, pd.k, time.Now()}
				}
				tick := time.NewTicker(10 * time.Millisecond)
				for pubCtx.Err() == nil && !sessionBroken.Load() {
					<-tick.C
					for range perTick {
						k := campaign.Key{Producer: producerID(p), Seq: seqs[p].Add(1) - 1}
						topic := topics[rng.IntN(len(topics))]
						f, err := conn.PublishAsync(pubCtx, client.Message{Topic: topic, Payload: []byte(campaign.Payload(k)), ProducerID: k.Producer, Sequence: k.Seq})
						if err != nil {
							sessionBroken.Store(true)
							break
						}
						futures <- pending{f, topic, k, time.Now()}
					}
				}
				tick.Stop()
				close(futures)
				<-readerDone
				conn.Close()
				if sessionBroken.Load() {
					broken.Add(1)
				}
			}
		}()
	}
	defer func() { stopPub(); pubWG.Wait() }()

	// The kill loop: a random node every 1-3 s, restarted at once; its recovery time is from
	// the kill to the first record acknowledged through it on a topic it owns.
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	var recoveries []time.Duration
	killCount := map[string]int{}
	for k := range kills {
		testlog.Pause(context.Background(), time.Second+time.Duration(rng.IntN(2000))*time.Millisecond) // the kill schedule
		i := rng.IntN(len(specs))
		s := specs[i]
		proc(i).Kill()
		killed := time.Now()
		p := s.r.Start(s.i)
		killCount[s.name]++
		probeTopic := topics[0]
		if len(owned[s.name]) > 0 {
			probeTopic = owned[s.name][0]
		}
		testlog.WaitForErr(t, 60*time.Second, fmt.Sprintf("kill %d: %s serving %s", k, s.name, probeTopic), func() error {
			conn, err := dial(i)
			if err != nil {
				return fmt.Errorf("%w\n%s", err, p.Tail())
			}
			key := campaign.Key{Producer: "probe", Seq: seqs[producers].Add(1) - 1}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			ack, err := conn.Publish(ctx, client.Message{Topic: probeTopic, Payload: []byte(campaign.Payload(key)), ProducerID: key.Producer, Sequence: key.Seq})
			cancel()
			conn.Close()
			if err != nil {
				return fmt.Errorf("%w\n%s", err, p.Tail())
			}
			record(s.region, probeTopic, ack.Offset, key)
			return nil
		})
		rec := time.Since(killed)
		recoveries = append(recoveries, rec)
		role := fmt.Sprintf("owner of %v", owned[s.name])
		if replicas > 1 {
			role = "a replica of every topic"
		}
		t.Logf("kill %d at %v: %s (%s) killed, restarted, serving its topics again %v after the kill (listening %v after exec)",
			k, killed.Sub(meshUp).Round(time.Millisecond), s.name, role, rec.Round(time.Millisecond), p.Listen.Round(time.Millisecond))
	}
	testlog.Pause(context.Background(), 2*time.Second) // the schedule: 2 s of publishing after the last kill
	stopPub()
	pubTime := time.Since(meshUp)
	pubWG.Wait()
	pubStopped := time.Now()
	t.Logf("publishers stopped; their last acks arrived %v later", pubStopped.Sub(meshUp.Add(pubTime)).Round(time.Millisecond))

	// Convergence: every region holds the same number of records of every topic (each
	// region's log has every region's records) and the count stays put.
	conns := map[string]*client.Conn{}
	for i, s := range specs {
		if _, ok := conns[s.region]; !ok {
			conns[s.region] = dialCA(t, proc(i).Addr, caDir)
		}
	}
	counts := func(ctx context.Context) (map[string]map[string]uint64, error) {
		out := map[string]map[string]uint64{}
		for _, r := range regions {
			out[r] = map[string]uint64{}
			for _, tp := range topics {
				n, err := topicNext(ctx, conns[r], tp)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", r, tp, err)
				}
				out[r][tp] = n
			}
		}
		return out, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var last map[string]map[string]uint64
	var converge time.Duration
	var putSince time.Time
	var c map[string]map[string]uint64
	testlog.Until(ctx, func() bool {
		var err error
		c, err = counts(ctx)
		if err != nil {
			t.Fatalf("convergence: %v", err)
		}
		equal := true
		for _, tp := range topics {
			for _, r := range regions {
				equal = equal && c[r][tp] == c[regions[0]][tp]
			}
		}
		if fmt.Sprint(c) != fmt.Sprint(last) {
			last, putSince = c, time.Now()
		}
		if equal && converge == 0 {
			converge = time.Since(pubStopped)
		}
		if !equal {
			converge = 0
		}
		return equal && time.Since(putSince) >= 200*time.Millisecond
	})
	if ctx.Err() != nil {
		t.Fatalf("regions did not converge within 120 s: %v", c)
	}

	// Read every region's log of every topic from offset 0 and judge.
	logs := map[string]map[string][]campaign.Rec{}
	for _, r := range regions {
		logs[r] = map[string][]campaign.Rec{}
		for _, tp := range topics {
			logs[r][tp] = readLog(t, ctx, conns[r], tp, last[r][tp])
		}
	}
	attempted := map[string]uint64{}
	for p := range seqs {
		attempted[producerID(p)] = seqs[p].Load()
	}
	report := campaign.Check(acks, logs, attempted)
	slices.Sort(recoveries)
	pct := func(q float64) time.Duration {
		return recoveries[min(len(recoveries)-1, int(q*float64(len(recoveries))))].Round(time.Millisecond)
	}
	var attempts uint64
	for _, n := range attempted {
		attempts += n
	}
	t.Logf("%d kills %v over %v of publishing; %d publishes attempted (%.0f/s), %d acknowledged, %d refused as unavailable, %d unanswered after %v, %d sessions (%d ended by an error)",
		kills, killCount, pubTime.Round(time.Second), attempts, float64(attempts)/pubTime.Seconds(), len(acks), unavailable.Load(), timedOut.Load(), answerWithin, sessions.Load(), broken.Load())
	t.Logf("%d publishes of unknown outcome published again (same producer and sequence), %d of them answered as duplicates of a stored copy", retried.Load(), duplicates.Load())
	t.Logf("publish errors: %v", errSamples)
	t.Logf("slowest answer to a publish: %v: %s", slowest.Round(time.Millisecond), slowestWhat)
	if len(recoveries) > 0 {
		t.Logf("recovery (kill -> restarted node acknowledging its own topic): p50 %v, p99 %v, max %v", pct(0.5), pct(0.99), pct(1))
	}
	t.Logf("converged %v after publishing stopped (every region: the same count of every topic)", converge.Round(time.Millisecond))
	t.Logf("judge: %v", report)
	if !report.OK() {
		t.Fatal("campaign 2 failed the judge")
	}
}

// readLog reads a region's whole log of topic (n records) through conn.
func readLog(t *testing.T, ctx context.Context, conn *client.Conn, topic string, n uint64) []campaign.Rec {
	t.Helper()
	if n == 0 {
		return nil
	}
	sub, err := conn.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	defer sub.Close()
	out := make([]campaign.Rec, 0, n)
	for uint64(len(out)) < n {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("reading %s after %d of %d records: %v", topic, len(out), n, err)
		}
		out = append(out, campaign.Rec{Offset: rec.Offset, OriginRegion: rec.OriginRegion, OriginOffset: rec.OriginOffset,
			Producer: rec.ProducerID, Seq: rec.Sequence, Payload: string(rec.Payload)})
	}
	return out
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
