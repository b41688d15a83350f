package main

// The consumer-group scenarios of issue 14 ("What must be shown" 2 and 3): a group of M
// members over ONE topic with a backlog and a live publisher, every record acknowledged and
// the acks confirmed stored, QuicMQ (a shared group: SubscribeOptions.Group, Ack per record,
// Subscription.Commit) against NATS JetStream (one durable pull consumer shared by the
// members, AckExplicit, Fetch batches, AckSync on each batch's last record); and the same
// group with one more member that stops reading, against the group without it, with the
// broker's resident memory.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/client"
)

// grpTopic is the one topic (JetStream: subject of the stream GRP) the group reads.
const grpTopic = "grp.bench"

var grpSystemNames = []string{"quicmq", "jetstream"}

// quicmqMemberPending is the most records a QuicMQ group member holds unacknowledged (the
// node's GroupConfig.MemberPending default; the broker child runs the defaults).
const quicmqMemberPending = 256

// grpAckMeans says what the confirmation the scenario waits for means per system.
var grpAckMeans = map[string]string{
	"quicmq":    "Commit returned: the group's state with these acks fsynced",
	"jetstream": "AckSync returned: the ack applied in memory; the consumer state is written (O_SYNC) at most every 100 ms after",
}

type grpParams struct {
	System  string
	Members int  // members that read and ack every record
	Slow    bool // one more member that takes its first record and then stops reading
	Size    int
	Backlog int     // records stored before the members start
	Rate    float64 // records/s of the live publisher while the members read
	Batch   int     // JetStream: Fetch batch size
	// MaxAckPending bounds the records delivered and not acked: JetStream's consumer
	// MaxAckPending (QuicMQ's group window is the node's GroupConfig.Window, 1,024 by default).
	MaxAckPending int
	AckWait       time.Duration
	// MaxTime bounds a run, which ends when the reading members' acks are confirmed for
	// Target() records.
	MaxTime time.Duration
}

// Target is the confirmed acks that end a run: the backlog, less what a slow member can hold
// (QuicMQ: the node's MemberPending; JetStream: its one Fetch), so that the run measures the
// rest's rate rather than the wait for the slow member's records.
func (p grpParams) Target() int {
	if !p.Slow {
		return p.Backlog
	}
	hold := p.Batch
	if p.System == "quicmq" {
		hold = quicmqMemberPending
	}
	return max(p.Backlog-hold, 1)
}

func (p grpParams) args() []string {
	return []string{"grpworker", "--system", p.System, "--members", fmt.Sprint(p.Members), "--slow=" + fmt.Sprint(p.Slow),
		"--size", fmt.Sprint(p.Size), "--backlog", fmt.Sprint(p.Backlog), "--rate", fmt.Sprint(p.Rate),
		"--batch", fmt.Sprint(p.Batch), "--max-ack-pending", fmt.Sprint(p.MaxAckPending),
		"--ack-wait", p.AckWait.String(), "--max-time", p.MaxTime.String()}
}

func (p *grpParams) flags(fs *flag.FlagSet) {
	fs.IntVar(&p.Size, "size", 128, "payload bytes (at least 8: the record's sequence)")
	fs.IntVar(&p.Backlog, "backlog", 200000, "records stored before the members start; the run ends when that many acks are confirmed")
	fs.Float64Var(&p.Rate, "rate", 500, "records/s of the live publisher while the members read (0: none)")
	fs.IntVar(&p.Batch, "batch", 64, "JetStream: records per Fetch (QuicMQ's node hands a member up to 64 at a time)")
	fs.IntVar(&p.MaxAckPending, "max-ack-pending", 1024, "JetStream: the consumer's MaxAckPending (QuicMQ: the node's group window, 1,024)")
	fs.DurationVar(&p.AckWait, "ack-wait", 5*time.Second, "the group's ack-wait, both systems: a record not acked by then goes to another member")
	fs.DurationVar(&p.MaxTime, "max-time", 2*time.Minute, "longest a run reads")
}

