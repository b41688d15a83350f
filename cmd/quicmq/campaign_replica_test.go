package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/campaign"
	"github.com/quicmq/quicmq/internal/linearize"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// The replicated-region campaigns (docs/reliability.md, "Replicated region"): three real
// `quicmq node --replicas 3` processes of one region on loopback, producers publishing
// pipelined idempotent records through random nodes, readers reading topics from offset 0
// at random nodes, a fault (campaign_replica_faults_test.go), and at the end every node's
// log read back; the whole history is judged by internal/linearize (porcupine and the
// campaign judge). This file is the harness: the region, the load, the final reads.

// The region is a nodeproc.Region of node processes (rc1, rc2, ...); names, data
// directories and gossip addresses are fixed for the whole run, so a node restarts as itself.

// startReplicaRegion starts n nodes with --replicas n and waits until every node has its
// links to the others up.
func startReplicaRegion(t *testing.T, bin string, n int) *nodeproc.Region {
	t.Helper()
	r := newReplicaRegion(t, bin, n)
	r.StartAll()
	return r
}

// newReplicaRegion names n nodes with --replicas n, their data directories and gossip
// addresses, and starts none (StartAll does); they run as startMeshProcess starts them.
func newReplicaRegion(t *testing.T, bin string, n int) *nodeproc.Region {
	t.Helper()
	r := nodeproc.NewRegion(t, bin, "rc", n)
	r.Options = meshOptions
	return r
}

