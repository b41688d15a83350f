package linearize

import (
	"fmt"
	"sync"
	"time"

	"github.com/quicmq/quicmq/internal/campaign"
)

// Key names one record: producer id and sequence number, unique in a campaign.
type Key = campaign.Key

// Outcome is what a publish's client learnt.
type Outcome uint8

const (
	// Pending: invoked, not answered yet. Check treats it as Unknown.
	Pending Outcome = iota
	// OK: acknowledged at an offset.
	OK
	// Refused: answered with an error that says nothing was stored.
	Refused
	// Unknown: never answered (timed out, connection lost): it may or may
	// not have been stored.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	}
	return "pending"
}

// Publish is one publish attempt. Times are nanoseconds since the history
// began (a monotonic clock).
type Publish struct {
	Client       int // the producer's session, for the visualization's rows
	Node, Topic  string
	Key          Key
	Call, Return int64
	Outcome      Outcome
	Offset       uint64 // when OK
	Err          string // when Refused or Unknown
}

// Read is one read of a topic's log from offset 0: the keys observed at
// offsets 0, 1, ... in order. A final read is of a replica's whole log once
// the campaign is quiet; Recs then holds the records themselves for the judge.
type Read struct {
	Client       int
	Node, Topic  string
	Call, Return int64
	Keys         []Key
	Final        bool
	Recs         []campaign.Rec
}

// History records a campaign's operations; safe for concurrent use.
type History struct {
	start time.Time
	mu    sync.Mutex
	pubs  []*Publish
	reads []*Read
}

// NewHistory starts a history whose clock reads 0 now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the history's clock: nanoseconds since NewHistory.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// PublishOp is a publish in progress.
type PublishOp struct {
	h *History
	p *Publish
}

// Publish records the invocation of a publish of key k to topic through node.
func (h *History) Publish(client int, node, topic string, k Key) PublishOp {
	p := &Publish{Client: client, Node: node, Topic: topic, Key: k, Call: h.Now()}
	h.mu.Lock()
	h.pubs = append(h.pubs, p)
	h.mu.Unlock()
	return PublishOp{h, p}
}

func (op PublishOp) finish(o Outcome, offset uint64, err error) {
	now := op.h.Now()
	op.h.mu.Lock()
	defer op.h.mu.Unlock()
	if op.p.Outcome != Pending {
		panic(fmt.Sprintf("linearize: publish %v answered twice (%v, then %v)", op.p.Key, op.p.Outcome, o))
	}
	op.p.Outcome, op.p.Offset, op.p.Return = o, offset, now
	if err != nil {
		op.p.Err = err.Error()
	}
}

// OK records its acknowledgement at offset.
func (op PublishOp) OK(offset uint64) { op.finish(OK, offset, nil) }

// Refused records an answer that says nothing was stored.
func (op PublishOp) Refused(err error) { op.finish(Refused, 0, err) }

// Unknown records that it was never answered.
func (op PublishOp) Unknown(err error) { op.finish(Unknown, 0, err) }

// ReadOp is a read in progress.
type ReadOp struct {
	h *History
	r *Read
}

// Read records the invocation of a read of topic from offset 0 at node.
func (h *History) Read(client int, node, topic string) ReadOp {
	return ReadOp{h, &Read{Client: client, Node: node, Topic: topic, Call: h.Now()}}
}

// Done records the read's return with the keys it observed. A read that
// failed is simply not recorded: it observed nothing it claims.
func (op ReadOp) Done(keys []Key) {
	op.r.Return, op.r.Keys = op.h.Now(), keys
	op.h.mu.Lock()
	op.h.reads = append(op.h.reads, op.r)
	op.h.mu.Unlock()
}

// Final records the read as a final read of node's whole log of the topic.
func (op ReadOp) Final(recs []campaign.Rec) {
	keys := make([]Key, len(recs))
	for i, r := range recs {
		keys[i] = r.Key()
	}
	op.r.Final, op.r.Recs = true, recs
	op.Done(keys)
}

// Ops returns copies of the operations recorded so far.
func (h *History) Ops() ([]Publish, []Read) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pubs := make([]Publish, len(h.pubs))
	for i, p := range h.pubs {
		pubs[i] = *p
	}
	reads := make([]Read, len(h.reads))
	for i, r := range h.reads {
		reads[i] = *r
	}
	return pubs, reads
}

// Key is the key the publish carries.
func (op PublishOp) Key() Key { return op.p.Key }
