package replica

import (
	"fmt"
	"testing"

	"github.com/quicmq/quicmq/wal"
)

// TestApplyAllocatesLittlePerEntry bounds what WalSM allocates to apply one one-record
// append, in a round of 32 of them over as many topics of one group (a client publishing
// over many topics in turn: each publish its own entry). A new decoded entry, topic name,
// state key and value, staged byte positions and result for each were 10 allocations an
// entry (issue 29); what is left is the entry's share of the round's own.
func TestApplyAllocatesLittlePerEntry(t *testing.T) {
	const group, perRound, topics = 7, 32, 1000
	l, err := wal.Open(t.TempDir(), wal.Options{RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sm, err := NewWalSM(WalSMConfig{Log: l, GroupOf: func(string) uint64 { return group }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sm.Applied(group); err != nil {
		t.Fatal(err)
	}
	datas := make([][]byte, topics)
	for i := range datas {
		datas[i], err = EncodeEntry(nil, &WalEntry{Kind: EntryAppend, Topic: fmt.Sprintf("t.%04d", i), Records: []wal.Record{{Payload: make([]byte, 100)}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	index, next := uint64(0), 0
	ents := make([]Entry, perRound)
	round := func() {
		b := l.DB().NewBatch()
		defer b.Close()
		for i := range ents {
			index++
			ents[i] = Entry{Index: index, Time: int64(index), Data: datas[next]}
			next = (next + 1) % topics
		}
		if _, err := sm.Apply(b, group, index, ents); err != nil {
			t.Fatal(err)
		}
		sm.Committed() // as the driver does once the round's batch is synced
	}
	for range topics / perRound * 2 { // every topic bound and applied before measuring
		round()
	}
	perEntry := testing.AllocsPerRun(50, round) / perRound
	t.Logf("%.2f allocations per one-record entry applied", perEntry)
	if perEntry > 2 {
		t.Errorf("applying a one-record entry allocates %.2f times, want at most 2", perEntry)
	}
}
