package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
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

// `quicmq dev` (the README's first command) starts three regions whose nodes mirror each
// other: a record published in the first region reaches a subscriber of the last.
func TestDevMeshCrossRegion(t *testing.T) {
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- runMain(ctx, &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr},
			[]string{"dev", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"})
	}()
	regionRE := regexp.MustCompile(`region (\S+)\s+node \S+\s+(127\.0\.0\.1:\d+)`)
	caRE := regexp.MustCompile(`CA\s+(\S+)`)
	var addrs [][]string
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stdout.String(), "Press Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start: %s\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	addrs = regionRE.FindAllStringSubmatch(stdout.String(), -1)
	if len(addrs) != 3 {
		t.Fatalf("want 3 regions in:\n%s", stdout.String())
	}
	ca := caRE.FindStringSubmatch(stdout.String())[1]

	dialT := func(addr string) *client.Conn {
		c, err := client.Dial(context.Background(), addr, client.Options{CAFile: ca})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	sub, err := dialT(addrs[2][2]).Subscribe(context.Background(), "demo.>", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Interest travels to the other regions' links; publish until the record shows up.
	pub := dialT(addrs[0][2])
	if _, err := pub.Publish(context.Background(), client.Message{Topic: "demo.hello", Payload: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	rec, err := sub.Next(rctx)
	if err != nil {
		t.Fatalf("no record in region %s: %v\n%s", addrs[2][1], err, stderr.String())
	}
	if string(rec.Payload) != "hello" || rec.OriginRegion != addrs[0][1] {
		t.Fatalf("got %q from %q", rec.Payload, rec.OriginRegion)
	}
	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("dev exited %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not stop within 30 s of its context ending")
	}
}

// quicmq sub --region replays another region's log through the link, from an offset.
func TestSubRegionReplay(t *testing.T) {
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- runMain(ctx, &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr},
			[]string{"dev", "--listen", "127.0.0.1:0", "--metrics", "", "--regions", "eu,us"})
	}()
	defer func() {
		cancel()
		<-exit
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stdout.String(), "Press Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	addrs := regexp.MustCompile(`region (\S+)\s+node \S+\s+(127\.0\.0\.1:\d+)`).FindAllStringSubmatch(stdout.String(), -1)
	ca := regexp.MustCompile(`CA\s+(\S+)`).FindStringSubmatch(stdout.String())[1]
	eu, us := addrs[0][2], addrs[1][2]

	code, _, errOut := runCLI(t, "a\nb\nc\nd\n", "pub", "--server", eu, "--ca", ca, "--topic", "replay.t")
	if code != 0 {
		t.Fatalf("pub: %d %s", code, errOut)
	}
	// The us node needs its link to eu; retry until the replay is served.
	for {
		code, out, errOut := runCLI(t, "", "sub", "--server", us, "--ca", ca, "--topic", "replay.t",
			"--region", "eu", "--from", "2", "--count", "2", "--idle", "3s")
		if code == 0 && out == "2\treplay.t\tc\n3\treplay.t\td\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sub --region eu: %d %q %s", code, out, errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// `quicmq dev --nodes 2`: two nodes per region. Records published through every node of one
// region reach subscribers on every node of the other, once each, in order.
func TestDevMeshTwoNodesPerRegion(t *testing.T) {
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- runMain(ctx, &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr},
			[]string{"dev", "--listen", "127.0.0.1:0", "--metrics", "", "--regions", "eu,us", "--nodes", "2"})
	}()
	defer func() {
		cancel()
		<-exit
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), "Press Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	addrs := regexp.MustCompile(`region (\S+)\s+node (\S+)\s+(127\.0\.0\.1:\d+)`).FindAllStringSubmatch(stdout.String(), -1)
	if len(addrs) != 4 || addrs[1][2] != "dev-eu-2" {
		t.Fatalf("want 4 nodes dev-eu-1 .. dev-us-2 in:\n%s", stdout.String())
	}
	ca := regexp.MustCompile(`CA\s+(\S+)`).FindStringSubmatch(stdout.String())[1]
	dialT := func(addr string) *client.Conn {
		c, err := client.Dial(context.Background(), addr, client.Options{CAFile: ca})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// The us subscribers first (interest travels to eu), then publish through both eu nodes:
	// the first publish of a topic waits until every node has the others' catalogs.
	var subs []*client.Subscription
	for _, a := range addrs[2:] {
		sub, err := dialT(a[3]).Subscribe(context.Background(), "demo.>", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	topics := []string{"demo.a", "demo.b", "demo.c", "demo.d"}
	for i, a := range addrs[:2] {
		c := dialT(a[3])
		for _, topic := range topics {
			if _, err := c.Publish(context.Background(), client.Message{Topic: topic, Payload: []byte{byte('0' + i)}}); err != nil {
				t.Fatalf("publish %s through %s: %v", topic, a[2], err)
			}
		}
	}
	for si, sub := range subs {
		rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
		got := map[string]string{}
		for range 2 * len(topics) {
			rec, err := sub.Next(rctx)
			if err != nil {
				t.Fatalf("subscriber on %s: %v\n%s", addrs[2+si][2], err, stderr.String())
			}
			got[rec.Topic] += string(rec.Payload)
		}
		rcancel()
		for _, topic := range topics {
			if got[topic] != "01" {
				t.Fatalf("subscriber on %s got %q for %s, want the records of both eu nodes in order", addrs[2+si][2], got[topic], topic)
			}
		}
	}
}
