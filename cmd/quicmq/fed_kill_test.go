package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// moveLineRE matches a node's log lines about replica moves, which the resize campaigns
// judge moves by (resize_campaign_test.go).
var moveLineRE = regexp.MustCompile(`msg="(replica move|region metadata: (moving a group|a group's replica mov)|undoing a replica move)`)

// meshOptions are how a test mesh's node processes start: keeping their replica-move lines.
var meshOptions = nodeproc.Options{Keep: []*regexp.Regexp{moveLineRE}, StartTimeout: 30 * time.Second}

// startMeshProcess starts `quicmq node` as a node of a test mesh (internal/nodeproc):
// anonymous clients, gossip in the clear, clients on a free loopback port unless args say
// otherwise (nodeproc.MeshFlags); it keeps the node's replica-move lines.
func startMeshProcess(t *testing.T, bin, name string, args ...string) *nodeproc.Process {
	t.Helper()
	return meshOptions.Start(t, bin, name, append(nodeproc.MeshFlags(name), args...)...)
}

// newTestMesh is a nodeproc.Mesh of regions, nodes(region) nodes each (nodes nil: one),
// started as startMeshProcess starts a node (meshOptions), each with flags(region) after the
// mesh's, asked at each start (flags nil: none). It starts none (Mesh.Start, Region.Start).
func newTestMesh(t *testing.T, bin string, regions []string, nodes func(region string) int, flags func(region string) []string) *nodeproc.Mesh {
	t.Helper()
	if nodes == nil {
		nodes = func(string) int { return 1 }
	}
	m := nodeproc.NewMesh(t, bin, regions, nodes)
	for _, r := range m.Regions {
		r.Options = meshOptions
		if flags != nil {
			name := r.Name
			r.Flags = func(*nodeproc.Node) []string { return flags(name) } // at each start
		}
	}
	return m
}

// freeAddr is nodeproc.FreeAddr: a loopback address free for TCP and UDP that no other
// harness of this test process is given.
func freeAddr(t testing.TB) string { return nodeproc.FreeAddr(t) }

// k9Payload is the payload of the record published with sequence number i: the origin
// offset it must land at (one publisher, one stream, one topic) plus padding.
func k9Payload(i uint64) string { return fmt.Sprintf("k9-%d-%s", i, strings.Repeat("x", 400)) }

// verifyMirror reads the mirroring node's log of topic from earliest with client.Subscribe
// and checks that it holds exactly the origin's records, once each, in origin order: at
// offset i, origin eu, origin offset i, the payload published with sequence i. It returns
// the number of records the log holds.
func verifyMirror(t *testing.T, conn *client.Conn, topic string, when string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics, err := conn.Topics(ctx, topic)
	if err != nil {
		t.Fatalf("%s: topics: %v", when, err)
	}
	if len(topics) == 0 {
		return 0
	}
	next := topics[0].Next
	sub, err := conn.Subscribe(ctx, topic, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatalf("%s: subscribe: %v", when, err)
	}
	defer sub.Close()
	for off := uint64(0); off < next; off++ {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("%s: reading offset %d of %d: %v", when, off, next, err)
		}
		if rec.Offset != off || rec.OriginRegion != "eu" || rec.OriginOffset != off || string(rec.Payload) != k9Payload(off) {
			p := string(rec.Payload)
			if len(p) > 20 {
				p = p[:20] + "..."
			}
			t.Fatalf("%s: offset %d holds origin %s@%d payload %q, want eu@%d %q...: a gap, a duplicate or a reorder",
				when, rec.Offset, rec.OriginRegion, rec.OriginOffset, p, off, k9Payload(off)[:len(fmt.Sprint(off))+4])
		}
	}
	return next
}

// topicsRaces counts Topics calls that failed with "close called for canceled stream": the
// node answered and stopped reading before the client closed its side (see the report).
var topicsRaces atomic.Int64

func topicNext(ctx context.Context, conn *client.Conn, topic string) (uint64, error) {
	for {
		ts, err := conn.Topics(ctx, topic)
		if err != nil && strings.Contains(err.Error(), "close called for canceled stream") && ctx.Err() == nil {
			topicsRaces.Add(1)
			continue
		}
		if err != nil || len(ts) == 0 {
			return 0, err
		}
		return ts[0].Next, nil
	}
}

