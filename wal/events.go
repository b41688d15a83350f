package wal

import (
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/internal/timeline"
)

// storeEvents is the Pebble event listener of a log's store: damage is logged, and with a
// timeline (Options.Timeline) flushes, compactions and write stalls are recorded in it.
func storeEvents(log *slog.Logger, tl *timeline.Recorder) *pebble.EventListener {
	el := &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
		// Pebble's default answer to a checksum mismatch is Logger.Fatalf, which would
		// take the whole node down for one damaged block. The read that found it gets
		// the error (naming the file) anyway; the node stays up for every topic that is
		// intact.
		log.Error("on-disk corruption: reads of the damaged range fail; restore this store from a replica or backup",
			"file", info.Path, "err", info.Details)
	}}
	if tl == nil {
		return el
	}
	el.FlushEnd = func(info pebble.FlushInfo) {
		tl.Add(timeline.Flush, time.Now().Add(-info.TotalDuration), info.TotalDuration, tableBytes(info.Output))
	}
	el.CompactionEnd = func(info pebble.CompactionInfo) {
		tl.Add(timeline.Compaction, time.Now().Add(-info.TotalDuration), info.TotalDuration, tableBytes(info.Output.Tables))
	}
	el.WriteStallBegin = func(pebble.WriteStallBeginInfo) { tl.Begin(timeline.Stall) }
	el.WriteStallEnd = func() { tl.End(timeline.Stall, 0) }
	return el
}

func tableBytes(ts []pebble.TableInfo) int64 {
	var n uint64
	for _, t := range ts {
		n += t.Size
	}
	return int64(n)
}
