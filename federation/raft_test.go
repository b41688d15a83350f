package federation

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/wal"
)

// The raft nodes of the federation harness (fedMesh.addRaft): nodes of one or more regions in
// this process, each a QUIC listener whose streams go to ServeStream (as node's sessions hand
// them over), a wal.Log (the Federation requires one) and a Federation whose Peers are the
// mesh's other raft nodes, with their raft IDs. Deliver goes to a function the test sets.

type raftNode struct {
	m            *fedMesh
	region, name string
	id           uint64
	cert         tls.Certificate
	log          *wal.Log
	tr           *quic.Transport
	ln           *quic.Listener
	addr         string
	cfg          RaftConfig // Deliver is set by startFed

	deliver atomic.Pointer[func([]replica.Message)]
	fedMu   sync.Mutex
	fed     *Federation
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan struct{}
	serveWG sync.WaitGroup
}

func testRaftConfig() RaftConfig {
	return RaftConfig{RetryInterval: 50 * time.Millisecond}
}

// addRaft starts a raft node of region with raft ID id.
func (m *fedMesh) addRaft(region string, id uint64, cfg RaftConfig) *raftNode {
	t := m.t
	t.Helper()
	m.mu.Lock()
	name := fmt.Sprintf("node-%s-%d", region, len(m.raft))
	m.mu.Unlock()
	cert, err := m.ca.Issue(name, []string{name, "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	n := &raftNode{m: m, region: region, name: name, id: id, cert: cert, cfg: cfg}
	if n.log, err = wal.Open(t.TempDir(), wal.Options{Logger: testLogger(t), RetentionInterval: -1}); err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	n.addr = udp.LocalAddr().String()
	n.tr = &quic.Transport{Conn: udp}
	n.ln, err = n.tr.Listen(&tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		NextProtos: []string{wire.PeerALPN}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: m.pool,
	}, &quic.Config{MaxIncomingStreams: 1000, KeepAlivePeriod: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n.serveWG.Add(1)
	go n.acceptLoop()
	m.mu.Lock()
	m.raft = append(m.raft, n)
	m.mu.Unlock()
	n.startFed()
	t.Cleanup(n.stop)
	for _, o := range m.raftNodes() {
		if f := o.fedNow(); f != nil {
			f.PeersChanged()
		}
	}
	return n
}

func (m *fedMesh) raftNodes() []*raftNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*raftNode(nil), m.raft...)
}

func (m *fedMesh) raftPeers() []Peer {
	var out []Peer
	for _, n := range m.raftNodes() {
		out = append(out, Peer{Region: n.region, Name: n.name, Addr: n.addr, RaftID: n.id})
	}
	return out
}

func (n *raftNode) acceptLoop() {
	defer n.serveWG.Done()
	for {
		conn, err := n.ln.Accept(context.Background())
		if err != nil {
			return
		}
		n.serveWG.Add(1)
		go func() {
			defer n.serveWG.Done()
			servePeerStreams(conn, n.fedNow)
		}()
	}
}

func (n *raftNode) startFed() {
	t := n.m.t
	t.Helper()
	cfg := n.cfg
	cfg.ID = n.id
	reg := prometheus.NewRegistry()
	cfg.Deliver = func(msgs []replica.Message) {
		if d := n.deliver.Load(); d != nil {
			(*d)(msgs)
		}
	}
	f, err := New(Config{
		Region: n.region, Name: n.name, Log: n.log,
		TLS:   &tls.Config{Certificates: []tls.Certificate{n.cert}, RootCAs: n.m.pool},
		Peers: n.m.raftPeers, BindHost: "127.0.0.1", Raft: cfg,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond, ReconcileInterval: 100 * time.Millisecond,
		AddrWatchInterval: -1, Logger: testLogger(t).With("node", n.name), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	n.fedMu.Lock()
	n.fed, n.cancel, n.done, n.reg = f, cancel, done, reg
	n.fedMu.Unlock()
}

func (n *raftNode) fedNow() *Federation {
	n.fedMu.Lock()
	defer n.fedMu.Unlock()
	return n.fed
}

// stopFed stops the node's Federation (its links and raft streams); its listener stays and
// refuses streams until startFed.
func (n *raftNode) stopFed() {
	n.fedMu.Lock()
	cancel, done := n.cancel, n.done
	n.fed, n.cancel, n.done = nil, nil, nil
	n.fedMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (n *raftNode) stop() {
	n.stopFed()
	n.ln.Close()
	n.tr.Close()
	n.tr.Conn.Close()
	n.serveWG.Wait()
	n.log.Close()
}

func (n *raftNode) onDeliver(f func([]replica.Message)) { n.deliver.Store(&f) }

// waitRaftUp waits until every node's raft streams of both classes to every other node of
// its region are open and served at the other end.
func (m *fedMesh) waitRaftUp(nodes ...*raftNode) {
	m.t.Helper()
	testlog.WaitFor(m.t, 20*time.Second, "raft streams up", func() bool {
		for _, a := range nodes {
			for _, b := range nodes {
				if a == b {
					continue
				}
				fa, fb := a.fedNow(), b.fedNow()
				if fa == nil || fb == nil {
					return false
				}
				out, _ := fa.RaftStats()
				in, _ := fb.RaftStats()
				o, i := out[b.name], in[a.name]
				if !o.Control.Open || !o.Bulk.Open || i.Control.Serving == 0 || i.Bulk.Serving == 0 {
					return false
				}
			}
		}
		return true
	})
}

func heartbeat(from, to, seq uint64) replica.Message {
	return replica.Message{Group: 1, Raft: &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(from), To: new(to), Term: new(uint64(1)), Commit: new(seq)}}
}

func appendMsg(from, to, seq uint64, data []byte) replica.Message {
	return replica.Message{Group: 1, Raft: &pb.Message{Type: pb.MsgApp.Enum(), From: new(from), To: new(to), Term: new(uint64(1)),
		Index: new(seq), Entries: []*pb.Entry{{Term: new(uint64(1)), Index: new(seq + 1), Data: data}}}}
}

// TestRaftDeliversInOrderPerClass: three nodes of one region send each other heartbeats
// and appends in several Sends; each receiver gets all of them, each class in order.
func TestRaftDeliversInOrderPerClass(t *testing.T) {
	m := newFedMesh(t)
	var nodes []*raftNode
	for i := range 3 {
		nodes = append(nodes, m.addRaft("eu", uint64(100+i), testRaftConfig()))
	}
	type key struct {
		from, to uint64
		bulk     bool
	}
	var mu sync.Mutex
	got := map[key][]uint64{}
	for _, n := range nodes {
		n.onDeliver(func(msgs []replica.Message) {
			mu.Lock()
			defer mu.Unlock()
			for _, msg := range msgs {
				r := msg.Raft
				k := key{r.GetFrom(), r.GetTo(), r.GetType() == pb.MsgApp}
				seq := r.GetCommit()
				if k.bulk {
					seq = r.GetIndex()
				}
				got[k] = append(got[k], seq)
			}
		})
	}
	m.waitRaftUp(nodes...)
	const rounds, per = 50, 4
	for r := range rounds {
		for _, a := range nodes {
			for _, b := range nodes {
				if a == b {
					continue
				}
				var msgs []replica.Message
				for i := range per {
					seq := uint64(r*per + i)
					msgs = append(msgs, heartbeat(a.id, b.id, seq), appendMsg(a.id, b.id, seq, []byte("entry")))
				}
				a.fedNow().Send(b.id, msgs)
			}
		}
	}
	want := rounds * per
	testlog.WaitFor(t, 20*time.Second, "every message delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range got {
			if len(s) < want {
				return false
			}
		}
		return len(got) == 3*2*2
	})
	mu.Lock()
	defer mu.Unlock()
	for k, s := range got {
		if len(s) != want {
			t.Errorf("%d -> %d bulk=%v: %d messages, want %d", k.from, k.to, k.bulk, len(s), want)
		}
		for i, v := range s {
			if v != uint64(i) {
				t.Fatalf("%d -> %d bulk=%v: message %d carries sequence %d: out of order", k.from, k.to, k.bulk, i, v)
			}
		}
	}
	for _, n := range nodes {
		stats, unroutable := n.fedNow().RaftStats()
		for peer, s := range stats {
			for _, c := range []RaftClassStats{s.Control, s.Bulk} {
				if c.DroppedFull+c.DroppedNoStream+c.DroppedTooLarge != 0 || c.SentMessages != uint64(want) || c.ReceivedMessages != uint64(want) {
					t.Errorf("%s, peer %s: %+v", n.name, peer, c)
				}
			}
		}
		if unroutable != 0 {
			t.Errorf("%s: %d unroutable", n.name, unroutable)
		}
	}
	// A raft ID no link has is counted, not sent.
	nodes[0].fedNow().Send(999, []replica.Message{heartbeat(nodes[0].id, 999, 1)})
	if _, u := nodes[0].fedNow().RaftStats(); u != 1 {
		t.Errorf("unroutable = %d, want 1", u)
	}
}

// heartbeatBehind sends 32 MiB of appends and then, in the same Send, one heartbeat, and
// returns how many appends had been delivered when the heartbeat was, of how many.
func heartbeatBehind(t *testing.T, cfg RaftConfig) (before, total int) {
	m := newFedMesh(t)
	a, b := m.addRaft("eu", 1, cfg), m.addRaft("eu", 2, cfg)
	const n = 64
	var appends atomic.Int64
	hb := make(chan int64, 1)
	b.onDeliver(func(msgs []replica.Message) {
		for _, msg := range msgs {
			switch msg.Raft.GetType() {
			case pb.MsgApp:
				appends.Add(1)
			case pb.MsgHeartbeat:
				hb <- appends.Load()
			}
		}
	})
	m.waitRaftUp(a, b)
	payload := bytes.Repeat([]byte("x"), 512<<10)
	var msgs []replica.Message
	for i := range n {
		msgs = append(msgs, appendMsg(1, 2, uint64(i), payload))
	}
	msgs = append(msgs, heartbeat(1, 2, 7))
	start := time.Now()
	a.fedNow().Send(2, msgs)
	var hbAfter time.Duration
	select {
	case v := <-hb:
		before, hbAfter = int(v), time.Since(start)
	case <-time.After(30 * time.Second):
		t.Fatal("the heartbeat never arrived")
	}
	testlog.WaitFor(t, 30*time.Second, "every append delivered", func() bool { return appends.Load() == n })
	t.Logf("heartbeat delivered %v after the Send, after %d of %d appends; all appends after %v", hbAfter, before, n, time.Since(start))
	return before, n
}

// TestRaftHeartbeatNotBehindAppends: a heartbeat sent after 32 MiB of appends arrives before
// the appends are all delivered; with everything on one stream (the broken variant) it
// arrives after the last one, so the comparison can fail.
func TestRaftHeartbeatNotBehindAppends(t *testing.T) {
	cfg := testRaftConfig()
	cfg.QueueBytes = 128 << 20
	t.Run("priority", func(t *testing.T) {
		before, total := heartbeatBehind(t, cfg)
		if before >= total {
			t.Errorf("the heartbeat waited for all %d appends", total)
		}
	})
	t.Run("broken-one-stream", func(t *testing.T) {
		broken := cfg
		broken.brokenOneStream = true
		before, total := heartbeatBehind(t, broken)
		if before != total {
			t.Errorf("one stream: the heartbeat came after %d of %d appends; the test cannot tell the streams apart", before, total)
		}
	})
}

// dialRaft opens a raft stream to dst as node from (its certificate) and sends one
// heartbeat on it. It returns the ERROR the node answers with, or nil once dst delivered the
// heartbeat (the stream was accepted).
func dialRaft(t *testing.T, from, dst *raftNode, open *wire.Raft) *wire.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	delivered := make(chan struct{}, 1)
	dst.onDeliver(func([]replica.Message) {
		select {
		case delivered <- struct{}{}:
		default:
		}
	})
	conn, err := quic.DialAddr(ctx, dst.addr, &tls.Config{
		Certificates: []tls.Certificate{from.cert}, RootCAs: from.m.pool,
		NextProtos: []string{wire.PeerALPN}, ServerName: dst.name, MinVersion: tls.VersionTLS13,
	}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := replica.EncodeBatch(nil, open.From, open.To, []replica.Message{heartbeat(open.From, open.To, 1)})
	if err != nil {
		t.Fatal(err)
	}
	w := wire.NewWriter(str)
	w.Write(open)
	w.Write(&wire.RaftBatch{Batch: batch})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	answer := make(chan error, 1)
	go func() {
		fr, err := wire.NewReader(str, wire.Limits{}).Read()
		if e, ok := fr.(*wire.ErrorFrame); ok {
			err = e.AsError()
		}
		answer <- err
	}()
	defer func() { str.CancelRead(0); <-answer }()
	select {
	case err := <-answer:
		answer <- err
		var e *wire.Error
		if !errors.As(err, &e) {
			t.Fatalf("raft stream ended without an ERROR: %v", err)
		}
		return e
	case <-delivered:
		return nil
	case <-ctx.Done():
		t.Fatal("no answer to the raft stream")
	}
	return nil
}

// TestRaftRefusesOthers: a node of another region, authenticated by the mesh CA, is refused
// a raft stream (ERROR forbidden, naming the regions), as is a node of the region naming the
// wrong raft IDs; the right opener is accepted.
func TestRaftRefusesOthers(t *testing.T) {
	m := newFedMesh(t)
	eu1, eu2 := m.addRaft("eu", 1, testRaftConfig()), m.addRaft("eu", 2, testRaftConfig())
	us := m.addRaft("us", 3, testRaftConfig())
	testlog.WaitFor(t, 20*time.Second, "eu-0's links", func() bool { return len(eu1.fedNow().Links()) == 2 })
	for _, c := range []struct {
		name string
		from *raftNode
		open wire.Raft
		code wire.Code
		msg  string
	}{
		{"other region", us, wire.Raft{Class: wire.RaftControl, From: 3, To: 1}, wire.CodeForbidden, `node "node-us-2" is in region "us": only nodes of region "eu"`},
		{"wrong receiver", eu2, wire.Raft{Class: wire.RaftControl, From: 2, To: 9}, wire.CodeForbidden, "raft stream for raft node 9"},
		{"forged sender", eu2, wire.Raft{Class: wire.RaftBulk, From: 3, To: 1}, wire.CodeForbidden, "as raft node 3, but its raft ID is 2"},
		{"unknown class", eu2, wire.Raft{Class: 7, From: 2, To: 1}, wire.CodeProtocol, "unknown raft stream class 7"},
		{"accepted", eu2, wire.Raft{Class: wire.RaftControl, From: 2, To: 1}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := dialRaft(t, c.from, eu1, &c.open)
			switch {
			case c.code == 0 && e != nil:
				t.Fatalf("refused: %v", e)
			case c.code != 0 && e == nil:
				t.Fatal("accepted")
			case c.code != 0 && (e.Code != c.code || !bytes.Contains([]byte(e.Message), []byte(c.msg))):
				t.Fatalf("got %v (code %d), want code %d with %q", e, e.Code, c.code, c.msg)
			}
		})
	}
	// Nor does the other region's node send raft traffic of its own over its links.
	if stats, _ := us.fedNow().RaftStats(); len(stats) != 0 {
		t.Errorf("node of region us has raft state for %v", stats)
	}
}

