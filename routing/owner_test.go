package routing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func members(n int) []string {
	m := make([]string, n)
	for i := range m {
		m[i] = fmt.Sprintf("node-%d", i+1)
	}
	return m
}

func TestOwnerBasics(t *testing.T) {
	if got := Owner("a", nil); got != "" {
		t.Fatalf("Owner with no members = %q", got)
	}
	if got := Owner("a", []string{"", ""}); got != "" {
		t.Fatalf("Owner with only empty names = %q", got)
	}
	if got := Owner("a", []string{"", "n1"}); got != "n1" {
		t.Fatalf("Owner with one member = %q", got)
	}
	// Deterministic and independent of order and duplicates.
	ms := members(7)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 500 {
		topic := fmt.Sprintf("orders.%d", i)
		want := Owner(topic, ms)
		shuffled := slices.Clone(ms)
		r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		shuffled = append(shuffled, shuffled[0])
		if got := Owner(topic, shuffled); got != want {
			t.Fatalf("Owner(%q) depends on member order: %q vs %q", topic, got, want)
		}
	}
	// Pinned values: the hash must never change between builds, or nodes running
	// different versions would disagree on placement.
	for topic, want := range map[string]string{"orders.eu.created": "node-4", "a": "node-5", "metrics.cpu": "node-2"} {
		if got := Owner(topic, members(5)); got != want {
			t.Errorf("Owner(%q, node-1..5) = %s, pinned %s", topic, got, want)
		}
	}
	if w := weight("node-1", "a"); w != 0x524f6dbfa813ae4b {
		t.Errorf("weight(node-1, a) = %#x, pinned 0x524f6dbfa813ae4b", w)
	}
}

func TestOwnerStable(t *testing.T) {
	const topics = 20000
	before, after := members(5), members(6)
	newest := after[5]
	moved := 0
	for i := range topics {
		topic := fmt.Sprintf("t%d.events", i)
		o1, o2 := Owner(topic, before), Owner(topic, after)
		if o1 != o2 {
			if o2 != newest {
				t.Fatalf("adding %s moved %q from %s to %s", newest, topic, o1, o2)
			}
			moved++
		}
		// Removing a member moves only that member's topics.
		without := slices.Delete(slices.Clone(before), 2, 3)
		if o3 := Owner(topic, without); o1 != before[2] && o3 != o1 {
			t.Fatalf("removing %s moved %q from %s to %s", before[2], topic, o1, o3)
		}
	}
	// The new member should take about 1/6 of the topics.
	if frac := float64(moved) / topics; frac < 0.15 || frac > 0.185 {
		t.Fatalf("adding a sixth member moved %.3f of topics, want about 0.167", frac)
	}
}

func TestOwnerSpread(t *testing.T) {
	for _, n := range []int{2, 3, 5, 10} {
		ms := members(n)
		count := map[string]int{}
		const topics = 50000
		for i := range topics {
			count[Owner(fmt.Sprintf("tenant%d.orders.%d", i%97, i), ms)]++
		}
		want := float64(topics) / float64(n)
		for _, m := range ms {
			if dev := (float64(count[m]) - want) / want; dev < -0.05 || dev > 0.05 {
				t.Errorf("%d members: %s owns %d topics, want %.0f within 5%%", n, m, count[m], want)
			}
		}
	}
}
