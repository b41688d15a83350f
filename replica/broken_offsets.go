//go:build quicmq_broken_offsets

package replica

import (
	"os"
	"sync"

	"github.com/quicmq/quicmq/wal"
)

// A deliberately broken build: a group's leader assigns the offsets of a publish when it
// proposes it, from a counter it keeps in memory per topic (set from the topic's applied
// next offset the first time this node proposes to it, then advanced by every proposal, less
// the records its de-duplication window already holds), and answers the publish with them,
// instead of with the offsets applying the committed entry gave (I9). While one leader stays
// and nothing is dropped, the two agree. A leader change breaks them: a node that leads again
// counts on from where it stopped, past the records the other leader appended in between
// (duplicate offsets: its acknowledgements name offsets that hold other records), and a
// leader whose proposals were dropped counted them (missing offsets). It exists so that the
// simulation (TestSimRegionWalManyTopics) and the replicated campaigns can be shown to catch
// offsets assigned before commit; no release is built with the tag.
func init() {
	os.Stderr.WriteString("replica: BROKEN BUILD (-tags quicmq_broken_offsets): a leader answers a publish with offsets it assigned when proposing it, not those applying it gave\n")
}

// offsetCounter is one engine's counters (on the engine's goroutine; the map of them is
// shared by the engines of a simulation).
type offsetCounter struct {
	next map[string]uint64
}

var offsetCounters struct {
	sync.Mutex
	m map[*engine]*offsetCounter
}

func (e *engine) predictOffsets(group uint64, data []byte, done func(Result, error)) func(Result, error) {
	sm, ok := e.sm.(*WalSM)
	if !ok {
		return done
	}
	we, err := DecodeEntry(data)
	if err != nil || we.Kind != EntryAppend {
		return done
	}
	offsetCounters.Lock()
	if offsetCounters.m == nil {
		offsetCounters.m = map[*engine]*offsetCounter{}
	}
	c := offsetCounters.m[e]
	if c == nil {
		c = &offsetCounter{next: map[string]uint64{}}
		offsetCounters.m[e] = c
	}
	offsetCounters.Unlock()
	topic := we.Topic
	if _, ok := c.next[topic]; !ok {
		c.next[topic], _, _ = sm.w.Next(topic)
	}
	fresh := 0
	g := sm.groups[group]
	for _, r := range we.Records {
		if g != nil && r.ProducerID != "" && r.Sequence != 0 {
			if p := g.dedup[dedupKey{topic: topic, producer: r.ProducerID}]; p != nil {
				if _, found := p.find(r.Sequence); found {
					continue
				}
			}
		}
		fresh++
	}
	first := c.next[topic]
	c.next[topic] += uint64(fresh)
	return func(r Result, err error) {
		if ar, ok := r.Detail.(*wal.AppendResult); ok && err == nil && ar.Err == nil && len(ar.Skipped) == 0 && ar.Count > 0 {
			ar.First, r.Offset = first, first
		}
		done(r, err)
	}
}
