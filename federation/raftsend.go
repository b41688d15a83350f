package federation

import (
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
)

// raftKeepRounds is how many rounds a raft stream remembers its largest batch for: the
// buffer it keeps from one round to the next holds twice the largest of the last 128 to 256
// rounds (bounded by twice the frame limit), so a loaded leader's appends are encoded into
// memory already faulted in, while a catch-up's large buffer is released once ordinary
// rounds follow it. Under 16 pipelined publishers a leader's batches to one follower
// ranged from a few KiB to 16 MB at 25-45 rounds a second: a memory of 16 rounds (under a
// second) let the buffer shrink and grow again, each growth onto pages new to the process
// (on this project's VMs a first touch costs 20 µs a page, 70 times the copy).
const raftKeepRounds = 128

// raftBatchBytes bounds a RAFT_BATCH frame below the frame limit (a single larger message
// still goes alone): a round of a loaded leader carries up to 256 appends of 1 MiB to a
// follower, and frames of up to 16 MB then had the follower read each into a new body
// (memory new to the process); frames of at most 4 MiB fit the body its reader keeps
// (raftReuseBody). A frame header per 4 MiB costs nothing.
const raftBatchBytes = 4 << 20

// raftIdleRelease is how long a raft stream sends nothing before it gives its buffer back
// (raftSender.release): a region gone quiet keeps no buffer sized for its busiest rounds.
const raftIdleRelease = 2 * time.Second

// raftSender writes what one raft stream's queue held into RAFT_BATCH frames on the
// stream's wire.Writer. The stream's writer goroutine (writeRaft) owns it.
type raftSender struct {
	w        *wire.Writer
	from, to uint64
	limit    int                          // of one batch: raftBatchBytes or the frame limit if less, less room for the header
	encode   func([]byte) ([]byte, error) // s.msgs as a batch from from to to, appended
	msgs     []replica.Message
	maxKeep  int // twice the frame limit
	rounds   int
	peak     [2]int // the largest batch of this span of raftKeepRounds rounds, and of the span before
}

func newRaftSender(w *wire.Writer, from, to uint64, maxFrame int) *raftSender {
	s := &raftSender{w: w, from: from, to: to, limit: min(maxFrame, raftBatchBytes) - 64, msgs: make([]replica.Message, 0, 64), maxKeep: 2 * maxFrame}
	s.encode = func(dst []byte) ([]byte, error) { return replica.EncodeBatch(dst, s.from, s.to, s.msgs) }
	return s
}

// send writes q as batches of at most limit bytes each (a single larger message alone:
// Send dropped those over the frame limit) and flushes them, returning the messages and
// batch bytes written.
func (s *raftSender) send(q []raftQueued) (msgs, bytes int, err error) {
	// The buffer to keep is set before the round is written, from its largest batch as
	// well: a batch larger than the kept buffer grows it to that size at once
	// (WriteRaftBatch), and the Flush that follows keeps it, where a buffer grown only
	// for this batch was dropped by that Flush and grown again next round.
	largest := 0
	for i, size := 0, 0; i < len(q); i++ {
		if size > 0 && size+q[i].size > s.limit {
			size = 0
		}
		size += q[i].size
		largest = max(largest, size)
	}
	s.peak[0] = max(s.peak[0], largest+64)
	s.w.KeepBuffer(min(2*max(s.peak[0], s.peak[1])+64<<10, s.maxKeep))
	for len(q) > 0 {
		s.msgs = s.msgs[:0]
		size := 0
		for len(q) > 0 && (len(s.msgs) == 0 || size+q[0].size <= s.limit) {
			s.msgs = append(s.msgs, q[0].m)
			size += q[0].size
			q = q[1:]
		}
		// The batch is encoded straight into the stream's buffer, which size bounds:
		// growing it once up front spares the marshaller's copies of the batch so far
		// each time it outgrows its buffer.
		n, err := s.w.WriteRaftBatch(size+64, s.encode)
		if err != nil {
			return msgs, bytes, err
		}
		msgs += len(s.msgs)
		bytes += n
	}
	if s.rounds++; s.rounds%raftKeepRounds == 0 {
		s.peak = [2]int{0, s.peak[0]}
	}
	if err := s.w.Flush(); err != nil {
		return msgs, bytes, err
	}
	return msgs, bytes, nil
}

// release forgets the rounds' sizes and gives the stream's buffer back: the stream has been
// idle for raftIdleRelease. The next round sizes it again.
func (s *raftSender) release() {
	s.peak, s.rounds = [2]int{}, 0
	s.w.Release()
}