// TestRaftReconnect: when a link's connection is cut, its raft streams are opened again on
// the new connection, messages flow again, and the counters go on from where they were.
func TestRaftReconnect(t *testing.T) {
	m := newFedMesh(t)
	a, b := m.addRaft("eu", 1, testRaftConfig()), m.addRaft("eu", 2, testRaftConfig())
	var got atomic.Int64
	b.onDeliver(func(msgs []replica.Message) { got.Add(int64(len(msgs))) })
	m.waitRaftUp(a, b)
	a.fedNow().Send(2, []replica.Message{heartbeat(1, 2, 1), appendMsg(1, 2, 1, []byte("e"))})
	testlog.WaitFor(t, 10*time.Second, "first messages", func() bool { return got.Load() == 2 })
	before, _ := a.fedNow().RaftStats()
	if n := a.fedNow().cutLinks("eu"); n != 1 {
		t.Fatalf("cut %d connections", n)
	}
	testlog.WaitFor(t, 10*time.Second, "the raft streams opened again", func() bool {
		s, _ := a.fedNow().RaftStats()
		return s[b.name].Control.Opened == 2 && s[b.name].Bulk.Opened == 2
	})
	m.waitRaftUp(a, b)
	a.fedNow().Send(2, []replica.Message{heartbeat(1, 2, 2), appendMsg(1, 2, 2, []byte("e"))})
	testlog.WaitFor(t, 10*time.Second, "messages after the reconnect", func() bool { return got.Load() == 4 })
	after, _ := a.fedNow().RaftStats()
	if after[b.name].Control.SentMessages != before[b.name].Control.SentMessages+1 || after[b.name].Bulk.SentMessages != before[b.name].Bulk.SentMessages+1 {
		t.Errorf("counters before %+v, after %+v", before[b.name], after[b.name])
	}
	if li := a.fedNow().Links()[0]; li.Reconnects == 0 {
		t.Errorf("link shows no reconnect: %+v", li)
	}
	// The same figures in Prometheus, one series per peer, class (and drop reason).
	a.fedMu.Lock()
	reg := a.reg
	a.fedMu.Unlock()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range mt.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			series[mf.GetName()]++
			if mf.GetName() == "quicmq_raft_sent_messages_total" && labels["class"] == "bulk" {
				if labels["peer_node"] != b.name || labels["peer_region"] != "eu" || mt.GetCounter().GetValue() != float64(after[b.name].Bulk.SentMessages) {
					t.Errorf("bulk sent series %v = %v, want %d", labels, mt.GetCounter().GetValue(), after[b.name].Bulk.SentMessages)
				}
			}
		}
	}
	if series["quicmq_raft_sent_messages_total"] != 2 || series["quicmq_raft_dropped_messages_total"] != 6 || series["quicmq_raft_queued_messages"] != 2 {
		t.Errorf("raft series: %v", series)
	}
}