// dialNode dials node i of r.
func dialNode(ctx context.Context, r *nodeproc.Region, i int) (*client.Conn, error) {
	p := r.Nodes[i].Proc()
	if p == nil {
		return nil, fmt.Errorf("%s not started yet", r.Nodes[i].Name) // a node a campaign starts later
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return client.Dial(ctx, client.Options{CAFile: r.CAFile()}, p.Addr)
}

// replicaLoad is the campaign's traffic, every operation recorded in hist.
type replicaLoad struct {
	r         *nodeproc.Region
	hist      *linearize.History
	topics    []string
	rate      int // records/s over all producers
	producers int
	seqs      sync.Map       // producer id -> *atomic.Uint64, the last sequence used (sequences start at 1)
	acked     []atomic.Int64 // per topic: the highest offset acknowledged so far
	seen      []atomic.Int64 // per topic: the most records a read has returned so far
	ctx       context.Context
	stop      context.CancelFunc
	wg        sync.WaitGroup
	clientIDs atomic.Int64

	oks, refused, unknown, sessions, reads, readsAbandoned, retried atomic.Int64
	unknownRefusals                                                 atomic.Int64 // PUBLISH_ERRORs that say the outcome is unknown
	saidUnknown                                                     sync.Map     // unknownRefusal -> true
	refusedButStored                                                atomic.Int64 // of those, answered as duplicates when published again
	errMu                                                           sync.Mutex
	errs                                                            map[string]int
	refusals                                                        []string // the first refusals, whole
	refusedCodes                                                    map[client.Code]int
}

// answerWithin bounds the wait for one publish's answer, as an application would: past it
// the publish's outcome is unknown, and the producer moves to another node and publishes it
// again (the node's quorum timeout, past which a publish without a quorum is refused, is 5 s
// by default: a producer does not wait for it).
const answerWithin = 3 * time.Second

func newReplicaLoad(r *nodeproc.Region, nTopics, rate int) *replicaLoad {
	l := &replicaLoad{r: r, hist: linearize.NewHistory(), rate: rate, producers: 6, acked: make([]atomic.Int64, nTopics), seen: make([]atomic.Int64, nTopics), errs: map[string]int{}, refusedCodes: map[client.Code]int{}}
	for i := range nTopics {
		l.topics = append(l.topics, fmt.Sprintf("rc.t%d", i))
		l.acked[i].Store(-1)
	}
	l.ctx, l.stop = context.WithCancel(context.Background())
	return l
}

func (l *replicaLoad) nextSeq(producer string) uint64 {
	v, _ := l.seqs.LoadOrStore(producer, new(atomic.Uint64))
	return v.(*atomic.Uint64).Add(1)
}

func (l *replicaLoad) noteErr(err error) {
	msg := err.Error()
	if len(msg) > 100 {
		msg = msg[:100]
	}
	l.errMu.Lock()
	l.errs[msg]++
	l.errMu.Unlock()
}

// settle records a publish's answer in the history. It reports whether the outcome is
// unknown: a PUBLISH_ERROR means nothing was stored (docs/protocol.md); anything else (no
// answer in time, the connection lost) may have stored it.
func (l *replicaLoad) settle(op linearize.PublishOp, topic int, ack client.Ack, err error) (unknown bool) {
	var ce *client.Error
	switch {
	case err == nil:
		// The highest offset acknowledged first, its return time second: a read invoked
		// after this publish returned then waits for it (readOnce).
		for {
			cur := l.acked[topic].Load()
			if int64(ack.Offset) <= cur || l.acked[topic].CompareAndSwap(cur, int64(ack.Offset)) {
				break
			}
		}
		op.OK(ack.Offset)
		l.oks.Add(1)
		if _, said := l.saidUnknown.Load(unknownRefusal{l.topics[topic], op.Key()}); said && ack.Duplicate {
			l.refusedButStored.Add(1)
		}
		return false
	case errors.As(err, &ce) && !errors.Is(err, client.ErrOutcomeUnknown) && strings.Contains(ce.Message, "may or may not have been appended"):
		// A PUBLISH_ERROR that says it does not know: protocol.md promises that a
		// PUBLISH_ERROR appended nothing, so a node must end the stream instead (outcome
		// unknown). Counted, and the campaign fails on it; taken at its word here (published
		// again like any unknown outcome) so that the checker still judges the rest.
		op.Unknown(err)
		l.unknown.Add(1)
		l.unknownRefusals.Add(1)
		l.saidUnknown.Store(unknownRefusal{l.topics[topic], op.Key()}, true)
		l.noteErr(err)
		return true
	case errors.As(err, &ce) && strings.Contains(err.Error(), "the node ended the publish stream"):
		// Not a PUBLISH_ERROR: the stream ended (ERROR 9: the outcome of what the node had
		// not answered is unknown) before this publish was answered, or sent. Published
		// again like any unknown outcome.
		op.Unknown(err)
		l.unknown.Add(1)
		l.noteErr(err)
		return true
	case errors.As(err, &ce) && !errors.Is(err, client.ErrOutcomeUnknown):
		op.Refused(err)
		l.refused.Add(1)
		l.noteErr(err)
		l.errMu.Lock()
		l.refusedCodes[ce.Code]++
		if len(l.refusals) < 10 {
			l.refusals = append(l.refusals, fmt.Sprintf("%s %v: %v", l.topics[topic], op.Key(), err))
		}
		l.errMu.Unlock()
		return false
	default:
		op.Unknown(err)
		l.unknown.Add(1)
		if l.ctx.Err() == nil {
			l.noteErr(err)
		}
		return true
	}
}

// publishOne publishes one record through conn and waits for its answer.
func (l *replicaLoad) publishOne(ctx context.Context, conn *client.Conn, node, topic int, k campaign.Key, within time.Duration) (client.Ack, error) {
	op := l.hist.Publish(int(l.clientIDs.Add(1)), l.r.Nodes[node].Name, l.topics[topic], k)
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	f, err := conn.PublishAsync(wctx, client.Message{Topic: l.topics[topic], Payload: []byte(campaign.Payload(k)), ProducerID: k.Producer, Sequence: k.Seq})
	var ack client.Ack
	if err == nil {
		ack, err = f.Wait(wctx)
	}
	l.settle(op, topic, ack, err)
	return ack, err
}

// run starts the producers and readers; Stop ends them.
func (l *replicaLoad) run(readers int) {
	for p := range l.producers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.produce(p)
		}()
	}
	for i := range readers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.read(i)
		}()
	}
}

// Stop ends the load and waits for every answer (or its timeout).
func (l *replicaLoad) Stop() {
	l.stop()
	l.wg.Wait()
}

type replicaPending struct {
	f     *client.Future
	op    linearize.PublishOp
	topic int
	k     campaign.Key
}

