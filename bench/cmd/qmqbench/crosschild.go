package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/client"
)

// The client processes of scenario 6 (cross.go), which this command runs again inside a
// namespace (the hidden commands crosspub, crosssub and crossrelay): they report to the parent
// on stdout.

// vethOf is the name of the namespace's end of its veth pair.
func vethOf(ns *lossy.Namespace) (string, error) {
	out, err := exec.Command("ip", "-n", ns.Name, "-o", "link", "show", "type", "veth").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("list veth of %s: %w: %s", ns.Name, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if fs := strings.Fields(l); len(fs) > 1 {
			return strings.SplitN(strings.TrimSuffix(fs[1], ":"), "@", 2)[0], nil
		}
	}
	return "", fmt.Errorf("no veth in %s", ns.Name)
}

// helperFlags are the flags crosspub and crosssub share.
func helperFlags(name string) (*flag.FlagSet, *string, *string, *int) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	addr := fs.String("addr", "", "the node's client address")
	ca := fs.String("ca", "", "the node's CA file")
	subs := fs.Int("subs", 100, "topics")
	return fs, addr, ca, subs
}

// runCrossPub is the hidden "crosspub" command, in region a: it creates the topics (one
// record each, acknowledged), says WARM, waits for GO on stdin, publishes at the fixed rate
// with the send time in each payload, waits for every ack, and prints its crossWindow.
func runCrossPub(args []string) error {
	fs, addr, ca, subs := helperFlags("crosspub")
	rate := fs.Int("rate", 2000, "records per second, all topics together")
	size := fs.Int("size", 128, "payload bytes")
	warmup := fs.Duration("warmup", time.Second, "publishing before the window")
	duration := fs.Duration("duration", 10*time.Second, "the window")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: *ca, Name: "cross-pub"}, *addr)
	if err != nil {
		return err
	}
	defer c.Close()
	for i := range *subs {
		if _, err := c.Publish(ctx, client.Message{Topic: crossTopic(i), Payload: []byte("warm-up")}); err != nil {
			return err
		}
	}
	fmt.Println("WARM")
	in := bufio.NewReader(os.Stdin)
	if l, err := in.ReadString('\n'); err != nil || strings.TrimSpace(l) != "GO" {
		return fmt.Errorf("expected GO on stdin: %q %v", l, err)
	}

	futures := make(chan *client.Future, 1<<16)
	var failed int
	var acks sync.WaitGroup
	acks.Add(1)
	go func() {
		defer acks.Done()
		for f := range futures {
			if _, err := f.Wait(context.Background()); err != nil {
				failed++
			}
		}
	}()
	size16 := max(*size, 16)
	start := time.Now()
	winStart, winEnd := start.Add(*warmup), start.Add(*warmup+*duration)
	w := crossWindow{WinStart: winStart.UnixNano(), WinEnd: winEnd.UnixNano(), SentPerSub: make([]int, *subs)}
	var pubErr error
	for k := 0; pubErr == nil; {
		now := time.Now()
		if !now.Before(winEnd) {
			break
		}
		due := int(now.Sub(start).Seconds() * float64(*rate))
		for ; k < due && pubErr == nil; k++ {
			payload := make([]byte, size16)
			t := time.Now()
			binary.BigEndian.PutUint64(payload, uint64(t.UnixNano()))
			binary.BigEndian.PutUint64(payload[8:], uint64(k))
			i := k % *subs
			if !t.Before(winStart) && t.Before(winEnd) {
				w.SentPerSub[i]++
				w.Sent++
			}
			w.Published++
			var f *client.Future
			if f, pubErr = c.PublishAsync(ctx, client.Message{Topic: crossTopic(i), Payload: payload}); pubErr == nil {
				futures <- f
			}
		}
		time.Sleep(time.Millisecond)
	}
	close(futures)
	acks.Wait()
	if pubErr != nil {
		w.Notes = append(w.Notes, fmt.Sprintf("publish failed: %v", pubErr))
	}
	if failed > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("%d publishes not acknowledged", failed))
	}
	return json.NewEncoder(os.Stdout).Encode(w)
}

// runCrossSub is the hidden "crosssub" command, in region b: one subscription per mirrored
// topic on one connection to b's node. It says READY once every topic's warm-up record was
// mirrored and delivered, reads the crossWindow from stdin, waits until every topic has its
// window's records (or the drain ends) and prints, per topic, [send, arrival] unix ns of
// every timestamped record.
func runCrossSub(args []string) error {
	fs, addr, ca, subs := helperFlags("crosssub")
	fs.Parse(args)
	n := *subs
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: *ca, Name: "cross-sub"}, *addr)
	if err != nil {
		return err
	}
	var mu sync.Mutex // guards samples and warm
	samples := make([][][2]int64, n)
	warm := 0
	warmed := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		s, err := c.Subscribe(ctx, crossTopic(i), client.SubscribeOptions{From: client.Earliest})
		if err != nil {
			c.Close()
			return fmt.Errorf("subscribe %s: %w", crossTopic(i), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := s.Next(context.Background()) // ends when the connection closes
				if err != nil {
					return
				}
				now := time.Now().UnixNano()
				mu.Lock()
				if len(r.Payload) < 16 {
					if warm++; warm == n {
						close(warmed)
					}
				} else {
					samples[i] = append(samples[i], [2]int64{int64(binary.BigEndian.Uint64(r.Payload)), now})
				}
				mu.Unlock()
			}
		}()
	}
	defer func() {
		c.Close()
		wg.Wait()
	}()
	select {
	case <-warmed:
	case <-time.After(60 * time.Second):
		return errors.New("the topics' warm-up records were not all mirrored within 60 s")
	}
	fmt.Println("READY")
	l, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read window: %w", err)
	}
	var w crossWindow
	if err := json.Unmarshal([]byte(l), &w); err != nil {
		return err
	}
	complete := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			got := 0
			for _, s := range samples[i] {
				if s[0] >= w.WinStart && s[0] < w.WinEnd {
					got++
				}
			}
			if i < len(w.SentPerSub) && got < w.SentPerSub[i] {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(w.Drain); !complete() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	c.Close()
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(samples)
}

// runCrossRelay is the hidden "crossrelay" command, in region b: a lossy.Relay to
// --upstream (a's node) with --delay each way. It prints the address to dial and runs until
// stdin closes.
func runCrossRelay(args []string) error {
	fs := flag.NewFlagSet("crossrelay", flag.ExitOnError)
	upstream := fs.String("upstream", "", "address to relay to")
	delay := fs.Duration("delay", 0, "one-way delay, each way")
	fs.Parse(args)
	r, err := lossy.NewRelay(*upstream, *delay)
	if err != nil {
		return err
	}
	defer r.Close()
	fmt.Println(r.Addr())
	io.Copy(io.Discard, os.Stdin)
	return nil
}