// fedTransport sends through whichever Federation the node runs now (none while stopped).
type fedTransport struct{ n *raftNode }

func (t fedTransport) Send(to uint64, msgs []replica.Message) {
	if f := t.n.fedNow(); f != nil {
		f.Send(to, msgs)
	}
}

// TestRaftDriversOverQUIC: three replica.Drivers, each on its own Pebble, elect a leader and
// commit proposals over the federation's raft streams; the leader's federation is stopped
// (a new leader is elected by the other two, and commits go on), then started again (the
// old leader catches up); every node ends with the same log.
func TestRaftDriversOverQUIC(t *testing.T) {
	m := newFedMesh(t)
	const group = 7
	ids := []uint64{11, 12, 13}
	type rep struct {
		n  *raftNode
		sm *replica.LogSM
		d  *replica.Driver
	}
	var reps []*rep
	for _, id := range ids {
		n := m.addRaft("eu", id, testRaftConfig())
		db, err := pebble.Open(t.TempDir(), &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quietPebble{}})
		if err != nil {
			t.Fatal(err)
		}
		sm := replica.NewLogSM(db)
		d, err := replica.New(replica.Config{
			NodeID: id, DB: db, StateMachine: sm, Transport: fedTransport{n},
			TickInterval: 20 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		n.onDeliver(d.Deliver)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("driver %d: %v", id, err)
			}
			db.Close()
		})
		if err := d.AddGroup(ctx, group, ids); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, &rep{n: n, sm: sm, d: d})
	}
	leader := func(skip *rep) *rep {
		var l *rep
		testlog.WaitFor(t, 30*time.Second, "a leader", func() bool {
			for _, r := range reps {
				if st, err := r.d.Status(context.Background(), group); r != skip && err == nil && st.RaftState.String() == "StateLeader" {
					l = r
					return true
				}
			}
			return false
		})
		return l
	}
	propose := func(skip *rep, from, to int) {
		for i := from; i < to; i++ {
			for {
				l := leader(skip)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := l.d.Propose(ctx, group, []byte(fmt.Sprintf("rec-%d", i)))
				cancel()
				if err == nil {
					break
				}
				if !errors.Is(err, replica.ErrNotLeader) && !errors.Is(err, replica.ErrDropped) {
					t.Fatalf("proposal %d: %v", i, err)
				}
			}
		}
	}
	propose(nil, 0, 20)
	old := leader(nil)
	old.n.stopFed()
	t.Logf("stopped the federation of the leader, raft node %d", old.n.id)
	propose(old, 20, 40) // led by one of the other two
	old.n.startFed()
	for _, o := range m.raftNodes() {
		o.fedNow().PeersChanged()
	}
	propose(nil, 40, 60)
	testlog.WaitFor(t, 30*time.Second, "every node applied 60 records", func() bool {
		for _, r := range reps {
			if next, _ := r.sm.Next(group); next < 60 {
				return false
			}
		}
		return true
	})
	want, err := reps[0].sm.Read(group, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, rec := range want {
		seen[string(rec.Data)] = true
	}
	for i := range 60 {
		if !seen[fmt.Sprintf("rec-%d", i)] {
			t.Errorf("rec-%d missing", i)
		}
	}
	for _, r := range reps[1:] {
		got, err := r.sm.Read(group, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("node %d holds %d records, node %d %d", r.n.id, len(got), reps[0].n.id, len(want))
		}
		for i := range got {
			if got[i].Offset != want[i].Offset || !bytes.Equal(got[i].Data, want[i].Data) {
				t.Fatalf("node %d offset %d: %q, node %d: %q", r.n.id, got[i].Offset, got[i].Data, reps[0].n.id, want[i].Data)
			}
		}
	}
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic("pebble fatal: " + fmt.Sprintf(format, args...))
}

