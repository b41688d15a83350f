package campaign

import (
	"slices"
	"testing"
)

// fixture is a consistent campaign: two regions, two topics, records published in both
// and mirrored, all acked but one (stored, ack lost).
func fixture() ([]Ack, map[string]map[string][]Rec, map[string]uint64) {
	logs := map[string]map[string][]Rec{"eu": {}, "us": {}}
	var acks []Ack
	attempted := map[string]uint64{}
	add := func(region, topic, producer string, n int) {
		for range n {
			k := Key{producer, attempted[producer]}
			attempted[producer]++
			off := uint64(len(logs[region][topic]))
			rec := Rec{Offset: off, OriginRegion: region, OriginOffset: off, Producer: k.Producer, Seq: k.Seq, Payload: Payload(k)}
			logs[region][topic] = append(logs[region][topic], rec)
			if k.Seq != 3 {
				acks = append(acks, Ack{region, topic, off, k})
			}
			for other := range logs {
				if other != region {
					m := rec
					m.Offset = uint64(len(logs[other][topic]))
					logs[other][topic] = append(logs[other][topic], m)
				}
			}
		}
	}
	add("eu", "c2.a", "p0", 10)
	add("us", "c2.a", "p1", 5)
	add("us", "c2.b", "p0", 7)
	add("eu", "c2.b", "p1", 4)
	return acks, logs, attempted
}

// The judge can fail: each kind of damage a broken broker could do, injected into a
// consistent campaign, is caught and counted where it belongs.
func TestCheckerCatches(t *testing.T) {
	acks, logs, attempted := fixture()
	if r := Check(acks, logs, attempted); !r.OK() || r.StoredUnacked != 2 || r.Acked != 24 {
		t.Fatalf("consistent campaign judged: %v", r)
	}
	// dropAt removes the record at index i of a log and renumbers the rest (a log that
	// silently lost one record but stayed dense).
	dropAt := func(recs []Rec, i int) []Rec {
		out := slices.Delete(slices.Clone(recs), i, i+1)
		for j := i; j < len(out); j++ {
			out[j].Offset--
			if out[j].OriginRegion == "eu" && recs[0].OriginRegion == "eu" {
				out[j].OriginOffset = out[j].Offset
			}
		}
		return out
	}
	cases := []struct {
		name   string
		damage func(acks []Ack, logs map[string]map[string][]Rec) []Ack
		count  func(r *Report) int
	}{
		{"acked record missing at its origin (ack before fsync)", func(a []Ack, l map[string]map[string][]Rec) []Ack {
			l["eu"]["c2.b"] = l["eu"]["c2.b"][:len(l["eu"]["c2.b"])-1]
			return a
		}, func(r *Report) int { return r.Lost }},
		{"every 100th ack dropped from the log", func(a []Ack, l map[string]map[string][]Rec) []Ack {
			l["us"]["c2.b"] = dropAt(l["us"]["c2.b"], 2)
			return a
		}, func(r *Report) int { return r.Lost + r.Conflicts }},
		{"a mirror applied twice", func(a []Ack, l map[string]map[string][]Rec) []Ack {
			d := l["us"]["c2.a"][0]
			d.Offset = uint64(len(l["us"]["c2.a"]))
			l["us"]["c2.a"] = append(l["us"]["c2.a"], d)
			return a
		}, func(r *Report) int { return r.Duplicated }},
		{"two records acked at one offset", func(a []Ack, l map[string]map[string][]Rec) []Ack {
			x := a[1]
			x.Key = Key{"p9", 0}
			return append(a, x)
		}, func(r *Report) int { return r.Conflicts }},
		{"a record never mirrored", func(a []Ack, l map[string]map[string][]Rec) []Ack {
			l["eu"]["c2.a"] = l["eu"]["c2.a"][:len(l["eu"]["c2.a"])-1]
			return a
		}, func(r *Report) int { return r.Unmirrored }},
		{"a payload changed", func(a []Ack, l map[string]map[string][]Rec) []Ack {
			l["eu"]["c2.a"][4].Payload = "p0/4/changed"
			return a
		}, func(r *Report) int { return r.Corrupt }},
		{"a record nobody published", func(a []Ack, l map[string]map[string][]Rec) []Ack {
			n := uint64(len(l["eu"]["c2.a"]))
			k := Key{"p0", 1000}
			l["eu"]["c2.a"] = append(l["eu"]["c2.a"], Rec{n, "eu", n, k.Producer, k.Seq, Payload(k)})
			return a
		}, func(r *Report) int { return r.Phantom }},
		{"the same attempt acked twice (a retry stored twice)", func(a []Ack, l map[string]map[string][]Rec) []Ack {
			x := a[0]
			x.Offset = 99
			return append(a, x)
		}, func(r *Report) int { return r.Duplicated }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			acks, logs, attempted := fixture()
			acks = c.damage(acks, logs)
			r := Check(acks, logs, attempted)
			if r.OK() || c.count(r) == 0 {
				t.Fatalf("damage not caught where expected: %v", r)
			}
			t.Logf("caught: %s", r.Examples[0])
		})
	}
}
