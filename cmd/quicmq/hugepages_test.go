package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestHugepagesEnv(t *testing.T) {
	const madvise = "always [madvise] never"
	for _, c := range []struct {
		name, setting, thp string
		cgo                bool
		environ, want      []string // want nil: no exec
	}{
		{"added", "", madvise, true, []string{"A=1"}, []string{"A=1", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
		{"appended to the operator's tunables", "", "[always] madvise never", true,
			[]string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2", "B=2"}, []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1", "B=2"}},
		{"empty tunables", "", madvise, true, []string{"GLIBC_TUNABLES="}, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
		{"set already: the second start does not execute again", "", madvise, true, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}, nil},
		{"turned off", "off", madvise, true, []string{"A=1"}, nil},
		{"huge pages never", "", "always madvise [never]", true, []string{"A=1"}, nil},
		{"no transparent huge pages in this kernel", "", "", true, []string{"A=1"}, nil},
		{"no cgo: Pebble allocates on the Go heap", "", madvise, false, []string{"A=1"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := hugepagesEnv(c.setting, c.thp, c.cgo, c.environ)
			if ok != (c.want != nil) || !slices.Equal(got, c.want) {
				t.Fatalf("hugepagesEnv(%q, %q, %v, %q) = %q, %v; want %q", c.setting, c.thp, c.cgo, c.environ, got, ok, c.want)
			}
		})
	}
}

// A node process carries the tunable in its environment once running (it executed itself
// again), with the same process ID the parent started, and serves as before.
func TestNodeProcessAsksForHugePages(t *testing.T) {
	if _, ok := hugepagesEnv("", readTHPMode(), cgoMalloc, nil); !ok {
		t.Skipf("no re-execution on this machine (transparent huge pages %q, cgo %v)", readTHPMode(), cgoMalloc)
	}
	t.Setenv("QUICMQ_HUGEPAGES", "")
	p := startNodeProcess(t, quicmqBinary(t), t.TempDir())
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(environ), "\x00"), "GLIBC_TUNABLES=glibc.malloc.hugetlb=1") {
		t.Fatalf("the node process (pid %d) runs without GLIBC_TUNABLES=glibc.malloc.hugetlb=1: %q", p.Pid(), environ)
	}
}