// FuzzRaftStream feeds bytes to a raft stream's reader: it must never panic, and every
// batch it delivers names only the stream's two ends.
func FuzzRaftStream(f *testing.F) {
	b1, _ := replica.EncodeBatch(nil, 1, 2, []replica.Message{heartbeat(1, 2, 3), appendMsg(1, 2, 4, []byte("data"))})
	f.Add(wire.Append(nil, &wire.RaftBatch{Batch: b1}))
	b2, _ := replica.EncodeBatch(nil, 3, 2, []replica.Message{heartbeat(3, 2, 1)})
	f.Add(wire.Append(wire.Append(nil, &wire.RaftBatch{Batch: b1}), &wire.RaftBatch{Batch: b2}))
	f.Add(wire.Append(nil, &wire.Raft{Class: 1, From: 1, To: 2}))
	f.Add([]byte{0x49, 0, 0, 0, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		open := &wire.Raft{Class: wire.RaftBulk, From: 1, To: 2}
		var c raftClass
		rr := wire.NewReader(bytes.NewReader(data), wire.Limits{MaxFrame: 1 << 20})
		readRaftStream(rr, open, &c, func(msgs []replica.Message) {
			for _, m := range msgs {
				if m.Raft.GetFrom() != 1 || m.Raft.GetTo() != 2 {
					t.Fatalf("delivered a message from %d to %d", m.Raft.GetFrom(), m.Raft.GetTo())
				}
			}
		})
	})
}

