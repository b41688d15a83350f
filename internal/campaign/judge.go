package campaign

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Package campaign is the judge of the fault campaigns (docs/reliability.md): the kill -9
// loop in cmd/quicmq and the partition and packet-loss campaigns in the bench module both
// use it. It is pure: it gets every acknowledgement the publishers received and every
// region's logs as read back at the end, and says what was lost, duplicated, put at a
// conflicting offset or not mirrored. Kept apart from the processes so that a unit test can
// feed it damaged input and show that it fails (TestCheckerCatches).
// Key names one publish attempt: producer id and sequence number, unique in a campaign.
type Key struct {
	Producer string
	Seq      uint64
}

func (k Key) String() string { return k.Producer + "/" + strconv.FormatUint(k.Seq, 10) }

// Payload is the payload of attempt k: the key, so a record names itself, plus padding.
func Payload(k Key) string { return k.String() + "/" + strings.Repeat("p", 64) }

// Ack is one acknowledgement: the node of region acked k at offset of topic.
type Ack struct {
	Region, Topic string
	Offset        uint64
	Key           Key
}

// Rec is one record of a region's log of a topic, as read back.
type Rec struct {
	Offset       uint64
	OriginRegion string
	OriginOffset uint64
	Producer     string
	Seq          uint64
	Payload      string
}

func (r Rec) Key() Key { return Key{r.Producer, r.Seq} }

// Report is the judge's verdict. Lost, Duplicated, Conflicts, Unmirrored, Corrupt and
// Phantom must all be zero; StoredUnacked (a publish stored whose ack never arrived, e.g.
// its node was killed first) is allowed.
type Report struct {
	Acked, Records                            int
	Lost, Duplicated, Conflicts, Unmirrored   int
	Corrupt, Phantom, StoredUnacked, Problems int
	Examples                                  []string
}

func (r *Report) OK() bool {
	return r.Lost+r.Duplicated+r.Conflicts+r.Unmirrored+r.Corrupt+r.Phantom == 0
}

