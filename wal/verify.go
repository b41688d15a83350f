package wal

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// VerifyStats is what a Verify pass read.
type VerifyStats struct {
	Topics  int
	Records uint64
	Bytes   uint64 // keys and values read
}

// Verify reads back every durable record of every topic: Pebble checks the
// checksum of each block it reads from an sstable, the log checks each
// record's CRC, that it sits under its own key, and that offsets run dense
// from the first retained one to the high-watermark. It returns the first
// problem as a *CorruptError (topic and offset) or as Pebble's corruption
// error (which names the sstable), wrapped with the topic. Appends may go on
// meanwhile; records past the high-watermark at the start are not read.
func (l *Log) Verify(ctx context.Context) (VerifyStats, error) {
	pdb, err := l.readDB()
	if err != nil {
		return VerifyStats{}, fmt.Errorf("wal: verify: %w", err)
	}
	defer l.db.RUnlock()
	return l.verify(ctx, pdb)
}

type verifyTopic struct {
	t           *topic
	first, next uint64
}

func (l *Log) verify(ctx context.Context, pdb *pebble.DB) (VerifyStats, error) {
	l.mu.RLock()
	topics := make([]verifyTopic, 0, len(l.mu.topics))
	for _, t := range l.mu.topics {
		topics = append(topics, verifyTopic{t: t, first: t.first, next: t.hwm})
	}
	l.mu.RUnlock()
	slices.SortFunc(topics, func(a, b verifyTopic) int { return strings.Compare(a.t.name, b.t.name) })
	var st VerifyStats
	for _, vt := range topics {
		if err := l.verifyTopic(ctx, pdb, vt, &st); err != nil {
			return st, err
		}
		st.Topics++
	}
	return st, nil
}

func (l *Log) verifyTopic(ctx context.Context, pdb *pebble.DB, vt verifyTopic, st *VerifyStats) error {
	if vt.first >= vt.next {
		return nil
	}
	it, err := pdb.NewIter(&pebble.IterOptions{
		LowerBound: recordKey(vt.t.id, vt.first),
		UpperBound: recordKey(vt.t.id, vt.next),
	})
	if err != nil {
		return fmt.Errorf("wal: verify %q: %w", vt.t.name, err)
	}
	defer it.Close()
	want := vt.first
	for ok := it.First(); ok; ok = it.Next() {
		if want%1024 == 0 && ctx.Err() != nil {
			return fmt.Errorf("wal: verify %q: %w", vt.t.name, ctx.Err())
		}
		off, _, _, err := l.checkIter(vt.t, it)
		if err != nil {
			return err
		}
		if off != want {
			return &CorruptError{Topic: vt.t.name, Offset: want, Reason: fmt.Sprintf("record missing (next stored offset %d)", off)}
		}
		st.Records++
		st.Bytes += uint64(len(it.Key()) + len(it.Value()))
		want++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("wal: verify %q after offset %d: %w", vt.t.name, want, err)
	}
	if want != vt.next {
		return &CorruptError{Topic: vt.t.name, Offset: want, Reason: fmt.Sprintf("records %d..%d missing", want, vt.next-1)}
	}
	return nil
}
