package replica

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// One raft entry carries many proposals: the proposals to one group that a round takes
// (queued while the previous round synced, from every publisher of the node, for any of
// the group's topics) go into one entry, framed as a batch envelope, instead of one entry
// each. The state machine applies them one by one, in order, in the entry's round, as it
// would separate entries, so offsets, de-duplication and every state an entry carries stay
// as they were (I9, I10); each proposal completes with its own result. A replica that does
// not know the framing must not receive it: a node batches only once every node of its
// region announces EnvelopeFeature (Driver.SetBatching).
//
//	envelopeBatch | node u64 | count u32 | count x (seq u64 | time u64 | len u32 | data)
const (
	envelopeBatch       = 3
	envelopeBatchHeader = 1 + 8 + 4
	envelopeBatchSub    = 8 + 8 + 4
	// maxBatchEntryBytes bounds a batch entry's data: raft sends an entry whole, and an
	// append message holds about MaxSizePerMsg (1 MiB by default).
	maxBatchEntryBytes = 1 << 20
	// maxBatchProposals bounds the proposals of one batch entry.
	maxBatchProposals = 4096
)

// EnvelopeFeature is the level of the driver's entry framing this build reads, announced in
// gossip as "envelope": 2 adds the batch envelope (0 or absent: single proposals only).
const EnvelopeFeature = 2

// subProposal is one proposal inside a batch envelope.
type subProposal struct {
	seq  uint64
	time int64
	data []byte
}

// batchEnvelope is a decoded batch envelope.
type batchEnvelope struct {
	node uint64
	subs []subProposal
}

// encodeBatch appends the batch envelope of subs to dst.
func encodeBatch(dst []byte, node uint64, subs []subProposal) []byte {
	n := envelopeBatchHeader
	for _, s := range subs {
		n += envelopeBatchSub + len(s.data)
	}
	p := slices.Grow(dst, n)
	p = append(p, envelopeBatch)
	p = binary.BigEndian.AppendUint64(p, node)
	p = binary.BigEndian.AppendUint32(p, uint32(len(subs)))
	for _, s := range subs {
		p = binary.BigEndian.AppendUint64(p, s.seq)
		p = binary.BigEndian.AppendUint64(p, uint64(s.time))
		p = binary.BigEndian.AppendUint32(p, uint32(len(s.data)))
		p = append(p, s.data...)
	}
	return p
}

// decodeBatch reads a batch envelope; the subs' data alias p. Anything malformed (a count
// or length past the end, trailing bytes, no proposal) is errCorrupt.
func decodeBatch(p []byte) (batchEnvelope, error) { return decodeBatchInto(p, nil) }

// decodeBatchInto is decodeBatch appending the proposals to subs (its subs are subs grown,
// or subs itself, empty, on an error), for a caller that reuses that buffer.
func decodeBatchInto(p []byte, subs []subProposal) (batchEnvelope, error) {
	bad := func(why string) (batchEnvelope, error) {
		return batchEnvelope{}, fmt.Errorf("%w: batch entry of %d bytes: %s", errCorrupt, len(p), why)
	}
	if len(p) < envelopeBatchHeader || p[0] != envelopeBatch {
		return bad("no batch header")
	}
	b := batchEnvelope{node: binary.BigEndian.Uint64(p[1:9])}
	count := binary.BigEndian.Uint32(p[9:13])
	if count == 0 || uint64(count)*envelopeBatchSub > uint64(len(p)-envelopeBatchHeader) {
		return bad(fmt.Sprintf("%d proposals", count))
	}
	b.subs = slices.Grow(subs[:0], int(count))
	rest := p[envelopeBatchHeader:]
	for range count {
		if len(rest) < envelopeBatchSub {
			return bad("a proposal's header past the end")
		}
		s := subProposal{seq: binary.BigEndian.Uint64(rest[0:8]), time: int64(binary.BigEndian.Uint64(rest[8:16]))}
		n := binary.BigEndian.Uint32(rest[16:20])
		rest = rest[envelopeBatchSub:]
		if uint64(n) > uint64(len(rest)) {
			return bad("a proposal's data past the end")
		}
		s.data, rest = rest[:n:n], rest[n:]
		b.subs = append(b.subs, s)
	}
	if len(rest) != 0 {
		return bad(fmt.Sprintf("%d trailing bytes", len(rest)))
	}
	return b, nil
}

// proposeBatch appends the proposals qs, all to one group, as one entry if this node
// leads it (each is done as propose does it: once applied, or with the error that says it
// never will be). A single proposal, or a batch that would be too large, goes as propose.
func (e *engine) proposeBatch(groupID uint64, qs []queuedProposal) {
	for len(qs) > 0 {
		n, bytes := 0, envelopeBatchHeader
		for n < len(qs) && n < maxBatchProposals && (n == 0 || bytes+envelopeBatchSub+len(qs[n].data) <= maxBatchEntryBytes) {
			bytes += envelopeBatchSub + len(qs[n].data)
			n++
		}
		if n == 1 {
			e.propose(groupID, qs[0].data, qs[0].done)
		} else {
			e.proposeMany(groupID, qs[:n])
		}
		qs = qs[n:]
	}
}

func (e *engine) proposeMany(groupID uint64, qs []queuedProposal) {
	fail := func(err error) {
		for _, q := range qs {
			q.done(Result{}, err)
		}
	}
	g, bs, err := e.leading(groupID)
	if err != nil {
		fail(err)
		return
	}
	now := e.cfg.Now().UnixNano()
	subs := e.propSubs[:0] // encodeBatch copies their data: the buffer is the engine's
	first := e.seq + 1
	for _, q := range qs {
		e.seq++
		subs = append(subs, subProposal{seq: e.seq, time: now, data: q.data})
	}
	e.touch(g)
	env := encodeBatch(e.envelopeBuf(0), e.cfg.NodeID, subs)
	clear(subs)
	e.propSubs = subs[:0]
	err = g.rn.Propose(env)
	e.keepEnvelope(env)
	if err != nil {
		fail(fmt.Errorf("replica: propose to group %d: %w", groupID, err))
		return
	}
	for i, q := range qs {
		g.pending = append(g.pending, proposal{seq: first + uint64(i), term: bs.GetTerm(), done: e.predictOffsets(groupID, q.data, q.done)})
	}
	e.stats.Batched++
	e.stats.BatchedProps += uint64(len(qs))
}

// maxKeptEnvelope bounds the framing buffer the engine keeps between proposals
// (envelopeBuf): a batch entry is at most maxBatchEntryBytes, a single proposal may be
// larger and gets a buffer of its own.
const maxKeptEnvelope = 2 * maxBatchEntryBytes

// envelopeBuf returns the engine's framing buffer, empty, with room for n bytes. A buffer
// made fresh for every proposal was a first touch of new memory for every record a leader
// took (the VM charges about 20 µs per 4 KiB page), and it lived only until raft copied it.
func (e *engine) envelopeBuf(n int) []byte {
	return slices.Grow(e.envBuf[:0], n)
}

// keepEnvelope keeps env, just given to RawNode.Propose, for the next proposal. That is
// safe only because the engine proposes on a group it leads (leading, checked in the same
// engine step): etcd raft's leader then clones the entry into its log (raft.appendEntry)
// before Propose returns, and a refused proposal keeps nothing. A follower would forward
// the proposal's bytes in a message instead: never reached here. TestRaftClonesProposal
// fails on a raft release that stops copying.
func (e *engine) keepEnvelope(env []byte) {
	if cap(env) <= maxKeptEnvelope {
		e.envBuf = env[:0]
	}
}
