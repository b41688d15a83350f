package nodeproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// A node's flags name its own data and gossip address, join every other node of its region
// (never itself), and carry its fixed addresses and the WAN pool only when it has them; the
// test's Flags come last, so that they win.
func TestRegionArgs(t *testing.T) {
	r := &Region{T: t, Name: "rc", CADir: "/ca", Replicas: 3,
		Flags: func(n *Node) []string { return []string{"--replicas", "5", "--name-was", n.Name} }}
	for i := range 3 {
		r.Nodes = append(r.Nodes, &Node{Name: "rc" + string(rune('1'+i)), Data: "/d" + string(rune('1'+i)), LAN: "127.0.0.1:2000" + string(rune('1'+i))})
	}
	r.Nodes[1].Listen, r.Nodes[1].WAN, r.Nodes[1].Metrics = "127.0.0.1:3002", "127.0.0.1:4002", "127.0.0.1:5002"
	r.WANJoin = []string{"127.0.0.1:4100", "127.0.0.1:4200"}

	got := strings.Join(r.Args(r.Nodes[0]), " ")
	want := "--data /d1 --region rc --ca-dir /ca --gossip 127.0.0.1:20001 --join 127.0.0.1:20002,127.0.0.1:20003 --replicas 3 --replicas 5 --name-was rc1"
	if got != want {
		t.Errorf("rc1's flags\n got %s\nwant %s", got, want)
	}
	got = strings.Join(r.Args(r.Nodes[1]), " ")
	want = "--data /d2 --region rc --ca-dir /ca --gossip 127.0.0.1:20002 --join 127.0.0.1:20001,127.0.0.1:20003 --replicas 3 " +
		"--metrics 127.0.0.1:5002 --listen 127.0.0.1:3002 --wan 127.0.0.1:4002 --wan-join 127.0.0.1:4100,127.0.0.1:4200 --replicas 5 --name-was rc2"
	if got != want {
		t.Errorf("rc2's flags\n got %s\nwant %s", got, want)
	}

	// A region of one joins nobody and has no --replicas; an Extra joins every node.
	solo := &Region{T: t, Name: "us", CADir: "/ca", Nodes: []*Node{{Name: "us1", Data: "/u", LAN: "127.0.0.1:1"}}}
	if args := solo.Args(solo.Nodes[0]); slices.Contains(args, "--join") || slices.Contains(args, "--replicas") {
		t.Errorf("a region of one node: %v", args)
	}
	x := r.Extra("rc9")
	if r.Extra("rc9") != x || r.Node("rc9") != x || r.Index("rc9") != -1 {
		t.Errorf("Extra is made once, found by Node, and is not one of Nodes")
	}
	if args := strings.Join(r.Args(x), " "); !strings.Contains(args, "--join 127.0.0.1:20001,127.0.0.1:20002,127.0.0.1:20003 ") {
		t.Errorf("an extra node joins every node of Nodes: %s", args)
	}
}

// A Child's lines come in order with nothing lost, also those read only after it exited
// (a reader that falls behind); then Next says io.EOF; standard error is kept apart.
func TestChildKeepsEveryLine(t *testing.T) {
	c := StartChild(t, "sh", exec.Command("sh", "-c", `for i in $(seq 1 2000); do echo "line $i"; done; echo oops >&2; exit 3`))
	<-c.Done()
	for i := 1; i <= 2000; i++ {
		l, err := c.Next(context.Background())
		if err != nil || l.Text != fmt.Sprintf("line %d", i) {
			t.Fatalf("line %d: %q, %v", i, l.Text, err)
		}
	}
	if _, err := c.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last line: %v, want io.EOF", err)
	}
	var ee *exec.ExitError
	if !errors.As(c.Err(), &ee) || ee.ExitCode() != 3 || c.Stderr() != "oops\n" || !strings.HasSuffix(c.Stdout(), "line 2000\n") {
		t.Fatalf("exit %v, stderr %q", c.Err(), c.Stderr())
	}

	// WaitOutput returns the lines up to the one awaited; Stop interrupts the process.
	c = StartChild(t, "sh", exec.Command("sh", "-c", `echo one; echo "banner: ready"; exec sleep 60`))
	if got := c.WaitOutput(t, "ready", time.Minute); got != "one\nbanner: ready\n" {
		t.Fatalf("WaitOutput: %q", got)
	}
	if !c.Stop(10 * time.Second) {
		t.Fatal("sleep did not end on SIGINT")
	}
}
