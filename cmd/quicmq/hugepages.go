package main

import (
	"os"
	"strings"
	"syscall"
)

// Pebble keeps its memtables (64 MiB each at full size) and block cache in memory it
// allocates with C's calloc, which maps fresh pages for every large allocation. On some
// virtual machines a first touch of a 4 KiB page costs 20-60 µs (this project's CI machine:
// a 64 MiB memtable took 0.3-1 s of CPU to fill, 30-50% of a replicated node's CPU under
// publishing: docs/benchmarks.md, "Fresh pages"), where a 2 MiB transparent huge page is
// taken in one fault. glibc asks for huge pages on its mapped memory only when the tunable
// glibc.malloc.hugetlb is set in its environment at start, so a node sets it and executes
// itself again, once, before anything else runs: the same process ID, files and arguments.
//
// QUICMQ_HUGEPAGES=off keeps the process as started. Nothing changes where the kernel's
// transparent huge pages are "never", where the binary was built without cgo (no glibc
// malloc), or where GLIBC_TUNABLES already names the tunable.
const hugepagesTunable = "glibc.malloc.hugetlb"

// hugepagesReexec executes the running binary again with glibc.malloc.hugetlb=1 added to
// GLIBC_TUNABLES when hugepagesWanted says so; it returns only when it does not (or when
// the exec fails, which leaves the process as it was).
func hugepagesReexec(args []string) {
	env, ok := hugepagesEnv(os.Getenv("QUICMQ_HUGEPAGES"), readTHPMode(), cgoMalloc, os.Environ())
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, args, env) // on success it does not return
}

// hugepagesEnv returns the environment to execute again with, and whether to: setting is
// QUICMQ_HUGEPAGES, thp the kernel's transparent_hugepage/enabled, cgo whether Pebble's
// memory comes from glibc.
func hugepagesEnv(setting, thp string, cgo bool, environ []string) ([]string, bool) {
	if setting == "off" || !cgo || thp == "" || strings.Contains(thp, "[never]") {
		return nil, false
	}
	out := make([]string, 0, len(environ)+1)
	found := false
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GLIBC_TUNABLES="); ok {
			if strings.Contains(v, hugepagesTunable) {
				return nil, false // set already: by the operator, or by this node's first start
			}
			found = true
			if v != "" {
				v += ":"
			}
			kv = "GLIBC_TUNABLES=" + v + hugepagesTunable + "=1"
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "GLIBC_TUNABLES="+hugepagesTunable+"=1")
	}
	return out, true
}

func readTHPMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
