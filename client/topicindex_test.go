package client

import "testing"

// TestTopicIndex: indices bound in order go into the slice, any other into the map, and a
// rebinding replaces the name; nameIndex answers a lookup with every pair queued before it.
func TestTopicIndex(t *testing.T) {
	var ti topicIndex
	ti.bind(0, "a")
	ti.bind(1, "b")
	ti.bind(0, "a2") // bound again
	ti.bind(7, "far")
	ti.bind(2, "c") // after an index out of order: the map
	for idx, want := range map[uint64]string{0: "a2", 1: "b", 2: "c", 7: "far"} {
		if got, ok := ti.name(idx); !ok || got != want {
			t.Fatalf("name(%d) = %q, %v; want %q", idx, got, ok, want)
		}
	}
	if _, ok := ti.name(3); ok {
		t.Fatal("name(3) found, never bound")
	}
	var ni nameIndex
	ni.bind("a", 0)
	if idx, ok := ni.index("a"); !ok || idx != 0 {
		t.Fatalf("index(a) = %d, %v", idx, ok)
	}
	ni.bind("b", 1)
	ni.bind("a", 2) // bound again under a new index
	if idx, ok := ni.index("a"); !ok || idx != 2 {
		t.Fatalf("index(a) after rebinding = %d, %v; want 2", idx, ok)
	}
	if idx, ok := ni.index("b"); !ok || idx != 1 {
		t.Fatalf("index(b) = %d, %v", idx, ok)
	}
	if _, ok := ni.index("z"); ok {
		t.Fatal("index(z) found, never bound")
	}
}
