package gossip

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// TestKeyRotationWhileRunning rotates the gossip key of a running three-node region (LAN
// and WAN pools) through install, use and remove while one node updates its tags every
// 50 ms: no member is ever seen anything but alive, no fail event fires, tag updates keep
// arriving, and afterwards only the new key gets into the pools.
func TestKeyRotationWhileRunning(t *testing.T) {
	oldKey, newKey := newKey(t), newKey(t)
	nodes := startMesh(t, oldKey, 1, 3)
	testlog.WaitForErr(t, 10*time.Second, "mesh converges", func() error {
		for _, n := range nodes {
			if err := converged(n, nodes); err != nil {
				return err
			}
		}
		return nil
	})
	marks := make([]int, len(nodes))
	for i, n := range nodes {
		marks[i] = n.mark()
	}

	// Traffic: tag updates from n1, and a watcher sampling every node's table.
	var seq atomic.Int64
	var notAlive atomic.Int64
	var firstBad atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			v := seq.Add(1)
			if err := nodes[0].SetTags(map[string]string{"quic": nodes[0].cfg.Tags["quic"], "seq": strconv.FormatInt(v, 10)}); err != nil {
				firstBad.CompareAndSwap(nil, "SetTags: "+err.Error())
				notAlive.Add(1)
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for _, n := range nodes {
				for _, m := range n.Members() {
					if m.Status != StatusAlive {
						firstBad.CompareAndSwap(nil, fmt.Sprintf("%s sees %s %s", n.cfg.Name, m.Name, m.Status))
						notAlive.Add(1)
					}
				}
			}
		}
	})

	b64 := func(k []byte) string { return base64.StdEncoding.EncodeToString(k) }
	step := func(what string, op func([]byte) ([]KeyStatus, error), key []byte) {
		t.Helper()
		start := time.Now()
		st, err := op(key)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for _, s := range st {
			if s.Responses != len(nodes) || len(s.Failures) > 0 {
				t.Fatalf("%s in the %s pool: %d of %d members answered, failures %v", what, s.Pool, s.Responses, len(nodes), s.Failures)
			}
		}
		t.Logf("%s: %d pools, every member answered, in %v", what, len(st), time.Since(start).Round(time.Millisecond))
		// Traffic under the new state: three more of n1's tag updates reach every member.
		want := seq.Load() + 3
		testlog.WaitForErr(t, 10*time.Second, what+": n1's tag updates gossiped under the new state", func() error {
			for _, n := range nodes {
				if v, _ := strconv.ParseInt(n.member(nodes[0].cfg.Name).Tags["seq"], 10, 64); v < want {
					return fmt.Errorf("%s has n1's update %d of %d", n.cfg.Name, v, want)
				}
			}
			return nil
		})
	}
	listKeys := func(what string, keys, primary map[string]int) {
		t.Helper()
		st, err := nodes[1].ListKeys()
		if err != nil {
			t.Fatalf("list keys %s: %v", what, err)
		}
		for _, s := range st {
			if fmt.Sprint(s.Keys) != fmt.Sprint(keys) || fmt.Sprint(s.Primary) != fmt.Sprint(primary) {
				t.Fatalf("%s, %s pool: keys %v primary %v, want %v and %v", what, s.Pool, s.Keys, s.Primary, keys, primary)
			}
		}
	}
	n := len(nodes)
	step("install", nodes[0].InstallKey, newKey)
	listKeys("after install", map[string]int{b64(oldKey): n, b64(newKey): n}, map[string]int{b64(oldKey): n})
	if _, err := nodes[2].RemoveKey(oldKey); !errors.Is(err, ErrKeyRotation) {
		t.Fatalf("removing the primary key: %v, want ErrKeyRotation", err)
	}
	step("use", nodes[1].UseKey, newKey)
	listKeys("after use", map[string]int{b64(oldKey): n, b64(newKey): n}, map[string]int{b64(newKey): n})
	step("remove", nodes[2].RemoveKey, oldKey)
	listKeys("after remove", map[string]int{b64(newKey): n}, map[string]int{b64(newKey): n})

	close(stop)
	wg.Wait()
	if c := notAlive.Load(); c > 0 {
		t.Fatalf("membership flapped during the rotation: %d bad samples, first: %v", c, firstBad.Load())
	}
	for i, nd := range nodes {
		nd.hist.Lock()
		for _, ev := range nd.hist.events[marks[i]:] {
			if ev.Kind == EventFail || ev.Kind == EventLeave {
				t.Errorf("%s: %s event for %s in the %s pool during the rotation", nd.cfg.Name, ev.Kind, ev.Member.Name, ev.Pool)
			}
		}
		nd.hist.Unlock()
	}
	last := strconv.FormatInt(seq.Load(), 10)
	testlog.WaitForErr(t, 5*time.Second, "the last tag update reaches everyone", func() error {
		for _, nd := range nodes[1:] {
			if got := nd.member(nodes[0].cfg.Name).Tags["seq"]; got != last {
				return fmt.Errorf("%s sees seq %s, want %s", nd.cfg.Name, got, last)
			}
		}
		return nil
	})
	t.Logf("%s tag updates during the rotation, no member ever seen failed", last)

	// Only the new key gets in now.
	stale := startTestNode(t, testNodeConfig(t, "stale", "r1", oldKey, false))
	defer stopAll(t, stale)
	if _, err := stale.JoinLAN([]string{nodes[0].LANAddr()}); !errors.Is(err, ErrJoinFailed) {
		t.Fatalf("join with the removed key: %v, want ErrJoinFailed", err)
	}
	cfg := testNodeConfig(t, "fresh", "r1", newKey, false)
	cfg.ExtraKeys = [][]byte{oldKey} // a node restarted mid-rotation: harmless afterwards
	fresh := startTestNode(t, cfg)
	defer stopAll(t, fresh)
	if _, err := fresh.JoinLAN([]string{nodes[0].LANAddr()}); err != nil {
		t.Fatalf("join with the new key: %v", err)
	}
}

func TestKeyOpsNeedEncryption(t *testing.T) {
	plain := startTestNode(t, testNodeConfig(t, "plain", "r1", nil, false))
	defer stopAll(t, plain)
	// Stopping a node before its Run has started makes Run report an error: wait.
	testlog.WaitForErr(t, 5*time.Second, "Run starts", func() error {
		plain.mu.Lock()
		defer plain.mu.Unlock()
		if !plain.mu.running {
			return errors.New("not running")
		}
		return nil
	})
	if _, err := plain.InstallKey(newKey(t)); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("InstallKey without encryption: %v", err)
	}
	// One sentence, for a list as for a change: no "gossip: " twice, no "keyring to change".
	if _, err := plain.ListKeys(); err == nil || err.Error() != "gossip: not encrypted (started without a gossip key): there are no keys to list or change" {
		t.Fatalf("ListKeys without encryption: %v", err)
	}
	cfg := testNodeConfig(t, "x", "r1", nil, false)
	cfg.ExtraKeys = [][]byte{newKey(t)}
	if err := cfg.Validate(); err == nil {
		t.Fatal("ExtraKeys without Key validated")
	}
	cfg.Key, cfg.ExtraKeys = newKey(t), [][]byte{[]byte("short")}
	if err := cfg.Validate(); err == nil {
		t.Fatal("a 5-byte extra key validated")
	}
}