func TestRaftNodeID(t *testing.T) {
	dir := t.TempDir()
	id, err := RaftNodeID(dir)
	if err != nil || id == 0 {
		t.Fatalf("RaftNodeID: %d, %v", id, err)
	}
	again, err := RaftNodeID(dir)
	if err != nil || again != id {
		t.Fatalf("second RaftNodeID: %d, %v; want %d", again, err, id)
	}
	other, err := RaftNodeID(t.TempDir())
	if err != nil || other == id {
		t.Fatalf("a new data directory got %d (%v), the first %d", other, err, id)
	}
	if err := writeSynced(dir, raftIDFile, "zz\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := RaftNodeID(dir); err == nil || !bytes.Contains([]byte(err.Error()), []byte(`holds "zz"`)) {
		t.Fatalf("corrupt ID file: %v", err)
	}
}

func TestRaftConfigValidate(t *testing.T) {
	err := RaftConfig{ID: 1, MaxFrame: 100, QueueBytes: -1}.validate()
	if len(err) != 3 {
		t.Fatalf("got %v, want three problems (no Deliver, negative, MaxFrame too small)", err)
	}
}

// TestDecodeRaftBatchRefusesForgery: a batch, or a message in it, that names another sender
// or receiver than the stream's opener is refused.
func TestDecodeRaftBatchRefusesForgery(t *testing.T) {
	for _, c := range []struct {
		name     string
		from, to uint64
		msgs     []replica.Message
		want     string
	}{
		{"ok", 1, 2, []replica.Message{heartbeat(1, 2, 1), appendMsg(1, 2, 1, nil)}, ""},
		{"batch sender", 3, 2, []replica.Message{heartbeat(3, 2, 1)}, "batch from raft node 3 to 2"},
		{"message sender", 1, 2, []replica.Message{appendMsg(3, 2, 1, nil)}, "from raft node 3 to 2 on the stream from 1 to 2"},
		{"message receiver", 1, 2, []replica.Message{appendMsg(1, 4, 1, nil)}, "from raft node 1 to 4"},
	} {
		b, err := replica.EncodeBatch(nil, c.from, c.to, c.msgs)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := decodeRaftBatch(b, 1, 2)
		switch {
		case c.want == "" && (err != nil || len(msgs) != len(c.msgs)):
			t.Errorf("%s: %d messages, %v", c.name, len(msgs), err)
		case c.want != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want))):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestRaftQueueBounds: a class queue takes what fits its message and byte bounds and drops
