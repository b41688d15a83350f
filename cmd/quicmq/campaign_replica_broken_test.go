package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	brokenOnce sync.Once
	brokenBin  string
	brokenErr  error
)

// brokenBinary builds quicmq with -tags quicmq_broken_ack (replica/broken_ack.go): leaders
// acknowledge a publish once their own log has it synced, before a quorum does.
func brokenBinary(t *testing.T) string {
	t.Helper()
	brokenOnce.Do(func() {
		dir, err := os.MkdirTemp("", "quicmq-broken-")
		if err != nil {
			brokenErr = err
			return
		}
		brokenBin = filepath.Join(dir, "quicmq")
		if out, err := exec.Command("go", "build", "-tags", "quicmq_broken_ack", "-o", brokenBin, ".").CombinedOutput(); err != nil {
			brokenErr = fmt.Errorf("go build -tags quicmq_broken_ack: %v\n%s", err, out)
		}
	})
	if brokenErr != nil {
		t.Fatal(brokenErr)
	}
	return brokenBin
}

// TestCampaignReplicaCatchesBrokenAck runs the kill campaign on the broken build and passes
// only if the checker fails it: the leader, killed right after acknowledging records that
// no follower has yet, takes them with it (lost acknowledgements), and comes back with
// records at offsets the new leader gave to others (replicas diverge).
func TestCampaignReplicaCatchesBrokenAck(t *testing.T) {
	kills := envInt("QUICMQ_REPLICA_BROKEN_KILLS", 3) // each kill catches it only by chance: the followers may have the records already
	bin := os.Getenv("QUICMQ_REPLICA_BROKEN_BIN")     // a broken build made elsewhere
	if bin == "" {
		bin = brokenBinary(t)
	}
	r, l := replicaCampaign(t, bin)
	for k := range kills {
		leader := l.leaderAfter(t, time.Second)
		acked, wait := l.oks.Load(), time.Now().Add(5*time.Second)
		for l.oks.Load() == acked && time.Now().Before(wait) { // right after an acknowledgement
			time.Sleep(time.Millisecond)
		}
		r.nodes[leader].proc().kill()
		if _, _, err := l.failover(t, leader, time.Now()); err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		r.start(leader)
		r.waitLinks(leader)
		t.Logf("kill %d: %s (leader of %s) killed right after an acknowledgement, restarted", k, r.nodes[leader].name, l.topics[0])
	}
	time.Sleep(time.Second)
	l.Stop()
	rep := l.judge(t, all(len(r.nodes)), false)
	t.Logf("load: %s", l.summary())
	t.Logf("checker on the broken build: %v", rep)
	if rep.OK() {
		t.Fatal("the checker passed a build that acknowledges before commit")
	}
}
