package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/quicmq/quicmq"

// layers gives each package of the module (its path in the module) a layer: a package may
// import only packages of a lower layer. Test files may import anything (node's tests use
// the SDK), so only the packages' own imports are checked.
var layers = map[string]int{
	// Leaves: pure or self-contained.
	"routing": 0, "gossip": 0, "internal/wire": 0, "internal/testlog": 0, "internal/certs": 0,
	"internal/campaign": 0, "internal/layering": 0, "internal/liveness": 0, "internal/release": 0,
	"internal/timeline": 0,
	// The node-process harness waits with testlog.
	"internal/nodeproc": 5,
	// Over the leaves.
	"wal": 10, "internal/config": 10, "internal/clienthook": 10, "internal/linearize": 10,
	// The SDK links no broker code; replica uses wal and routing, never node.
	"client": 20, "replica": 20,
	// Links between nodes: never node.
	"federation": 30,
	// The node's parts, by concern (node/doc.go): each imports only the parts below it.
	"node/auth": 40, "node/features": 40, "node/placement": 40, "node/vector": 40, "node/tail": 40,
	// Consumer groups (their state in the node's log or the topics' raft groups only behind
	// groups.Where); subscriptions (cursors, reads, acks, upstreams over placement, the
	// links and the tails; single-copy or replicated topics only behind subscriptions.Region).
	"node/groups": 41, "node/subscriptions": 41,
	// The ablation's shared stream, over the subscription core (sharedstream.Session).
	"node/sharedstream": 42,
	// Management: requests over a node or a region, this node's side of them over the log
	// and the live subscriptions and groups (manage.Here), and the admin API; the replicated
	// path only through the functions and interfaces the node gives it.
	"node/manage": 42,
	// Placement changes of a replicated region: drains, leader balance, removals, replica
	// moves, the replica balancer, replacements; the raft driver, the metadata and the
	// region only through relocate.Raft, Meta and Mesh; the region's nodes as manage.Nodes.
	"node/relocate": 43,
	// The node's assembly: sessions, the session side of the stream handlers, publishing
	// and the replicated path.
	"node": 50,
	// Test helpers over the node and the SDK.
	"node/nodetest": 60,
	"cmd/quicmq":    70,
}

func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module+"/")
		layer, ok := layers[pkg]
		if !ok {
			t.Errorf("package %s has no layer: give it one in layering_test.go (what it may import says where it belongs)", pkg)
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module+"/")
			if !ours {
				continue
			}
			if l, ok := layers[dep]; ok && l >= layer {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports point down only", pkg, layer, dep, l)
			}
		}
	}
	if seen < len(layers)/2 {
		t.Fatalf("go list named %d of the module's packages: %s", seen, out)
	}
}

// sdkDeps are the packages of the module the SDK may depend on: the codec, the hook the bench
// module reaches a Conn through, and the liveness watch of its connections.
var sdkDeps = []string{"internal/clienthook", "internal/liveness", "internal/wire"}

// TestClientLinksNoBrokerCode: the SDK links no broker code (design.md): of the module it
// depends only on sdkDeps.
func TestClientLinksNoBrokerCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/client").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if dep, ok := strings.CutPrefix(p, module+"/"); ok && dep != "client" && !slices.Contains(sdkDeps, dep) {
			t.Errorf("the SDK depends on %s: of the module it may depend only on %v", dep, sdkDeps)
		}
	}
}
