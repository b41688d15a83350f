package main

import (
	"bufio"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// TestSubGroupKilledMemberLosesNothing: a `quicmq sub --group` process killed with SIGKILL
// in the middle of a topic loses nothing: every record it had not acknowledged (printed or
// not) reaches another member of the group once its ack-wait passes.
func TestSubGroupKilledMemberLosesNothing(t *testing.T) {
	bin := quicmqBinary(t)
	n := startCLINode(t)
	const total = 500
	lines := make([]string, total)
	for i := range lines {
		lines[i] = "r" + strconv.Itoa(i)
	}
	publishLines(t, n, "work", lines...)

	cmd := exec.Command(bin, append([]string{"sub", "--topic", "work", "--group", "g", "--ack-wait", "500ms"}, n.conn()...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	for len(seen) < 100 && sc.Scan() { // mid-stream: it holds records it has not acknowledged
		f := strings.Split(sc.Text(), "\t")
		seen[f[len(f)-1]] = true
	}
	cmd.Process.Signal(syscall.SIGKILL)
	for sc.Scan() { // what it printed before the kill (and may have acknowledged)
		f := strings.Split(sc.Text(), "\t")
		seen[f[len(f)-1]] = true
	}
	cmd.Wait()
	if len(seen) < 100 {
		t.Fatalf("the member printed %d records before it was killed", len(seen))
	}
	first := len(seen)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: n.ca}, n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "work", client.SubscribeOptions{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for len(seen) < total {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("the other member, with %d of %d records seen: %v", len(seen), total, err)
		}
		seen[string(r.Payload)] = true
		sub.Ack(r)
	}
	t.Logf("the killed member printed %d records; the other member got the rest", first)
}
