package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// devMesh is a `quicmq dev` running in this process for a test.
type devMesh struct {
	stdout, stderr *syncBuffer
	ca             string
	nodes          []devNode // in the order dev printed them
	stop           func()    // stops it and checks that it exited cleanly; also run by t.Cleanup
}

type devNode struct{ region, name, addr string }

var devNodeRE = regexp.MustCompile(`region (\S+)\s+node (\S+)\s+(127\.0\.0\.1:\d+)`)

// startDev runs `quicmq dev ARGS...` and waits until it says how to connect.
func startDev(t *testing.T, args ...string) *devMesh {
	t.Helper()
	d := &devMesh{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- runMain(ctx, &env{stdin: strings.NewReader(""), stdout: d.stdout, stderr: d.stderr}, append([]string{"dev"}, args...))
	}()
	var once sync.Once
	d.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-exit:
				if code != 0 {
					t.Errorf("dev exited %d: %s", code, d.stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Error("dev did not stop within 30 s of its context ending")
			}
		})
	}
	t.Cleanup(d.stop)
	testlog.WaitForErr(t, 90*time.Second, "dev to start", func() error {
		if strings.Contains(d.stdout.String(), "Press Ctrl-C") {
			return nil
		}
		return fmt.Errorf("%s\n%s", d.stdout.String(), d.stderr.String())
	})
	for _, m := range devNodeRE.FindAllStringSubmatch(d.stdout.String(), -1) {
		d.nodes = append(d.nodes, devNode{region: m[1], name: m[2], addr: m[3]})
	}
	d.ca = regexp.MustCompile(`CA\s+(\S+)`).FindStringSubmatch(d.stdout.String())[1]
	return d
}