// produce is one producer: rate/producers records/s, pipelined, through a random node; when
// its session breaks it moves to another random node and first publishes again, same
// producer and sequence, every record whose outcome is unknown (idempotent publish: the
// node must answer a stored one with its original offset).
func (l *replicaLoad) produce(p int) {
	rng := rand.New(rand.NewPCG(uint64(p), 99))
	producer := fmt.Sprintf("p%d", p)
	perTick := max(1, l.rate/l.producers/100)
	var retryMu sync.Mutex
	var retry []replicaPending
	for l.ctx.Err() == nil {
		node := rng.IntN(len(l.r.Nodes))
		conn, err := dialNode(l.ctx, l.r, node)
		if err != nil {
			testlog.Pause(l.ctx, 50*time.Millisecond) // a retry's back-off
			continue
		}
		l.sessions.Add(1)
		cid := int(l.clientIDs.Add(1))
		futures := make(chan replicaPending, 4096)
		var broken atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			for pd := range futures {
				ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
				ack, err := pd.f.Wait(ctx)
				cancel()
				if l.settle(pd.op, pd.topic, ack, err) {
					broken.Store(true)
					conn.Close()
					if l.ctx.Err() == nil {
						retryMu.Lock()
						retry = append(retry, pd)
						retryMu.Unlock()
					}
				}
			}
		}()
		send := func(topic int, k campaign.Key) bool {
			op := l.hist.Publish(cid, l.r.Nodes[node].Name, l.topics[topic], k)
			// Not l.ctx: stopping the load lets the publishes in flight be answered.
			f, err := conn.PublishAsync(context.Background(), client.Message{Topic: l.topics[topic], Payload: []byte(campaign.Payload(k)), ProducerID: k.Producer, Sequence: k.Seq})
			if err != nil {
				if l.settle(op, topic, client.Ack{}, err) && l.ctx.Err() == nil {
					retryMu.Lock()
					retry = append(retry, replicaPending{op: op, topic: topic, k: k})
					retryMu.Unlock()
				}
				broken.Store(true)
				return false
			}
			futures <- replicaPending{f, op, topic, k}
			return true
		}
		retryMu.Lock()
		again := retry
		retry = nil
		retryMu.Unlock()
		for i, pd := range again {
			l.retried.Add(1)
			if !send(pd.topic, pd.k) {
				retryMu.Lock()
				retry = append(retry, again[i+1:]...)
				retryMu.Unlock()
				break
			}
		}
		tick := time.NewTicker(10 * time.Millisecond)
		for l.ctx.Err() == nil && !broken.Load() {
			<-tick.C
			for range perTick {
				if !send(rng.IntN(len(l.topics)), campaign.Key{Producer: producer, Seq: l.nextSeq(producer)}) {
					break
				}
			}
		}
		tick.Stop()
		close(futures)
		<-done
		conn.Close()
	}
}

// read is one reader: again and again, a random topic from offset 0 at a random node.
func (l *replicaLoad) read(i int) {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	for l.ctx.Err() == nil {
		node, topic := rng.IntN(len(l.r.Nodes)), rng.IntN(len(l.topics))
		l.readOnce(l.ctx, node, topic, rng.IntN(20))
		select {
		case <-l.ctx.Done():
		case <-time.After(200 * time.Millisecond): // pacing: each read holds a whole log
		}
	}
}

