package testlog

import (
	"runtime"
	rtmetrics "runtime/metrics"
)

// ScanHeap is the part of the heap the GC scans for pointers (/gc/scan/heap:bytes), read
// after two collections so that what sync.Pools keep (their victim caches) is gone too:
// what tests of the per-topic cost of idle state bound (issue 34's figure 3).
func ScanHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}