// dial connects an SDK client to addr, trusting the dev mesh's CA.
func (d *devMesh) dial(t *testing.T, addr string) *client.Conn {
	t.Helper()
	c, err := client.Dial(context.Background(), client.Options{CAFile: d.ca}, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// `quicmq dev` (the README's first command) starts three regions whose nodes mirror each
// other: a record published in the first region reaches a subscriber of the last.
func TestDevMeshCrossRegion(t *testing.T) {
	d := startDev(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
	if len(d.nodes) != 3 {
		t.Fatalf("want 3 regions in:\n%s", d.stdout.String())
	}
	// With --metrics on port 0 the banner shows the ports the endpoints got, and the members
	// command it suggests works as printed.
	admins := regexp.MustCompile(`metrics/admin http://(127\.0\.0\.1:\d+)`).FindAllStringSubmatch(d.stdout.String(), -1)
	if len(admins) != 3 {
		t.Fatalf("want 3 metrics/admin addresses in:\n%s", d.stdout.String())
	}
	for _, a := range admins {
		if strings.HasSuffix(a[1], ":0") {
			t.Fatalf("the banner shows the configured port 0, not the bound one:\n%s", d.stdout.String())
		}
	}
	if !strings.Contains(d.stdout.String(), " members --admin http://"+admins[0][1]+"\n") {
		t.Fatalf("the members hint does not name %s:\n%s", admins[0][1], d.stdout.String())
	}
	code, out, errOut := runCLI(t, "", "members", "--admin", admins[0][1])
	if code != 0 || !strings.Contains(out, d.nodes[0].name) || !strings.Contains(out, "FEATURES") {
		t.Fatalf("members --admin %s: %d %q %s", admins[0][1], code, out, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] { // every member announces this build's features
		fields := strings.Fields(line) // the features are the last column: sorted name=level items
		if items := strings.Split(fields[len(fields)-1], ","); !slices.Contains(items, fmt.Sprintf("proto=%d", wire.PeerVersion)) {
			t.Errorf("members: %q does not end with this build's features", line)
		}
	}
	// --format json: one document, an array of objects with the documented fields.
	code, out, errOut = runCLI(t, "", "members", "--admin", "http://"+admins[0][1], "--format", "json")
	var members []map[string]any
	if err := json.Unmarshal([]byte(out), &members); code != 0 || err != nil || len(members) == 0 {
		t.Fatalf("members --format json: %d %v %q %s", code, err, out, errOut)
	}
	for _, f := range []string{"name", "region", "status", "quic", "gossip", "pools", "tags", "local"} {
		if _, ok := members[0][f]; !ok {
			t.Errorf("members --format json: no %q in %v", f, members[0])
		}
	}
	code, out, errOut = runCLI(t, "", "links", "--admin", "http://"+admins[0][1]+"/", "--format", "json")
	var links []map[string]any
	if err := json.Unmarshal([]byte(out), &links); code != 0 || err != nil || links == nil {
		t.Fatalf("links --format json: %d %v %q %s", code, err, out, errOut)
	}
	for _, l := range links {
		for _, f := range []string{"region", "node", "addr", "local_addr", "connected", "since", "last_error", "rtt_ms", "min_rtt_ms",
			"congestion_window_bytes", "sent_bytes", "received_bytes", "lost_packets", "mirrors", "mirror_streams", "mirrors_waiting", "mirrors_stalled", "migrations", "reconnects"} {
			if _, ok := l[f]; !ok {
				t.Errorf("links --format json: no %q in %v", f, l)
			}
		}
	}
	sub, err := d.dial(t, d.nodes[2].addr).Subscribe(context.Background(), "demo.>", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Interest travels to the other regions' links; the record shows up once it has.
	pub := d.dial(t, d.nodes[0].addr)
	if _, err := pub.Publish(context.Background(), client.Message{Topic: "demo.hello", Payload: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	rec, err := sub.Next(rctx)
	if err != nil {
		t.Fatalf("no record in region %s: %v\n%s", d.nodes[2].region, err, d.stderr.String())
	}
	if string(rec.Payload) != "hello" || rec.OriginRegion != d.nodes[0].region {
		t.Fatalf("got %q from %q", rec.Payload, rec.OriginRegion)
	}
	// links --format json lists every mirrored topic, asking the admin API page after page
	// (a page of one here); the table counts them.
	for _, topic := range []string{"demo.a", "demo.b"} {
		if _, err := pub.Publish(context.Background(), client.Message{Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.Next(rctx); err != nil {
			t.Fatalf("no record of %s in region %s: %v", topic, d.nodes[2].region, err)
		}
	}
	defer func(p int) { linksMirrorPage = p }(linksMirrorPage)
	linksMirrorPage = 1
	code, out, errOut = runCLI(t, "", "links", "--admin", admins[2][1], "--format", "json")
	var paged []struct {
		Region  string   `json:"region"`
		Mirrors []string `json:"mirrors"`
		Count   int      `json:"mirrored_topics"`
	}
	if err := json.Unmarshal([]byte(out), &paged); code != 0 || err != nil {
		t.Fatalf("links --format json: %d %v %q %s", code, err, out, errOut)
	}
	found := false
	for _, l := range paged {
		if l.Region == d.nodes[0].region {
			found = true
			if !slices.Equal(l.Mirrors, []string{"demo.a", "demo.b", "demo.hello"}) || l.Count != 3 {
				t.Fatalf("links --format json, the link to %s: %+v; want demo.a, demo.b, demo.hello", l.Region, l)
			}
		}
	}
	if !found {
		t.Fatalf("links --format json: no link to %s in %s", d.nodes[0].region, out)
	}
	d.stop()
}

// quicmq sub --region replays another region's log through the link, from an offset.
func TestSubRegionReplay(t *testing.T) {
	d := startDev(t, "--listen", "127.0.0.1:0", "--metrics", "", "--regions", "eu,us")
	ca, eu, us := d.ca, d.nodes[0].addr, d.nodes[1].addr
	code, _, errOut := runCLI(t, "a\nb\nc\nd\n", "pub", "--server", eu, "--ca", ca, "--topic", "replay.t")
	if code != 0 {
		t.Fatalf("pub: %d %s", code, errOut)
	}
	// The us node needs its link to eu; retry until the replay is served.
	testlog.WaitForErr(t, 20*time.Second, "sub --region eu to replay", func() error {
		code, out, errOut := runCLI(t, "", "sub", "--server", us, "--ca", ca, "--topic", "replay.t",
			"--region", "eu", "--from", "2", "--count", "2", "--idle", "3s")
		if code == 0 && out == "2\treplay.t\tc\n3\treplay.t\td\n" {
			return nil
		}
		return fmt.Errorf("exit %d, %q, %s", code, out, errOut)
	})
}

// `quicmq dev --nodes 2`: two nodes per region. Records published through every node of one
// region reach subscribers on every node of the other, once each, in order.
func TestDevMeshTwoNodesPerRegion(t *testing.T) {
	d := startDev(t, "--listen", "127.0.0.1:0", "--metrics", "", "--regions", "eu,us", "--nodes", "2")
	if len(d.nodes) != 4 || d.nodes[1].name != "dev-eu-2" {
		t.Fatalf("want 4 nodes dev-eu-1 .. dev-us-2 in:\n%s", d.stdout.String())
	}
	// The suggested commands name both nodes of a region, so a client can move between them.
	if want := " sub --server " + d.nodes[2].addr + "," + d.nodes[3].addr + " "; !strings.Contains(d.stdout.String(), want) {
		t.Fatalf("the banner does not suggest %q:\n%s", want, d.stdout.String())
	}
	dialT := func(addr string) *client.Conn { return d.dial(t, addr) }
	addrs := d.nodes
	// The us subscribers first (interest travels to eu), then publish through both eu nodes:
	// the first publish of a topic waits until every node has the others' catalogs.
	var subs []*client.Subscription
	for _, a := range addrs[2:] {
		sub, err := dialT(a.addr).Subscribe(context.Background(), "demo.>", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	topics := []string{"demo.a", "demo.b", "demo.c", "demo.d"}
	for i, a := range addrs[:2] {
		c := dialT(a.addr)
		for _, topic := range topics {
			if _, err := c.Publish(context.Background(), client.Message{Topic: topic, Payload: []byte{byte('0' + i)}}); err != nil {
				t.Fatalf("publish %s through %s: %v", topic, a.name, err)
			}
		}
	}
	for si, sub := range subs {
		rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
		got := map[string]string{}
		for range 2 * len(topics) {
			rec, err := sub.Next(rctx)
			if err != nil {
				t.Fatalf("subscriber on %s: %v\n%s", addrs[2+si].name, err, d.stderr.String())
			}
			got[rec.Topic] += string(rec.Payload)
		}
		rcancel()
		for _, topic := range topics {
			if got[topic] != "01" {
				t.Fatalf("subscriber on %s got %q for %s, want the records of both eu nodes in order", addrs[2+si].name, got[topic], topic)
			}
		}
	}
}

// `quicmq dev --nodes 3`: replicated regions (each topic on the three nodes of its region).
// Records published through every node of one region reach a subscriber in the other once
// each, in order, and a listing names the topic's leader and its three replicas.
func TestDevMeshReplicated(t *testing.T) {
	d := startDev(t, "--listen", "127.0.0.1:0", "--metrics", "", "--regions", "eu,us", "--nodes", "3")
	if len(d.nodes) != 6 || !strings.Contains(d.stdout.String(), "replicated: each topic on 3 of them") {
		t.Fatalf("want 6 nodes and replicated regions in:\n%s", d.stdout.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A region's metadata leader can change while 6 nodes start on a loaded machine: the
	// node then answers "unavailable ... retry", and a user retries (as this does).
	var sub *client.Subscription
	retryUnavailable(t, "subscribe demo.r in us", func() (err error) {
		sub, err = d.dial(t, d.nodes[4].addr).Subscribe(ctx, "demo.r", client.SubscribeOptions{})
		return err
	})
	for i, n := range d.nodes[:3] {
		retryUnavailable(t, "publish through "+n.name, func() error {
			_, err := d.dial(t, n.addr).Publish(ctx, client.Message{Topic: "demo.r", Payload: []byte{byte('0' + i)}})
			return err
		})
	}
	got := ""
	for range 3 {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %q: %v\n%s", got, err, d.stderr.String())
		}
		got += string(rec.Payload)
	}
	if got != "012" {
		t.Fatalf("us subscriber got %q, want 012", got)
	}
	list, err := d.dial(t, d.nodes[1].addr).Topics(ctx, "demo.r")
	if err != nil || len(list) != 1 || len(list[0].Replicas) != 3 || list[0].Leader == "" {
		t.Fatalf("listing: %+v, %v", list, err)
	}
}

// retryUnavailable runs op until it does not fail as unavailable (the answer a region gives
// while it elects a leader, asking for a retry), for up to a minute; any other error fails
// the test.
func retryUnavailable(t *testing.T, what string, op func() error) {
	t.Helper()
	testlog.WaitForErr(t, time.Minute, what, func() error {
		err := op()
		var e *client.Error
		if err != nil && (!errors.As(err, &e) || e.Code != client.CodeUnavailable) {
			t.Fatalf("%s: %v", what, err)
		}
		return err
	})
}