// readOnce reads topic from offset 0 at node, as one operation of the history: at least
// every record acknowledged before it began and as many as any read that returned before it
// began, then up to extra more, stopping early once the stream is quiet. A replica serves up
// to what it has applied, which may lag behind what its leader acknowledged: a client that
// must not read older than what it knows waits for it, and so does this reader; porcupine
// then checks that what it read is the log as it was at one moment of the read. A read that
// fails (the node down or cut off) observed nothing it claims and is not recorded.
func (l *replicaLoad) readOnce(ctx context.Context, node, topic, extra int) bool {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := dialNode(ctx, l.r, node)
	if err != nil {
		return false
	}
	defer conn.Close()
	op := l.hist.Read(int(l.clientIDs.Add(1)), l.r.Nodes[node].Name, l.topics[topic])
	need := int(max(l.acked[topic].Load()+1, l.seen[topic].Load())) // after the invocation: every answer before it counts
	sub, err := conn.Subscribe(ctx, l.topics[topic], client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		l.readsAbandoned.Add(1)
		return false
	}
	defer sub.Close()
	var keys []campaign.Key
	for len(keys) < need+extra {
		rctx, rcancel := ctx, context.CancelFunc(func() {})
		if len(keys) >= need {
			rctx, rcancel = context.WithTimeout(ctx, 100*time.Millisecond)
		}
		rec, err := sub.Next(rctx)
		rcancel()
		if err != nil {
			if len(keys) >= need && ctx.Err() == nil {
				break // quiet: the end as seen
			}
			l.readsAbandoned.Add(1)
			return false
		}
		k := campaign.Key{Producer: rec.ProducerID, Seq: rec.Sequence}
		if rec.Offset != uint64(len(keys)) {
			k = campaign.Key{Producer: fmt.Sprintf("(offset %d delivered at position %d)", rec.Offset, len(keys))}
		}
		keys = append(keys, k)
	}
	for { // before the return time is taken, as acks are (settle)
		cur := l.seen[topic].Load()
		if int64(len(keys)) <= cur || l.seen[topic].CompareAndSwap(cur, int64(len(keys))) {
			break
		}
	}
	op.Done(keys)
	l.reads.Add(1)
	return true
}

// judge waits until every running node holds the same number of records of every topic, at
// least every acknowledged one, and the counts stay put (as `quicmq topics` shows them at
// each node: a replica's own log); then reads every node's whole log of
// every topic as the final reads and judges the history. With agree false (a broken build,
// whose replicas may never agree) it waits only for the counts to stay put.
func (l *replicaLoad) judge(t *testing.T, running []int, agree bool) *linearize.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	conns := make([]*client.Conn, len(l.r.Nodes))
	for _, i := range running {
		c, err := dialNode(ctx, l.r, i)
		if err != nil {
			t.Fatalf("dial %s for the final reads: %v", l.r.Nodes[i].Name, err)
		}
		defer c.Close()
		conns[i] = c
	}
	var last string
	var counts [][]uint64
	var putSince time.Time
	testlog.UntilErr(ctx, func() error {
		counts = make([][]uint64, len(l.r.Nodes))
		equal := true
		for _, i := range running {
			rows, err := l.r.Topics(ctx, i, "rc.>")
			if err != nil && ctx.Err() != nil {
				t.Fatalf("the replicas did not converge within 120 s (records per node and topic, acknowledged up to %v): %v; then %v", l.ackedOffsets(), last, err)
			}
			if err != nil {
				t.Fatalf("convergence: %v", err)
			}
			next := map[string]uint64{}
			for _, row := range rows {
				next[row.Topic] = row.Next
			}
			for ti, tp := range l.topics {
				n := next[tp]
				counts[i] = append(counts[i], n)
				equal = equal && n == counts[running[0]][ti] && int64(n) > l.acked[ti].Load()
			}
		}
		if now := fmt.Sprint(counts); now != last {
			last, putSince = now, time.Now()
		}
		if (equal || !agree) && time.Since(putSince) >= 200*time.Millisecond {
			return nil
		}
		return errors.New(last)
	})
	if ctx.Err() != nil {
		t.Fatalf("the replicas did not converge within 120 s (records per node and topic, acknowledged up to %v): %v", l.ackedOffsets(), counts)
	}
	for _, i := range running {
		for ti, tp := range l.topics {
			op := l.hist.Read(int(l.clientIDs.Add(1)), l.r.Nodes[i].Name, tp)
			recs := readLog(t, ctx, conns[i], tp, counts[i][ti])
			for j := range recs {
				recs[j].OriginRegion = cmpOr(recs[j].OriginRegion, l.r.Name)
			}
			op.Final(recs)
		}
	}
	start := time.Now()
	cfg := linearize.Config{Region: l.r.Name, VisualizeDir: os.TempDir()}
	if !agree {
		// A broken build's diverged history can keep porcupine searching for its whole
		// bound (2 minutes a topic); the judge's counts of lost and conflicting records
		// already fail it, and an undecided topic is reported as unknown.
		cfg.Timeout = 10 * time.Second
	}
	rep := linearize.Check(l.hist, cfg)
	t.Logf("history checked in %v", time.Since(start).Round(time.Millisecond))
	return rep
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (l *replicaLoad) ackedOffsets() []int64 {
	var out []int64
	for i := range l.acked {
		out = append(out, l.acked[i].Load())
	}
	return out
}