func (r *Report) problem(counter *int, format string, args ...any) {
	*counter++
	r.Problems++
	if len(r.Examples) < 20 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

func (r *Report) String() string {
	s := fmt.Sprintf("acked %d, records read %d, lost %d, duplicated %d, offset conflicts %d, unmirrored %d, corrupt %d, phantom %d, stored but unacked %d",
		r.Acked, r.Records, r.Lost, r.Duplicated, r.Conflicts, r.Unmirrored, r.Corrupt, r.Phantom, r.StoredUnacked)
	if len(r.Examples) > 0 {
		s += "\n  " + strings.Join(r.Examples, "\n  ")
	}
	return s
}

// Check judges a campaign. logs[region][topic] is the region's whole log of the
// topic from offset 0; attempted[producer] is how many sequence numbers the producer used
// (0 .. attempted-1). Every region is expected to hold every topic's records of every region.
func Check(acks []Ack, logs map[string]map[string][]Rec, attempted map[string]uint64) *Report {
	r := &Report{Acked: len(acks)}
	ackedKeys := r.checkAcks(acks)
	index := r.indexLogs(logs, attempted, ackedKeys)
	r.checkAcked(acks, index)
	r.checkMirrors(index)
	return r
}

// where is a record in a region's logs: its topic and the record, found count times.
type where struct {
	Topic string
	rec   Rec
	count int
}

// checkAcks checks the acknowledgements alone: one record per (region, topic, offset), one
// ack per attempt. It returns each acknowledged attempt's ack.
func (r *Report) checkAcks(acks []Ack) map[Key]Ack {
	type slot struct {
		region, topic string
		offset        uint64
	}
	bySlot := map[slot]Key{}
	ackedKeys := map[Key]Ack{}
	for _, a := range acks {
		s := slot{a.Region, a.Topic, a.Offset}
		if prev, ok := bySlot[s]; ok && prev != a.Key {
			r.problem(&r.Conflicts, "offset conflict: %s %s@%d acknowledged for %v and for %v", a.Region, a.Topic, a.Offset, prev, a.Key)
		}
		bySlot[s] = a.Key
		if prev, ok := ackedKeys[a.Key]; ok {
			r.problem(&r.Duplicated, "%v acknowledged twice: %s %s@%d and %s %s@%d", a.Key, prev.Region, prev.Topic, prev.Offset, a.Region, a.Topic, a.Offset)
		}
		ackedKeys[a.Key] = a
	}
	return ackedKeys
}

// indexLogs checks each log alone (dense, each record whole, each attempt at most once per
// region) and returns, per region, where each attempt is stored.
func (r *Report) indexLogs(logs map[string]map[string][]Rec, attempted map[string]uint64, ackedKeys map[Key]Ack) map[string]map[Key]*where {
	index := map[string]map[Key]*where{} // region -> key -> its record
	for _, reg := range slices.Sorted(maps.Keys(logs)) {
		index[reg] = map[Key]*where{}
		for _, topic := range slices.Sorted(maps.Keys(logs[reg])) {
			for i, rec := range logs[reg][topic] {
				r.Records++
				k := rec.Key()
				switch {
				case rec.Offset != uint64(i):
					r.problem(&r.Corrupt, "%s %s: record %d of the log has offset %d (a gap or a reorder)", reg, topic, i, rec.Offset)
				case rec.Payload != Payload(k):
					r.problem(&r.Corrupt, "%s %s@%d: payload %.30q does not match its producer/sequence %v", reg, topic, rec.Offset, rec.Payload, k)
				case attempted != nil && (k.Seq >= attempted[k.Producer]):
					r.problem(&r.Phantom, "%s %s@%d: %v was never published", reg, topic, rec.Offset, k)
				case rec.OriginRegion == reg && rec.OriginOffset != rec.Offset:
					r.problem(&r.Corrupt, "%s %s@%d: a local record with origin offset %d", reg, topic, rec.Offset, rec.OriginOffset)
				}
				if w, ok := index[reg][k]; ok {
					w.count++
					r.problem(&r.Duplicated, "%s: %v stored twice: %s@%d and %s@%d", reg, k, w.Topic, w.rec.Offset, topic, rec.Offset)
					continue
				}
				index[reg][k] = &where{Topic: topic, rec: rec, count: 1}
				if _, ok := ackedKeys[k]; !ok && rec.OriginRegion == reg {
					r.StoredUnacked++
				}
			}
		}
	}
	return index
}

// checkAcked checks that every acknowledged record is at its acknowledged offset in its
// region.
func (r *Report) checkAcked(acks []Ack, index map[string]map[Key]*where) {
	for _, a := range acks {
		w, ok := index[a.Region][a.Key]
		switch {
		case !ok:
			r.problem(&r.Lost, "lost: %v acknowledged at %s %s@%d is not in %s's log", a.Key, a.Region, a.Topic, a.Offset, a.Region)
		case w.Topic != a.Topic || w.rec.Offset != a.Offset || w.rec.OriginRegion != a.Region:
			r.problem(&r.Conflicts, "%v acknowledged at %s %s@%d is stored at %s@%d (origin %s)", a.Key, a.Region, a.Topic, a.Offset, w.Topic, w.rec.Offset, w.rec.OriginRegion)
		}
	}
}

// checkMirrors checks that the mirrors converged: every record that originated in a region
// (acknowledged or not) is in every other region once, with its origin region and offset;
// every mirrored record has its original in its origin region.
func (r *Report) checkMirrors(index map[string]map[Key]*where) {
	regions := slices.Sorted(maps.Keys(index))
	for _, reg := range regions {
		for k, w := range index[reg] {
			if w.rec.OriginRegion != reg {
				if orig, ok := index[w.rec.OriginRegion][k]; !ok || orig.rec.OriginRegion != w.rec.OriginRegion {
					r.problem(&r.Phantom, "%s %s@%d: mirrored %v has no original in %s", reg, w.Topic, w.rec.Offset, k, w.rec.OriginRegion)
				}
				continue
			}
			for _, other := range regions {
				if other == reg {
					continue
				}
				m, ok := index[other][k]
				switch {
				case !ok:
					r.problem(&r.Unmirrored, "%v (%s %s@%d) not mirrored to %s", k, reg, w.Topic, w.rec.Offset, other)
				case m.Topic != w.Topic || m.rec.OriginRegion != reg || m.rec.OriginOffset != w.rec.Offset:
					r.problem(&r.Conflicts, "%v (%s %s@%d) mirrored to %s as %s@%d origin %s@%d", k, reg, w.Topic, w.rec.Offset, other, m.Topic, m.rec.Offset, m.rec.OriginRegion, m.rec.OriginOffset)
				}
			}
		}
	}
}