func dialCA(t *testing.T, addr, caDir string) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, client.Options{CAFile: filepath.Join(caDir, "ca.pem")}, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Two real node processes, regions eu and us, one mesh CA. eu is published to without pause
// (client SDK); us mirrors k9.> (--mirror). us is killed with SIGKILL in the middle of its
// catch-up, again and again: after each restart its log of the topic holds exactly eu's
// records, once each, in eu's order, and in the end all of them (I7 across kill -9).
// QUICMQ_FED_KILL_CYCLES sets the number of kills in the middle of a catch-up (default 10).
func TestKill9MirroringNodeDuringCatchUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	t.Parallel()
	cycles := 10
	if v, err := strconv.Atoi(os.Getenv("QUICMQ_FED_KILL_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	m := newTestMesh(t, quicmqBinary(t), []string{"eu", "us"}, nil, func(r string) []string {
		if r == "us" {
			return []string{"--mirror", "k9.>"}
		}
		return nil
	})
	caDir := m.Regions[0].CADir
	eu := m.Region("eu").Start(0)
	startUS := func() *nodeproc.Process { return m.Region("us").Start(0) }
	const topic = "k9.t"

	// The publisher: one stream, pipelined, a steady 100 records/s plus a burst while us is
	// down before each kill in the middle of a catch-up. The records are sequence-numbered:
	// with one publisher on one stream, record i lands at eu's offset i; acked counts the
	// records eu acknowledged (in order).
	pubConn := dialCA(t, eu.Addr, caDir)
	var acked atomic.Uint64
	burst := make(chan int, 1)
	pubCtx, stopPub := context.WithCancel(context.Background())
	futures := make(chan *client.Future, 8192)
	pubErr := make(chan error, 2)
	go func() {
		defer close(futures)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(0); ; {
			n := 1
			select {
			case <-pubCtx.Done():
				return
			case <-tick.C:
			case n = <-burst:
			}
			for range n {
				f, err := pubConn.PublishAsync(pubCtx, client.Message{Topic: topic, Payload: []byte(k9Payload(seq))})
				if err != nil {
					if pubCtx.Err() == nil {
						pubErr <- err
					}
					return
				}
				futures <- f
				seq++
			}
		}
	}()
	ackDone := make(chan struct{})
	go func() {
		defer close(ackDone)
		for f := range futures {
			ack, err := f.Wait(context.Background())
			if err != nil {
				if pubCtx.Err() == nil {
					pubErr <- err
				}
				continue
			}
			if ack.Offset != acked.Load() {
				pubErr <- fmt.Errorf("ack at offset %d, expected %d: the origin reordered one stream", ack.Offset, acked.Load())
				return
			}
			acked.Add(1)
		}
	}()
	defer func() { stopPub(); <-ackDone }()

	type killFigure struct {
		recovered, backlog, atKill, originAtKill uint64
		listen, linkUp, firstProgress            time.Duration
	}
	var figs []killFigure
	var verified []uint64
	midCatchUp := 0
	for attempt := 0; midCatchUp < cycles; attempt++ {
		if attempt >= 3*cycles {
			t.Fatalf("only %d of %d kills landed in the middle of a catch-up in %d attempts", midCatchUp, cycles, attempt)
		}
		select {
		case err := <-pubErr:
			t.Fatalf("publisher: %v", err)
		default:
		}
		// Restart, verify what the last kill left, and kill again (a plain kill).
		us := startUS()
		usConn := dialCA(t, us.Addr, caDir)
		verified = append(verified, verifyMirror(t, usConn, topic, fmt.Sprintf("after kill %d", attempt)))
		if n := len(figs); n > 0 && verified[len(verified)-1] < figs[n-1].atKill {
			t.Fatalf("after kill %d: us holds %d records, but %d were durable before the kill", attempt, verified[len(verified)-1], figs[n-1].atKill)
		}
		us.Kill()
		usConn.Close()
		before := acked.Load()
		burst <- 1500 // a backlog of several mirror batches (1024 records each) builds up at eu
		testlog.WaitFor(t, 30*time.Second, "eu to acknowledge the burst", func() bool { return acked.Load() >= before+1500 })

		// Restart and kill as soon as the catch-up is seen to make progress.
		us = startUS()
		usConn = dialCA(t, us.Addr, caDir)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		recovered, err := topicNext(ctx, usConn, topic)
		if err != nil {
			t.Fatal(err)
		}
		if v := verified[len(verified)-1]; recovered < v {
			t.Fatalf("after kill %d: us holds %d records, but %d were durable before the kill", attempt, recovered, v)
		}
		origin := acked.Load()
		var now uint64
		testlog.Until(ctx, func() bool {
			if now, err = topicNext(ctx, usConn, topic); err != nil {
				t.Fatalf("us topics: %v\n%s", err, us.Tail())
			}
			return now > recovered
		})
		progress := time.Since(us.Begin)
		originAtKill := acked.Load()
		mid := now < origin // eu's records of before the restart not all mirrored yet
		us.Kill()
		cancel()
		usConn.Close()
		var linkUp time.Duration
		select {
		case linkUp = <-us.LinkUp():
		default:
		}
		f := killFigure{recovered: recovered, backlog: origin - min(origin, recovered), atKill: now, originAtKill: originAtKill,
			listen: us.Listen, linkUp: linkUp, firstProgress: progress}
		figs = append(figs, f)
		if mid {
			midCatchUp++
		}
		t.Logf("kill %d: recovered %d, backlog %d; killed %v after exec (listening %v, link up %v) with %d mirrored of %d at eu%s",
			attempt, recovered, f.backlog, progress.Round(time.Millisecond), us.Listen.Round(time.Millisecond),
			linkUp.Round(time.Millisecond), now, originAtKill, map[bool]string{true: " (mid catch-up)", false: " (caught up: not counted)"}[mid])
	}

	// Final: a last burst while us is down, then stop publishing, restart, catch up
	// completely, verify everything.
	const finalBurst = 10000
	burst <- finalBurst
	testlog.WaitFor(t, 60*time.Second, "eu to acknowledge the final burst", func() bool {
		return acked.Load() >= figs[len(figs)-1].originAtKill+finalBurst
	})
	stopPub()
	<-ackDone
	select {
	case err := <-pubErr:
		t.Fatalf("publisher: %v", err)
	default:
	}
	total := acked.Load()
	us := startUS()
	usConn := dialCA(t, us.Addr, caDir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recovered, _ := topicNext(ctx, usConn, topic)
	start := time.Now()
	testlog.Until(ctx, func() bool {
		n, err := topicNext(ctx, usConn, topic)
		if err != nil {
			t.Fatalf("us topics: %v\n%s", err, us.Tail())
		}
		return n >= total
	})
	catchUp := time.Since(start)
	euNext, _ := topicNext(ctx, dialCA(t, eu.Addr, caDir), topic)
	if euNext != total {
		t.Fatalf("eu's log has %d records, %d were acknowledged", euNext, total)
	}
	if n := verifyMirror(t, usConn, topic, "final"); n != total {
		t.Fatalf("us's log has %d records, eu %d", n, total)
	}

	var listens, links []time.Duration
	for _, f := range figs {
		listens = append(listens, f.listen)
		if f.linkUp > 0 {
			links = append(links, f.linkUp)
		}
	}
	slices.Sort(listens)
	slices.Sort(links)
	med := func(ds []time.Duration) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[len(ds)/2].Round(time.Millisecond)
	}
	t.Logf("%d kills mid catch-up (%d kills in all, every restart verified from earliest: %v records)", midCatchUp, 2*len(figs), verified)
	if n := topicsRaces.Load(); n > 0 {
		t.Logf("client Topics failed %d times with \"close called for canceled stream\" (retried)", n)
	}
	t.Logf("restart figures (median): exec -> listening %v, exec -> link up %v", med(listens), med(links))
	t.Logf("final: %d records at eu; us recovered %d and caught up %d records in %v (%.0f records/s); all once, in order",
		total, recovered, total-recovered, catchUp.Round(time.Millisecond), float64(total-recovered)/catchUp.Seconds())
}
