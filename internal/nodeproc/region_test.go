package nodeproc

import (
	"slices"
	"strings"
	"testing"
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
