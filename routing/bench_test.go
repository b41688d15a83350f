package routing

import (
	"fmt"
	"runtime"
	"testing"
)

// benchTable builds the 100k-pattern table of the benchmarks: 90k literals
// "tenantT.orders.regionR.eI" and 10k wildcards of four shapes over the same
// tenants, so a typical topic matches its literal and a few wildcards.
func benchTable(b *testing.B) (*Table[int], []string) {
	b.Helper()
	tab := NewTable[int]()
	const literals, wildcards = 90000, 10000
	topics := make([]string, literals)
	for i := range literals {
		topics[i] = fmt.Sprintf("tenant%d.orders.region%d.e%d", i%1000, i%5, i)
		if err := tab.Add(topics[i], i); err != nil {
			b.Fatal(err)
		}
	}
	for j := range wildcards {
		var p string
		switch j % 4 {
		case 0:
			p = fmt.Sprintf("tenant%d.orders.*.e%d", j%1000, j)
		case 1:
			p = fmt.Sprintf("tenant%d.*.region%d.>", j%1000, j%5)
		case 2:
			p = fmt.Sprintf("tenant%d.orders.>", j%1000)
		default:
			p = fmt.Sprintf("*.orders.region%d.e%d", j%5, j)
		}
		if err := tab.Add(p, literals+j); err != nil {
			b.Fatal(err)
		}
	}
	if tab.Len() != literals+wildcards {
		b.Fatalf("Len = %d", tab.Len())
	}
	return tab, topics
}

func BenchmarkTableMatch(b *testing.B) {
	tab, topics := benchTable(b)
	hot := topics[:cacheMax/2] // fits the cache
	b.Run("cached", func(b *testing.B) {
		for _, tp := range hot {
			tab.Match(tp)
		}
		i := 0
		for b.Loop() {
			if len(tab.Match(hot[i%len(hot)])) == 0 {
				b.Fatal("no match")
			}
			i++
		}
	})
	b.Run("uncached", func(b *testing.B) { // the trie walk alone
		i := 0
		for b.Loop() {
			if len(tab.matchUncached(topics[(i*7919)%len(topics)])) == 0 {
				b.Fatal("no match")
			}
			i++
		}
	})
	b.Run("miss", func(b *testing.B) { // through the cache, every lookup a miss
		i := 0
		for b.Loop() {
			if len(tab.Match(topics[(i*7919)%len(topics)])) == 0 {
				b.Fatal("no match")
			}
			i++
		}
	})
	b.Run("cached-parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				tab.Match(hot[i%len(hot)])
				i++
			}
		})
	})
}

func BenchmarkTableAddRemove(b *testing.B) {
	tab, topics := benchTable(b)
	for _, tp := range topics[:cacheMax] { // a full cache, as in steady state
		tab.Match(tp)
	}
	for _, c := range []struct{ name, pattern string }{
		{"literal", "tenant7.orders.region2.new"},
		{"wildcard", "tenant7.*.region2.>"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := tab.Add(c.pattern, -1); err != nil {
					b.Fatal(err)
				}
				if !tab.Remove(c.pattern, -1) {
					b.Fatal("Remove = false")
				}
			}
		})
	}
}

func BenchmarkMatch(b *testing.B) {
	for b.Loop() {
		Match("orders.*.created.>", "orders.eu.created.x.y")
	}
}

func BenchmarkValidateTopic(b *testing.B) {
	for b.Loop() {
		if ValidateTopic("tenant42.orders.region3.created") != nil {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkOwner(b *testing.B) {
	ms := members(5)
	for b.Loop() {
		Owner("tenant42.orders.region3.created", ms)
	}
}

// BenchmarkTableBuild adds the 100k patterns of benchTable to an empty table and
// reports the heap the table holds per entry.
func BenchmarkTableBuild(b *testing.B) {
	var tab *Table[int]
	for b.Loop() {
		tab, _ = benchTable(b)
	}
	b.StopTimer()
	var before, after runtime.MemStats
	tab = nil
	runtime.GC()
	runtime.ReadMemStats(&before)
	tab, topics := benchTable(b)
	topics = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(tab.Len()), "heapB/entry")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tab.Len()), "ns/add")
	runtime.KeepAlive(tab)
	_ = topics
}
