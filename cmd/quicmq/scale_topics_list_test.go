package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
)

// TestScaleTopicsListing times `quicmq topics` over many topics, on demand: one node
// process, QUICMQ_LIST_TOPICS topics created by one pipelined publish each; then, for each
// binary (QUICMQ_LIST_OLD_BIN, a build to compare with, if set; then this build), the node
// restarted on the same data and `quicmq topics` run three times to /dev/null, reporting its
// wall time and maximum RSS, and the node's RSS after.
//
//	QUICMQ_LIST_TOPICS=100000 go test -run TestScaleTopicsListing -v -timeout 20m ./cmd/quicmq
func TestScaleTopicsListing(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("QUICMQ_LIST_TOPICS"))
	if n <= 0 {
		t.Skip("on demand: set QUICMQ_LIST_TOPICS (e.g. 100000)")
	}
	bin := quicmqBinary(t)
	caDir, data := t.TempDir(), t.TempDir()
	start := func(b string) *nodeproc.Process {
		return startMeshProcess(t, b, "list1", "--data", data, "--region", "eu", "--ca-dir", caDir)
	}
	p := start(bin)
	conn := dialCA(t, p.Addr, caDir)
	ctx := context.Background()
	futures := make(chan *client.Future, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range futures {
			if _, err := f.Wait(ctx); err != nil {
				t.Errorf("publish: %v", err)
			}
		}
	}()
	begin := time.Now()
	for i := range n {
		f, err := conn.PublishAsync(ctx, client.Message{Topic: fmt.Sprintf("l.t%06d", i), Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		futures <- f
	}
	close(futures)
	<-done
	t.Logf("%d topics created in %v", n, time.Since(begin).Round(time.Millisecond))
	conn.Close()
	p.Kill()

	bins := []string{bin}
	if old := os.Getenv("QUICMQ_LIST_OLD_BIN"); old != "" {
		bins = []string{old, bin}
	}
	for _, b := range bins {
		p := start(b)
		for run := range 3 {
			cmd := exec.Command(b, "topics", "--server", p.Addr, "--ca", filepath.Join(caDir, "ca.pem"))
			out, err := os.Create(filepath.Join(t.TempDir(), "out"))
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout = out
			t0 := time.Now()
			err = cmd.Run()
			wall := time.Since(t0)
			st, _ := out.Stat()
			out.Close()
			if err != nil {
				t.Fatalf("%s topics: %v\n%s", b, err, p.Tail())
			}
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			load, _ := os.ReadFile("/proc/loadavg")
			t.Logf("%s: run %d: quicmq topics over %d topics: %v wall, CLI max RSS %d MiB, %d bytes out; node RSS %.0f MiB; load %.4s",
				b, run+1, n, wall.Round(time.Millisecond), ru.Maxrss>>10, st.Size(), procMemory(t, p.Pid()).rss, load)
		}
		p.Kill()
	}
}