func (p grpParams) validate() error {
	switch {
	case p.Members < 1 || p.Size < 8 || p.Backlog < 1 || p.Rate < 0:
		return fmt.Errorf("members %d, --size %d, --backlog %d, --rate %v: want members >= 1, size >= 8, backlog >= 1, rate >= 0", p.Members, p.Size, p.Backlog, p.Rate)
	case p.Batch < 1 || p.MaxAckPending < 1 || p.AckWait < time.Millisecond || p.MaxTime <= 0:
		return fmt.Errorf("--batch %d --max-ack-pending %d --ack-wait %v --max-time %v: want positive (ack-wait at least 1 ms)", p.Batch, p.MaxAckPending, p.AckWait, p.MaxTime)
	}
	return nil
}

type grpResult struct {
	grpParams
	Repeat int
	// Acked: records whose acks were confirmed, by the members that read (not the slow one),
	// from the first SUBSCRIBE (QuicMQ) or Fetch (JetStream) until Target() were confirmed.
	Acked int
	// LongestGap: ms, the longest time in the run in which no confirmation returned.
	LongestGap float64
	Seconds    float64
	Rate       float64
	// AckP50/P99: ms from a record's Ack call to the return of the confirmation that covers
	// it (QuicMQ: Commit; JetStream: the AckSync of the batch's last record).
	AckP50, AckP99 float64
	// ConfirmP50/P99: ms of one confirmation call (QuicMQ: Commit; JetStream: AckSync).
	ConfirmP50, ConfirmP99 float64
	Confirms               int     // confirmation calls
	Distinct               int     // different records the reading members acked (Ack called: at the end some are not confirmed yet)
	Redelivered            int     // acks by the reading members of a record acked before
	SlowHeld               int     // records the slow member read (QuicMQ: its one Next; JetStream: its one Fetch)
	Published              int     // by the live publisher in the run
	LoadSeconds            float64 // storing the backlog
	BrokerCPUus            float64 // broker process CPU per acked record
	RSSStart, RSSMax       float64 // broker VmRSS, MiB: when the members start, highest sample (every 100 ms)
	RSSEnd                 float64 // at the end, before the members close
	TimedOut               bool
	AckMeans               string
	Notes                  []string
	LoadAvg                float64
}

// grpStats is what the members of a run count, shared by all of them.
type grpStats struct {
	ack, confirm latHist
	acked        atomic.Int64
	gapMu        sync.Mutex
	last         time.Time     // under gapMu: the last confirmation's return (first: the start)
	longestGap   time.Duration // under gapMu
	confirms     atomic.Int64
	seen         []atomic.Int32 // per record sequence: acks by the reading members
	redelivered  atomic.Int64
	slowHeld     atomic.Int64
	errMu        sync.Mutex
	errs         map[string]int
}

func (s *grpStats) err(what string, err error) {
	s.errMu.Lock()
	s.errs[what+": "+err.Error()]++
	s.errMu.Unlock()
}

// acking records one acked record by its payload's sequence.
func (s *grpStats) acking(payload []byte) {
	if len(payload) < 8 {
		return
	}
	if q := binary.BigEndian.Uint64(payload); q < uint64(len(s.seen)) && s.seen[q].Add(1) > 1 {
		s.redelivered.Add(1)
	}
}

// confirmed records a confirmation that returned at now, covering acks made at times.
func (s *grpStats) confirmed(called, now time.Time, acks []time.Time) {
	s.confirm.add(int64(now.Sub(called)))
	for _, t := range acks {
		s.ack.add(int64(now.Sub(t)))
	}
	s.confirms.Add(1)
	s.acked.Add(int64(len(acks)))
	s.gap(now)
}

// gap notes that a confirmation returned (or the run ended) at now.
func (s *grpStats) gap(now time.Time) {
	s.gapMu.Lock()
	if d := now.Sub(s.last); d > s.longestGap {
		s.longestGap = d
	}
	if now.After(s.last) {
		s.last = now
	}
	s.gapMu.Unlock()
}