// summary is the load's figures for the test log.
func (l *replicaLoad) summary() string {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return fmt.Sprintf("publishes: %d acknowledged, %d refused, %d of unknown outcome (%d of them PUBLISH_ERRORs saying so; %d published again); %d sessions; %d reads recorded, %d abandoned; publish errors %v",
		l.oks.Load(), l.refused.Load(), l.unknown.Load(), l.unknownRefusals.Load(), l.retried.Load(), l.sessions.Load(), l.reads.Load(), l.readsAbandoned.Load(), l.errs)
}

// unknownRefusal names a publish answered with a PUBLISH_ERROR that says its outcome is
// unknown.
type unknownRefusal struct {
	topic string
	key   campaign.Key
}

// checkReplicaCampaign logs the verdict and fails the test unless the history passed.
func checkReplicaCampaign(t *testing.T, l *replicaLoad, running []int) {
	t.Helper()
	rep := l.judge(t, running, true)
	t.Logf("load: %s", l.summary())
	if n := l.unknownRefusals.Load(); n > 0 {
		t.Logf("PUBLISH_ERRORs that said the record may or may not have been appended: %d; published again, %d of their keys were answered as duplicates (an earlier attempt, answered with such an error or not at all, had stored them)",
			n, l.refusedButStored.Load())
	}
	t.Logf("checker: %v", rep)
	if !rep.OK() {
		t.Fatal("the replicated-region campaign failed its checker")
	}
	if n := l.unknownRefusals.Load(); n > 0 {
		t.Fatalf("%d publishes were answered PUBLISH_ERROR saying their outcome is unknown: a PUBLISH_ERROR must mean nothing was appended (the node must end the stream instead)", n)
	}
}

// firstAck publishes a probe record to topic every 20 ms, each on a connection of its own
// (answers on one connection come in the order sent, so one probe stuck behind a dead leader
// would hold back the next) through the nodes other than skip in turn, until one is
// acknowledged; it returns when, and through which node: its resolution is 20 ms, whatever a
// stuck publish costs. Every probe is part of the history; those unanswered when the first
// is acknowledged are given up on (outcome unknown).
func (l *replicaLoad) firstAck(ctx context.Context, topic int, skip ...int) (time.Time, string, error) {
	var others []int
	for i := range l.r.Nodes {
		if !slices.Contains(skip, i) {
			others = append(others, i)
		}
	}
	type win struct {
		at  time.Time
		via string
	}
	first := make(chan win, 1)
	pctx, giveUp := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer giveUp()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	var errMu sync.Mutex
	var last error
	for n := 0; ; n++ {
		select {
		case w := <-first:
			return w.at, w.via, nil
		case <-deadline:
			errMu.Lock()
			defer errMu.Unlock()
			return time.Time{}, "", fmt.Errorf("no publish to %s acknowledged within 60 s: %v", l.topics[topic], last)
		case <-tick.C:
		}
		i := others[n%len(others)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialNode(pctx, l.r, i)
			if err == nil {
				defer c.Close()
				_, err = l.publishOne(pctx, c, i, topic, campaign.Key{Producer: "probe", Seq: l.nextSeq("probe")}, answerWithin)
			}
			if err == nil {
				select {
				case first <- win{time.Now(), l.r.Nodes[i].Name}:
				default:
				}
				return
			}
			errMu.Lock()
			last = err
			errMu.Unlock()
		}()
	}
}

// warmUp creates the topics (their first records, through node 0) before the load starts:
// a minute, and a quarter of a second more per topic (1,000 topics one by one on a busy
// machine took over a minute).
func (l *replicaLoad) warmUp(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second+time.Duration(len(l.topics))*250*time.Millisecond)
	defer cancel()
	for ti := range l.topics {
		if _, _, err := l.firstAck(ctx, ti); err != nil {
			t.Fatalf("creating %s: %v", l.topics[ti], err)
		}
	}
}
