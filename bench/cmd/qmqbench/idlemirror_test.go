package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// A fan-out run beside idle mirrored topics: the idle region's node creates them, the node
// under test lists them, every mirror parks before the window, and then every record of the
// window reaches every subscription at 1% loss on the clients' path, as without them; both
// namespaces are removed.
func TestFanoutIdleMirroredSmoke(t *testing.T) {
	if err := lossy.Check(); err != nil {
		t.Skipf("lossy-network harness unavailable: %v", err)
	}
	p := runParams{System: "quicmq", Loss: 0.01, Rate: 1000, Subs: 10, Size: 64,
		Warmup: 300 * time.Millisecond, Duration: time.Second, Drain: 5 * time.Second, LossPath: "all",
		Idle: idleMirrors{N: 300, Settle: 100 * time.Millisecond}}
	res, err := runInNamespace(p, &workerSlot{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent < 500 || res.Received != res.Sent || res.Missing != 0 {
		t.Fatalf("sent %d, received %d, missing %d", res.Sent, res.Received, res.Missing)
	}
	if res.Idle.N != 300 || res.Idle.Settle != 100*time.Millisecond || res.IdleSetupSeconds <= 0 || res.IdleStreamsEnd != 0 || res.DroppedPackets == 0 {
		t.Fatalf("idle set-up %.1f s, %v streams open after, %d packets dropped: %+v", res.IdleSetupSeconds, res.IdleStreamsEnd, res.DroppedPackets, res.Idle)
	}
	t.Logf("p50 %.2f p99 %.2f ms, idle set-up %.1f s, %d packets dropped", res.P50, res.P99, res.IdleSetupSeconds, res.DroppedPackets)
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if mine := fmt.Sprintf("%s%d-", lossy.Prefix, os.Getpid()); strings.Contains(string(out), mine) {
		t.Fatalf("namespaces left behind:\n%s", out)
	}
}

func TestIdleFlags(t *testing.T) {
	none, mesh, tenK := idleArm{}, idleArm{Mesh: true}, idleArm{N: 10000, Mesh: true}
	got, err := parseIdleCounts("0, mesh,10000")
	if err != nil || !slices.Equal(got, []idleArm{none, mesh, tenK}) {
		t.Fatalf("parseIdleCounts: %v %v", got, err)
	}
	for _, bad := range []string{"", "x", "-1", "0,,1", "2000000", "meshes"} {
		if _, err := parseIdleCounts(bad); err == nil {
			t.Errorf("parseIdleCounts(%q): no error", bad)
		}
	}
	if o := idleOrder([]idleArm{none, tenK}, 1); !slices.Equal(o, []idleArm{none, tenK}) {
		t.Errorf("repeat 1: %v", o)
	}
	if o := idleOrder([]idleArm{none, mesh, tenK}, 2); !slices.Equal(o, []idleArm{tenK, mesh, none}) {
		t.Errorf("repeat 2: %v", o)
	}
	if err := checkIdleSystems([]idleArm{none, {N: 10, Mesh: true}}, []string{"quicmq", "nats"}); err == nil {
		t.Error("nats with idle mirrored topics accepted")
	}
	if err := checkIdleSystems([]idleArm{mesh}, []string{"quicmq", "nats"}); err == nil {
		t.Error("nats with the idle region's node accepted")
	}
	if err := checkIdleSystems([]idleArm{none}, []string{"quicmq", "nats"}); err != nil {
		t.Errorf("nats without idle mirrored topics: %v", err)
	}
	// A count of topics is compared with none and with the mesh alone; the mesh with none.
	all := []idleArm{none, mesh, tenK}
	if b := tenK.bases(all); !slices.Equal(b, []idleArm{none, mesh}) {
		t.Errorf("10000's bases: %v", b)
	}
	if b := mesh.bases(all); !slices.Equal(b, []idleArm{none}) {
		t.Errorf("mesh's bases: %v", b)
	}
	if b := tenK.bases([]idleArm{none, tenK}); !slices.Equal(b, []idleArm{none}) {
		t.Errorf("10000's bases without a mesh arm: %v", b)
	}
	if b := none.bases(all); len(b) != 0 {
		t.Errorf("0's bases: %v", b)
	}
	// The worker's flags carry the arm.
	m := idleMirrors{NS: "ns", AddrA: "a", AddrB: "b", Settle: time.Second}
	m.set(mesh)
	var w idleMirrors
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	w.workerFlags(fs)
	if err := fs.Parse(m.args()); err != nil || w.arm() != mesh || !w.on() {
		t.Errorf("mesh through the worker's flags: %+v %v", w, err)
	}
	m.set(none)
	if m.on() || m.args() != nil || m.hotArgs() != nil {
		t.Errorf("0: %+v %v %v", m, m.args(), m.hotArgs())
	}
}

// The link gauges are summed over links; other series and comments are skipped.
func TestScrapeLinkGauges(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP quicmq_link_mirror_streams Mirror streams open on the link.
# TYPE quicmq_link_mirror_streams gauge
quicmq_link_mirror_streams{peer_node="a",peer_region="x"} 2
quicmq_link_mirror_streams{peer_node="b",peer_region="y"} 3
quicmq_link_mirror_streams_other 100
quicmq_link_mirrors_waiting{peer_node="a",peer_region="x"} 1
quicmq_link_mirrored_topics{peer_node="a",peer_region="x"} 1e+04
`)
	}))
	defer srv.Close()
	g, err := scrapeLinkGauges(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if g != (linkGauges{streams: 5, waiting: 1, mirrored: 10000}) {
		t.Fatalf("got %+v", g)
	}
}