// grpSys is one broker seen by the group scenarios.
type grpSys interface {
	// publisher dials a publishing connection to grpTopic.
	publisher(ctx context.Context) (asyncPub, error)
	// member starts one member (slow: one that takes its first record and stops reading);
	// it runs until close.
	member(ctx context.Context, p grpParams, slow bool, st *grpStats) error
	close()
}

// runGrpWorker is the hidden "grpworker" command: inside the run's namespace it starts the
// broker, stores the backlog, runs the members and the live publisher, and prints its
// grpResult as JSON.
func runGrpWorker(args []string) error {
	var p grpParams
	fs := flag.NewFlagSet("grpworker", flag.ExitOnError)
	fs.StringVar(&p.System, "system", "quicmq", "quicmq or jetstream")
	fs.IntVar(&p.Members, "members", 4, "reading members")
	fs.BoolVar(&p.Slow, "slow", false, "one more member that stops reading")
	p.flags(fs)
	fs.Parse(args)
	if err := p.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.MaxTime+10*time.Minute)
	defer cancel()
	res := &grpResult{grpParams: p, AckMeans: grpAckMeans[p.System]}
	seq := 0
	payload := func() []byte {
		b := make([]byte, p.Size)
		binary.BigEndian.PutUint64(b, uint64(seq))
		seq++
		return b
	}
	t0 := time.Now()
	sys, pid, err := startGrpSys(ctx, p, payload)
	if err != nil {
		return fmt.Errorf("%s: %w", p.System, err)
	}
	defer sys.close()
	res.LoadSeconds = time.Since(t0).Seconds()
	st := &grpStats{errs: map[string]int{}, seen: make([]atomic.Int32, p.Backlog+int(p.Rate*p.MaxTime.Seconds())+1)}

	// The live publisher, paced in 10 ms ticks, from the sequence after the backlog's.
	pub, err := sys.publisher(ctx)
	if err != nil {
		return fmt.Errorf("%s: publisher: %w", p.System, err)
	}
	stopPub := publishPaced(ctx, pub, payload, p.Rate, st)

	// Memory every 100 ms from the members' start.
	res.RSSStart = rssMiB(pid)
	rssMax := rssPeaks(100*time.Millisecond, pid)
	cpu0, start := brokerCPU(pid), time.Now()
	st.last = start
	if p.Slow {
		// First, so that it takes its share of the records at once.
		if err := sys.member(ctx, p, true, st); err != nil {
			return fmt.Errorf("%s: slow member: %w", p.System, err)
		}
	}
	for i := range p.Members {
		if err := sys.member(ctx, p, false, st); err != nil {
			return fmt.Errorf("%s: member %d: %w", p.System, i, err)
		}
	}
	// Wait for the confirmations, every 10 ms, until Target() records are confirmed.
	for st.acked.Load() < int64(p.Target()) {
		if time.Since(start) > p.MaxTime {
			res.TimedOut = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	el := time.Since(start)
	st.gap(start.Add(el))
	cpu1 := brokerCPU(pid)
	res.RSSEnd = rssMiB(pid)
	res.RSSMax = max(rssMax()[0], res.RSSStart, res.RSSEnd)
	res.Acked = int(st.acked.Load())
	st.gapMu.Lock()
	res.LongestGap = float64(st.longestGap) / 1e6
	st.gapMu.Unlock()
	res.Seconds = el.Seconds()
	res.Rate = float64(res.Acked) / el.Seconds()
	res.AckP50, res.AckP99 = st.ack.quantile(0.5, 0), st.ack.quantile(0.99, 0)
	res.ConfirmP50, res.ConfirmP99 = st.confirm.quantile(0.5, 0), st.confirm.quantile(0.99, 0)
	res.Confirms = int(st.confirms.Load())
	res.Redelivered = int(st.redelivered.Load())
	for i := range st.seen {
		if st.seen[i].Load() > 0 {
			res.Distinct++
		}
	}
	res.SlowHeld = int(st.slowHeld.Load())
	if res.Acked > 0 {
		res.BrokerCPUus = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(res.Acked)
	}
	res.Published = stopPub()
	pub.close()
	st.errMu.Lock()
	for e, n := range st.errs {
		res.Notes = append(res.Notes, fmt.Sprintf("%d x %s", n, e))
	}
	st.errMu.Unlock()
	slices.Sort(res.Notes)
	res.LoadAvg = loadAvg()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// publishPaced publishes payload() through pub at rate records/s (none at 0), paced in
// 10 ms ticks, until stop, which returns how many it published.
func publishPaced(ctx context.Context, pub asyncPub, payload func() []byte, rate float64, st *grpStats) (stop func() int) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var published atomic.Int64
	if rate > 0 {
		wg.Go(func() {
			start := time.Now()
			pipeline(ctx, pub, payload, func() bool {
				for {
					select {
					case <-done:
						return false
					default:
					}
					if float64(published.Load()) < time.Since(start).Seconds()*rate {
						published.Add(1)
						return true
					}
					time.Sleep(10 * time.Millisecond)
				}
			}, func(_ time.Time, err error) {
				if err != nil {
					st.err("live publish", err)
				}
			})
		})
	}
	return func() int {
		close(done)
		wg.Wait()
		return int(published.Load())
	}
}

// startGrpSys starts the broker of p.System, stores p.Backlog records of payload() and
// returns the system and the broker's process ID.
func startGrpSys(ctx context.Context, p grpParams, payload func() []byte) (grpSys, int, error) {
	var sys grpSys
	var pid int
	switch p.System {
	case "quicmq":
		b, err := startBroker("quicmq")
		if err != nil {
			return nil, 0, err
		}
		q := &quicmqGrp{b: b, ca: filepath.Join(b.dir, "data", "tls", "ca.pem")}
		sys, pid = q, b.pid()
	case "jetstream":
		j, err := startJSGrp(ctx, p, payload)
		return j, j.pid(), err
	default:
		return nil, 0, fmt.Errorf("unknown system %q (want one of %v)", p.System, grpSystemNames)
	}
	pub, err := sys.publisher(ctx)
	if err != nil {
		sys.close()
		return nil, 0, err
	}
	defer pub.close()
	if err := loadBacklog(ctx, pub, p.Backlog, payload); err != nil {
		sys.close()
		return nil, 0, err
	}
	return sys, pid, nil
}

// loadBacklog publishes n records of payload() on pub, pipelined, and fails with the first
// failed publish.
func loadBacklog(ctx context.Context, pub asyncPub, n int, payload func() []byte) error {
	var once sync.Once
	var first error
	pipeline(ctx, pub, payload, func() bool { n--; return n >= 0 }, func(_ time.Time, err error) {
		if err != nil {
			once.Do(func() { first = err })
		}
	})
	if first != nil {
		return fmt.Errorf("store the backlog: %w", first)
	}
	return nil
}

// quicmqGrp is a QuicMQ node (this binary's "broker" child) and the members' connections.
type quicmqGrp struct {
	b  *brokerProc
	ca string

	mu    sync.Mutex
	conns []*client.Conn
	wg    sync.WaitGroup
}

func (q *quicmqGrp) dial(ctx context.Context, name string) (*client.Conn, error) {
	c, err := client.Dial(ctx, client.Options{CAFile: q.ca, Name: name}, quicmqAddr)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.conns = append(q.conns, c)
	q.mu.Unlock()
	return c, nil
}

func (q *quicmqGrp) publisher(ctx context.Context) (asyncPub, error) {
	return dialQuicmqPub(ctx, q.ca, quicmqAddr, topicTurn{topics: []string{grpTopic}}, 1024)
}

// member subscribes as a member of the group "bench" on a connection of its own. A reader
// acks each record after Next; a committer sends COMMIT for the acks made since its last one
// and waits for the node's confirmation, one at a time.
func (q *quicmqGrp) member(ctx context.Context, p grpParams, slow bool, st *grpStats) error {
	c, err := q.dial(ctx, "bench-member")
	if err != nil {
		return err
	}
	s, err := c.Subscribe(ctx, grpTopic, client.SubscribeOptions{Group: "bench", From: client.Earliest, AckWait: p.AckWait})
	if err != nil {
		return err
	}
	if slow {
		q.wg.Go(func() {
			if _, err := s.Next(context.Background()); err == nil {
				st.slowHeld.Add(1)
			}
			// ... and reads nothing more until the connection closes.
		})
		return nil
	}
	var mu sync.Mutex
	var acks []time.Time // Ack calls not yet covered by a COMMIT sent
	more := make(chan struct{}, 1)
	done := make(chan struct{})
	q.wg.Go(func() {
		defer close(done)
		for {
			// No deadline: a cancellable context would cost a timer per read; closing the
			// connection ends the loop.
			r, err := s.Next(context.Background())
			if err != nil {
				return
			}
			t := time.Now()
			if err := s.Ack(r); err != nil {
				st.err("ack", err)
				return
			}
			st.acking(r.Payload)
			mu.Lock()
			acks = append(acks, t)
			mu.Unlock()
			select {
			case more <- struct{}{}:
			default:
			}
		}
	})
	q.wg.Go(func() {
		for {
			select {
			case <-more:
			case <-done:
				return
			}
			mu.Lock()
			batch := acks
			acks = nil
			mu.Unlock()
			if len(batch) == 0 {
				continue
			}
			called := time.Now()
			if err := s.Commit(ctx); err != nil {
				select {
				case <-done: // the connection closed at the run's end
				default:
					st.err("commit", err)
				}
				return
			}
			st.confirmed(called, time.Now(), batch)
		}
	})
	return nil
}

func (q *quicmqGrp) close() {
	q.mu.Lock()
	for _, c := range q.conns {
		c.Close()
	}
	q.mu.Unlock()
	q.wg.Wait()
	q.b.stop()
}

// jsGrp is one nats-server (this binary's "jsnode" child) with the stream GRP and the
// durable pull consumer "bench" the members share.
type jsGrp struct {
	b    *brokerProc
	dir  string
	stop chan struct{}

	mu    sync.Mutex
	conns []*nats.Conn
	wg    sync.WaitGroup
}

func (j *jsGrp) pid() int { return j.b.pid() }

// startJSGrp stores the backlog with a server WITHOUT sync_interval: always (a synced write
// per record would take minutes to store it), then restarts the server on the same store
// with sync_interval: always for the run, and creates the consumer.
func startJSGrp(ctx context.Context, p grpParams, payload func() []byte) (*jsGrp, error) {
	dir, err := os.MkdirTemp("", "qmqbench-js-")
	if err != nil {
		return nil, err
	}
	j := &jsGrp{dir: dir, stop: make(chan struct{})}
	start := func(sync bool) error {
		j.b, err = startChild("nats-server", func(string) []string {
			return []string{"jsnode", "--dir", filepath.Join(dir, "store"), "--sync=" + fmt.Sprint(sync)}
		})
		return err
	}
	if err := start(false); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	nc, err := nats.Connect(natsAddr)
	if err == nil {
		var js nats.JetStreamContext
		if js, err = nc.JetStream(); err == nil {
			_, err = js.AddStream(&nats.StreamConfig{Name: "GRP", Subjects: []string{grpTopic}, Storage: nats.FileStorage})
		}
		nc.Close()
	}
	if err == nil {
		var pub asyncPub
		if pub, err = j.publisher(ctx); err == nil {
			err = loadBacklog(ctx, pub, p.Backlog, payload)
			pub.close()
		}
	}
	j.b.stop()
	if err == nil {
		err = start(true)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	nc, err = nats.Connect(natsAddr)
	if err == nil {
		var js nats.JetStreamContext
		if js, err = nc.JetStream(); err == nil {
			_, err = js.AddConsumer("GRP", &nats.ConsumerConfig{Durable: "bench", AckPolicy: nats.AckExplicitPolicy,
				DeliverPolicy: nats.DeliverAllPolicy, AckWait: p.AckWait, MaxAckPending: p.MaxAckPending, MaxDeliver: -1})
		}
		nc.Close()
	}
	if err != nil {
		j.close()
		return nil, fmt.Errorf("jetstream consumer: %w", err)
	}
	return j, nil
}

func (j *jsGrp) publisher(context.Context) (asyncPub, error) {
	return dialJSPub(natsAddr, topicTurn{topics: []string{grpTopic}}, 1024)
}

// member binds a pull subscription to the consumer on a connection of its own and loops:
// Fetch a batch, Ack each record but the last, AckSync the last (acks of one connection are
// processed in order, so its reply follows the others).
func (j *jsGrp) member(ctx context.Context, p grpParams, slow bool, st *grpStats) error {
	nc, err := nats.Connect(natsAddr, nats.Name("bench-member"))
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.conns = append(j.conns, nc)
	j.mu.Unlock()
	js, err := nc.JetStream()
	if err != nil {
		return err
	}
	sub, err := js.PullSubscribe(grpTopic, "bench", nats.Bind("GRP", "bench"))
	if err != nil {
		return err
	}
	j.wg.Go(func() {
		for {
			select {
			case <-j.stop:
				return
			default:
			}
			msgs, err := sub.Fetch(p.Batch, nats.MaxWait(time.Second))
			if errors.Is(err, nats.ErrTimeout) {
				continue
			}
			if err != nil {
				select {
				case <-j.stop:
				default:
					st.err("fetch", err)
				}
				return
			}
			if slow {
				st.slowHeld.Add(int64(len(msgs)))
				return // ... and fetches nothing more
			}
			acks := make([]time.Time, 0, len(msgs))
			var called time.Time
			for i, m := range msgs {
				t := time.Now()
				if i < len(msgs)-1 {
					err = m.Ack()
				} else {
					called = t
					err = m.AckSync()
				}
				if err != nil {
					st.err("ack", err)
					return
				}
				st.acking(m.Data)
				acks = append(acks, t)
			}
			st.confirmed(called, time.Now(), acks)
		}
	})
	return nil
}

func (j *jsGrp) close() {
	close(j.stop)
	j.wg.Wait()
	j.mu.Lock()
	for _, nc := range j.conns {
		nc.Close()
	}
	j.mu.Unlock()
	j.b.stop()
	os.RemoveAll(j.dir)
}

// runGroups is the "groups" command.
func runGroups(args []string) error {
	fs := flag.NewFlagSet("groups", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: qmqbench groups [flags]

A consumer group of M members (--members) over one topic with a stored backlog and a live
publisher: records/s acked with the acks confirmed stored, and the ack latency (a record's
Ack call to the return of the confirmation covering it), QuicMQ (SubscribeOptions.Group,
Ack per record, Subscription.Commit pipelined beside the reads) against NATS JetStream
(sync_interval: always; one durable pull consumer, AckExplicit, Fetch batches, AckSync per
batch). Then (--slow-members) the group with one more member that takes a record and stops
reading, against the group without it: the rest's records/s (goal: within 20%%) and the
broker's VmRSS. Each run has a network namespace of its own, no loss.

`)
		fs.PrintDefaults()
	}
	var p grpParams
	p.flags(fs)
	systemsFlag := fs.String("systems", "quicmq,jetstream", "systems, comma-separated: quicmq, jetstream")
	membersFlag := fs.String("members", "1,4,16", "group sizes, comma-separated")
	slowMembers := fs.Int("slow-members", 4, "the slow-member comparison: this many reading members with and without one that stops reading (0: none)")
	slowSystems := fs.String("slow-systems", "quicmq,jetstream", "systems of the slow-member comparison")
	repeat := fs.Int("repeat", 1, "repetitions (medians are reported)")
	out := fs.String("out", defaultOut, "directory for JSON results and PNG plots")
	fs.Parse(args)
	members, err := parseInts(*membersFlag)
	if err != nil {
		return fmt.Errorf("--members: %w", err)
	}
	systems := strings.Split(*systemsFlag, ",")
	slowSys := strings.Split(*slowSystems, ",")
	if *slowMembers == 0 {
		slowSys = nil
	}
	for _, s := range append(slices.Clone(systems), slowSys...) {
		if !slices.Contains(grpSystemNames, s) {
			return fmt.Errorf("--systems, --slow-systems: unknown system %q (want %v)", s, grpSystemNames)
		}
	}
	q := p
	q.Members = max(*slowMembers, 1)
	if err := q.validate(); err != nil {
		return err
	}
	if *repeat < 1 || *slowMembers < 0 {
		return fmt.Errorf("--repeat %d --slow-members %d: want repeat >= 1, slow-members >= 0", *repeat, *slowMembers)
	}
	if err := lossy.Check(); err != nil {
		return fmt.Errorf("%w; this scenario runs each broker in a namespace of its own and is skipped", err)
	}
	runs := grpRuns(systems, members, slowSys, *slowMembers)
	slot, stop := killOnSignal()
	defer stop()
	var results []*grpResult
	total := *repeat * len(runs)
	started := time.Now()
	n := 0
	for r := 1; r <= *repeat; r++ {
		for _, rn := range runs {
			n++
			q := p
			q.System, q.Members, q.Slow = rn.sys, rn.members, rn.slow
			slow := ""
			if rn.slow {
				slow = " + 1 that stops reading"
			}
			fmt.Fprintf(os.Stderr, "[%d/%d %s] repeat %d: %s, %d members%s ...", n, total, time.Since(started).Round(time.Second), r, rn.sys, rn.members, slow)
			var res grpResult
			if err := workerIn(rn.sys, q.MaxTime+10*time.Minute, func(string) []string { return q.args() }, &res, slot); err != nil {
				fmt.Fprintf(os.Stderr, " failed: %v\n", err)
				continue
			}
			res.Repeat = r
			fmt.Fprintf(os.Stderr, " %.0f records/s acked in %.1f s, ack p50 %.2f p99 %.1f ms, confirm p50 %.2f ms, longest gap %.0f ms, %d redelivered, RSS %.0f/%.0f/%.0f MiB, timed out %v %v\n",
				res.Rate, res.Seconds, res.AckP50, res.AckP99, res.ConfirmP50, res.LongestGap, res.Redelivered, res.RSSStart, res.RSSMax, res.RSSEnd, res.TimedOut, res.Notes)
			results = append(results, &res)
		}
	}
	path, err := saveResults(*out, "groups", results)
	if err != nil {
		return err
	}
	printGroups(results, systems, members, slowSys, *slowMembers)
	if err := plotGroups(results, systems, members, path); err != nil {
		return err
	}
	if len(results) < total {
		return errors.New("some runs failed (see above)")
	}
	return nil
}

// grpRun is one run of the groups scenario: a system, a group size, with or without the
// member that stops reading.
type grpRun struct {
	sys     string
	members int
	slow    bool
}

// grpRuns lists the runs of one repeat: every system at every group size, then for each
// slow-member system the group of slowMembers without (unless already run) and with the
// member that stops reading.
func grpRuns(systems []string, members []int, slowSys []string, slowMembers int) []grpRun {
	var runs []grpRun
	for _, m := range members {
		for _, s := range systems {
			runs = append(runs, grpRun{s, m, false})
		}
	}
	for _, s := range slowSys {
		if !slices.Contains(members, slowMembers) || !slices.Contains(systems, s) {
			runs = append(runs, grpRun{s, slowMembers, false})
		}
		runs = append(runs, grpRun{s, slowMembers, true})
	}
	return runs
}

// plotGroups draws the median records/s acked of each system and group size beside the
// results at path.
func plotGroups(results []*grpResult, systems []string, members []int, path string) error {
	var labels []string
	var values []float64
	for _, m := range members {
		for _, s := range systems {
			if g := pickGrp(results, s, m, false); len(g) > 0 {
				labels = append(labels, fmt.Sprintf("%s x%d", s, m))
				values = append(values, medianOf(g, func(r *grpResult) float64 { return r.Rate }).med)
			}
		}
	}
	return plotBars("consumer group over one topic: records/s acked, acks confirmed (median)", "records/s", labels, values, path)
}

func pickGrp(rs []*grpResult, sys string, members int, slow bool) []*grpResult {
	var out []*grpResult
	for _, r := range rs {
		if r.System == sys && r.Members == members && r.Slow == slow {
			out = append(out, r)
		}
	}
	return out
}

// grpRatio is the median over repeats of f(a)/f(b), within a repeat.
func grpRatio(as, bs []*grpResult, f func(*grpResult) float64) string {
	var vs []float64
	for _, a := range as {
		for _, b := range bs {
			if a.Repeat == b.Repeat && f(b) > 0 {
				vs = append(vs, f(a)/f(b))
			}
		}
	}
	if len(vs) == 0 {
		return "-"
	}
	return median(vs).String()
}

func printGroups(rs []*grpResult, systems []string, members []int, slowSys []string, slowMembers int) {
	rate := func(r *grpResult) float64 { return r.Rate }
	fmt.Println("| system | members | records/s acked, confirmed | ack p50 ms | ack p99 ms | confirm p50 ms | broker cpu-µs/record | redelivered | confirmation means |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, m := range members {
		for _, s := range systems {
			g := pickGrp(rs, s, m, false)
			if len(g) == 0 {
				continue
			}
			fmt.Printf("| %s | %d | %v | %v | %v | %v | %v | %v | %s |\n", s, m, medianOf(g, rate),
				medianOf(g, func(r *grpResult) float64 { return r.AckP50 }),
				medianOf(g, func(r *grpResult) float64 { return r.AckP99 }),
				medianOf(g, func(r *grpResult) float64 { return r.ConfirmP50 }),
				medianOf(g, func(r *grpResult) float64 { return r.BrokerCPUus }),
				medianOf(g, func(r *grpResult) float64 { return float64(r.Redelivered) }), grpAckMeans[s])
		}
	}
	fmt.Println()
	fmt.Println("| members | records/s quicmq/jetstream (goal >= 1) |")
	fmt.Println("|---|---|")
	for _, m := range members {
		fmt.Printf("| %d | %s |\n", m, grpRatio(pickGrp(rs, "quicmq", m, false), pickGrp(rs, "jetstream", m, false), rate))
	}
	if len(slowSys) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("| system | members | records/s without | with one that stops reading (the rest) | with/without (goal >= 0.8) | longest gap ms without / with | slow member read | broker VmRSS MiB start/max/end without | with |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	rss := func(g []*grpResult) string {
		if len(g) == 0 {
			return "-"
		}
		return fmt.Sprintf("%s / %s / %s", medianOf(g, func(r *grpResult) float64 { return r.RSSStart }),
			medianOf(g, func(r *grpResult) float64 { return r.RSSMax }), medianOf(g, func(r *grpResult) float64 { return r.RSSEnd }))
	}
	for _, s := range slowSys {
		without, with := pickGrp(rs, s, slowMembers, false), pickGrp(rs, s, slowMembers, true)
		if len(with) == 0 || len(without) == 0 {
			continue
		}
		gap := func(r *grpResult) float64 { return r.LongestGap }
		fmt.Printf("| %s | %d | %v | %v | %s | %v / %v | %v | %s | %s |\n", s, slowMembers, medianOf(without, rate), medianOf(with, rate),
			grpRatio(with, without, rate), medianOf(without, gap), medianOf(with, gap),
			medianOf(with, func(r *grpResult) float64 { return float64(r.SlowHeld) }), rss(without), rss(with))
	}
}
