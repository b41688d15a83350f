package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
)

// Three real node processes, regions eu, us and ap, each mirroring "events" from the others,
// and a real `quicmq sub --durable audit --failover` process at home in eu, reading the topic
// published in all three regions. eu is killed with SIGKILL mid-stream, right after its last
// records were acknowledged (before its mirrors could carry them all); the subscriber moves
// to us with its vector position and goes on while us and ap publish more; eu is restarted on
// its data and its mirrors catch up. The subscriber prints every acknowledged record of every
// region exactly once, each region's records in order.
func TestKill9HomeRegionSubscriberFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	bin := quicmqBinary(t)
	caDir := t.TempDir()
	regions := []string{"eu", "us", "ap"}
	data, listen, lan, wan := map[string]string{}, map[string]string{}, map[string]string{}, map[string]string{}
	for _, r := range regions {
		data[r], listen[r], lan[r], wan[r] = t.TempDir(), freeAddr(t), freeAddr(t), freeAddr(t)
	}
	start := func(r string) *nodeproc.Process {
		var join []string
		for _, o := range regions {
			if o != r {
				join = append(join, wan[o])
			}
		}
		return startMeshProcess(t, bin, r+"1", "--data", data[r], "--region", r, "--ca-dir", caDir, "--listen", listen[r],
			"--gossip", lan[r], "--wan", wan[r], "--wan-join", strings.Join(join, ","), "--mirror", "events")
	}
	procs := map[string]*nodeproc.Process{}
	for _, r := range regions {
		procs[r] = start(r)
	}
	pub := map[string]*client.Conn{}
	for _, r := range regions {
		pub[r] = dialCA(t, listen[r], caDir)
	}

	sub := exec.Command(bin, "sub", "--topic", "events", "--durable", "audit", "--ca", filepath.Join(caDir, "ca.pem"),
		"--server", listen["eu"], "--failover", listen["us"]+","+listen["ap"], "--idle-timeout", "2s")
	stdout, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	sub.Stderr = &stderr
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sub.Process.Signal(syscall.SIGINT)
		sub.Wait()
		t.Logf("quicmq sub's standard error:\n%s", stderr.String())
	}()
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := map[string]int{}
	printed := 0
	// readUntil takes the subscriber's lines until each region of want has printed that many
	// records, failing on a duplicate, a gap or a reorder of any region.
	readUntil := func(want map[string]int) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			done := true
			for r, n := range want {
				done = done && next[r] >= n
			}
			if done {
				return
			}
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("quicmq sub ended after %d records (%v)\n%s", printed, next, stderr.String())
				}
				f := strings.SplitN(line, "\t", 3)
				if len(f) != 3 {
					t.Fatalf("line %q: want OFFSET<TAB>TOPIC<TAB>PAYLOAD", line)
				}
				r, seq, _ := strings.Cut(f[2], "-")
				i, err := strconv.Atoi(seq)
				if err != nil {
					t.Fatalf("line %q: payload not REGION-N", line)
				}
				if i != next[r] {
					t.Fatalf("record %q printed after %s-%d: a duplicate, a gap or a reorder (%d records printed)", f[2], r, next[r]-1, printed)
				}
				next[r]++
				printed++
			case <-timeout:
				t.Fatalf("after 60 s: printed %v, want %v\n%s", next, want, stderr.String())
			}
		}
	}
	publish := func(r string, from, count int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var fs []*client.Future
		for i := from; i < from+count; i++ {
			f, err := pub[r].PublishAsync(ctx, client.Message{Topic: "events", Payload: fmt.Appendf(nil, "%s-%d", r, i)})
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		for _, f := range fs {
			if _, err := f.Wait(ctx); err != nil {
				t.Fatalf("publish in %s: %v", r, err)
			}
		}
	}

	done := make(chan struct{})
	for _, r := range regions {
		go func() { defer func() { done <- struct{}{} }(); publishNoFatal(t, pub[r], r, 0, 300) }()
	}
	for range regions {
		<-done
	}
	readUntil(map[string]int{"eu": 150, "us": 150, "ap": 150})
	publish("eu", 300, 200)
	procs["eu"].Kill() // SIGKILL, with records on their way to the subscriber and to the mirrors
	t.Logf("eu killed; the subscriber had printed %v", next)
	for _, r := range []string{"us", "ap"} {
		publish(r, 300, 300)
	}
	readUntil(map[string]int{"us": 600, "ap": 600})
	procs["eu"] = start("eu")
	readUntil(map[string]int{"eu": 500, "us": 600, "ap": 600})
	// One more record of each region: a duplicate of anything earlier would come before it.
	pub["eu"] = dialCA(t, listen["eu"], caDir)
	for _, r := range regions {
		publish(r, next[r], 1)
	}
	readUntil(map[string]int{"eu": 501, "us": 601, "ap": 601})
	t.Logf("printed %v, every record once, each region in order", next)
}

// publishNoFatal publishes REGION-i for i in [from, from+count) one at a time (from a
// goroutine: a failure is reported with t.Error).
func publishNoFatal(t *testing.T, c *client.Conn, region string, from, count int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := from; i < from+count; i++ {
		if _, err := c.Publish(ctx, client.Message{Topic: "events", Payload: fmt.Appendf(nil, "%s-%d", region, i)}); err != nil {
			t.Errorf("publish %s-%d: %v", region, i, err)
			return
		}
	}
}
