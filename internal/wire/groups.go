package wire

import "time"

// Consumer groups and acknowledgement confirmation (docs/protocol.md, "Consumer groups" and
// "Commit").
//
// A SUBSCRIBE whose flags carry SubscribeGroup names a shared consumer group after its
// flags field: the subscription is one member of the group, and the group's records are
// split between its members, each record to one member at a time. On a member's stream an
// ACK acknowledges exactly the record it names (not cumulatively), and NAK asks for the
// record to be delivered again at once. COMMIT, on any subscription stream, asks the node
// to confirm with COMMITTED that every ACK and NAK sent before it is stored.

// Frame types of groups and commits.
const (
	TypeNak       Type = 0x28 // client -> node, a group member gives a record back
	TypeCommit    Type = 0x29 // client -> node, asks for COMMITTED once earlier ACKs are stored
	TypeCommitted Type = 0x2a // node -> client, every ACK before COMMIT Seq is stored
)

// SubscribeGroup is the Subscribe flag saying a Group block follows the flags. Encoding sets
// it from Subscribe.Group; a SUBSCRIBE with the flag and no block is malformed.
const SubscribeGroup = 1 << 2

// SubscribeStandby is the Subscribe flag of an exclusive durable's standby: when another
// subscriber holds the durable, the node does not refuse the subscription but sends nothing,
// not even SUBSCRIBED, until that one ends, then sets it up (Pulsar's Failover).
const SubscribeStandby = 1 << 3

// Group orders (Group.Order).
const (
	OrderNone  byte = 0 // any member gets any record
	OrderTopic byte = 1 // one member at a time per topic, in offset order
	OrderKey   byte = 2 // one member at a time per value of the record's KeyHeader header
)

// KeyHeader is the record header whose value keys OrderKey ("key"); a record without it has
// the empty key.
const KeyHeader = "key"

// maxDeliverLimit caps Group.MaxDeliver (a delivery count is a uint32 in the node's state).
const maxDeliverLimit = 1 << 20

// Group is a SUBSCRIBE's group block: the group's name and the settings the member
// expects. Zero settings mean "the group's own" for a member joining an existing group,
// and the node's defaults for the first member.
type Group struct {
	Name       string
	AckWait    time.Duration // encoded in milliseconds; 0: the default
	MaxDeliver uint64        // deliveries before a record goes to DeadLetter; 0: the default
	DeadLetter string        // topic of records that reached MaxDeliver; "": such records are dropped, counted
	Order      byte          // OrderNone, OrderTopic or OrderKey
}

func (g *Group) appendTo(e enc) enc {
	if g == nil {
		return e
	}
	return e.str(g.Name).uvarint(uint64(g.AckWait / time.Millisecond)).uvarint(g.MaxDeliver).
		str(g.DeadLetter).byte1(g.Order)
}

// decodeGroup decodes the group block of a SUBSCRIBE whose flags are flags, if they say one
// follows.
func decodeGroup(d *dec, flags uint64) *Group {
	if flags&SubscribeGroup == 0 || d.err != nil {
		return nil
	}
	g := &Group{Name: d.str("group")}
	ms := d.uvarint("ack wait")
	if d.err == nil && ms > uint64(24*time.Hour/time.Millisecond) {
		d.fail("ack wait %d ms: over the limit of 24 h", ms)
		return nil
	}
	g.AckWait = time.Duration(ms) * time.Millisecond
	g.MaxDeliver = d.uvarint("max deliver")
	if d.err == nil && g.MaxDeliver > maxDeliverLimit {
		d.fail("max deliver %d: over the limit of %d", g.MaxDeliver, maxDeliverLimit)
		return nil
	}
	g.DeadLetter = d.str("dead letter")
	g.Order = d.byte1("order")
	if d.err == nil && g.Order > OrderKey {
		d.fail("order %d: want 0 (none), 1 (topic) or 2 (key)", g.Order)
	}
	if d.err != nil {
		return nil
	}
	return g
}

// Nak gives the record at Offset of topic Index back to a group (group streams only): it is
// delivered again, to any member, without waiting for the ack-wait; the delivery counts
// towards max-deliver.
type Nak struct {
	Index  uint64
	Offset uint64
}

// Commit asks the node to answer with Committed{Seq} once every ACK and NAK sent on the
// stream before this frame is stored (synced). Seq is chosen by the client, increasing.
type Commit struct {
	Seq uint64
}

// Committed says every ACK and NAK sent before COMMIT Seq is stored.
type Committed struct {
	Seq uint64
}

func (*Nak) Type() Type       { return TypeNak }
func (*Commit) Type() Type    { return TypeCommit }
func (*Committed) Type() Type { return TypeCommitted }

func (f *Nak) appendBody(e enc) enc { return e.uvarint(f.Index).uvarint(f.Offset) }
func (f *Nak) decodeBody(d *dec) {
	f.Index = d.uvarint("index")
	f.Offset = d.uvarint("offset")
}

func (f *Commit) appendBody(e enc) enc    { return e.uvarint(f.Seq) }
func (f *Commit) decodeBody(d *dec)       { f.Seq = d.uvarint("seq") }
func (f *Committed) appendBody(e enc) enc { return e.uvarint(f.Seq) }
func (f *Committed) decodeBody(d *dec)    { f.Seq = d.uvarint("seq") }