// (and counts) the rest: everything while no stream is open, a message larger than a frame,
// and what is queued when its last stream ends.
func TestRaftQueueBounds(t *testing.T) {
	cfg := RaftConfig{QueueMessages: 3, QueueBytes: 300, MaxFrame: 64 << 10}.withDefaults()
	c := raftClass{wake: make(chan struct{}, 1)}
	q := func(sizes ...int) []raftQueued {
		var out []raftQueued
		for _, s := range sizes {
			out = append(out, raftQueued{m: heartbeat(1, 2, 0), size: s})
		}
		return out
	}
	c.enqueue(q(10, 10), cfg)
	if s := c.stats(); s.DroppedNoStream != 2 || s.Queued != 0 {
		t.Fatalf("no stream open: %+v", s)
	}
	c.setUp(true)
	c.enqueue(q(100, 100, 200, 50, 50, 64<<10), cfg) // 200 is over the bytes, the last over a frame, the second 50 over the count
	s := c.stats()
	if s.Queued != 3 || s.DroppedFull != 2 || s.DroppedTooLarge != 1 {
		t.Fatalf("bounded queue: %+v", s)
	}
	select {
	case <-c.wake:
	default:
		t.Fatal("the writer was not woken")
	}
	if got := c.take(); len(got) != 3 || got[0].size != 100 || got[2].size != 50 {
		t.Fatalf("take: %+v", got)
	}
	c.setUp(true) // a replaced link's writer, for a moment
	c.enqueue(q(10), cfg)
	c.setUp(false)
	if s := c.stats(); !s.Open || s.Queued != 1 {
		t.Fatalf("one writer left: %+v", s)
	}
	c.setUp(false)
	if s := c.stats(); s.Open || s.Queued != 0 || s.DroppedNoStream != 3 {
		t.Fatalf("no writer left: %+v", s)
	}
}

// TestRaftRetryLevel: a refusal by a peer that does not know this node yet (every start of a
// region, before gossip converges) is not a warning unless it lasts; any other failure warns
// once; repeats are quiet.
func TestRaftRetryLevel(t *testing.T) {
	unknown := fmt.Errorf("raft stream to n2: %w", wire.Errorf(wire.CodeForbidden, "node %q is not a known peer of node %q", "n3", "n2"))
	other := errors.New("raft stream to n2: stream reset")
	for _, c := range []struct {
		err     error
		repeats int
		want    slog.Level
	}{
		{unknown, 1, slog.LevelInfo},
		{unknown, 2, slog.LevelWarn},
		{unknown, 3, slog.LevelDebug},
		{other, 1, slog.LevelWarn},
		{other, 2, slog.LevelDebug},
	} {
		if got := raftRetryLevel(c.err, c.repeats); got != c.want {
			t.Errorf("raftRetryLevel(%v, %d) = %v, want %v", c.err, c.repeats, got, c.want)
		}
	}
}
