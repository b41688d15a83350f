package wire

import (
	"fmt"
	"strconv"
	"time"
)

// Management streams (docs/protocol.md "Management streams"): a client opens a stream, sends
// one request frame and closes its side; the node answers with the frames below, then FIN,
// or with ERROR. Names and topics are in the client's view (a tenant's namespace is added and
// taken off by the node), as on every other stream.

// Management frame types.
const (
	TypeConsumers      Type = 0x50 // client -> node: list consumers (all, or one by name)
	TypeConsumerInfo   Type = 0x51 // node -> client: one consumer
	TypeConsumerReset  Type = 0x52 // client -> node: move a consumer's positions
	TypeConsumerDelete Type = 0x53 // client -> node: remove a consumer
	TypeTopicCreate    Type = 0x54 // client -> node: create a topic (or change its configuration)
	TypeTopicRemove    Type = 0x55 // client -> node: purge or delete a topic
	TypeDone           Type = 0x56 // node -> client: a state change is durable
)

// Error codes of management streams (and of a subscription reading a deleted topic).
const (
	CodeTopicDeleted Code = 20 // the topic was deleted while a subscription read it
	CodeInUse        Code = 21 // refused without force: a consumer has members, a topic has dependents
)

// Flags of management requests.
const (
	// ManageForce: do it although a consumer has connected members (they are ended first)
	// or a topic has dependents (durable consumers, mirror cursors).
	ManageForce uint64 = 1 << 0
	// ManageUpdate (TOPIC_CREATE): an existing topic takes the configuration given, instead
	// of the request being refused because the topic exists with another one.
	ManageUpdate uint64 = 1 << 1
	// ManageRetention (TOPIC_CREATE): the topic has retention of its own (MaxAge, MaxBytes;
	// both 0: kept forever); without it the node's default retention applies.
	ManageRetention uint64 = 1 << 2
)

// TOPIC_REMOVE operations.
const (
	RemovePurge  byte = 1 // delete every record, keep the topic, its offsets and consumers
	RemoveDelete byte = 2 // delete the topic, its records and every position of it
)

// Consumer kinds in CONSUMER_INFO.
const (
	KindDurable = "durable"
	KindGroup   = "group"
)

// maxConsumerTopics caps the topic rows of one CONSUMER_INFO frame.
const maxConsumerTopics = 1 << 16

// Consumers asks for the caller's consumers: every one when Name is empty (without per-topic
// rows), or the one called Name (with them; ERROR 7 when it has no position).
type Consumers struct {
	Name string
}

// ConsumerInfo describes one consumer.
type ConsumerInfo struct {
	Name    string
	Kind    string // KindDurable, or KindGroup
	Pattern string // its subscription pattern when known (a member is connected); else ""
	Pending uint64 // records not acknowledged, over all its topics
	Members uint64 // subscription streams connected to this node under its name now
	LastAck int64  // unix nanoseconds of its last stored position; 0: none recorded
	Topics  []ConsumerTopic
	// Group is set for Kind KindGroup: the group's settings and outstanding records. It
	// travels as optional trailing fields, so a frame without them still decodes.
	Group *ConsumerGroup
}

// ConsumerGroup is what CONSUMER_INFO carries of a group besides a durable's fields.
type ConsumerGroup struct {
	AckWait     uint64 // nanoseconds
	MaxDeliver  uint64
	DeadLetter  string // "" when records that reach MaxDeliver are dropped
	Order       byte   // OrderNone, OrderTopic or OrderKey
	Outstanding uint64 // records delivered and not yet acknowledged, over all its topics
	// TopicOutstanding is Outstanding per topic, in the order of Topics.
	TopicOutstanding []uint64
}

// ConsumerTopic is a consumer's state on one topic.
type ConsumerTopic struct {
	Topic   string
	Resume  uint64 // the offset it resumes at (last acknowledged + 1, or where a reset put it)
	Next    uint64 // the topic's next offset (head)
	Pending uint64 // records from max(Resume, first retained) to Next
	Updated int64  // unix nanoseconds the position was last written; 0: unknown
}

// ConsumerReset moves every topic position of consumer Name to Start/StartValue (as
// SUBSCRIBE's start; StartOffset's value applies to each of its topics). Answered by the
// CONSUMER_INFO after the reset.
type ConsumerReset struct {
	Name       string
	Start      StartKind
	StartValue uint64
	Flags      uint64 // ManageForce
}

// ConsumerDelete removes consumer Name: every position it has. Answered by DONE (Count:
// positions removed).
type ConsumerDelete struct {
	Name  string
	Flags uint64 // ManageForce
}

// TopicCreate creates an empty topic, with retention of its own when Flags has
// ManageRetention. Answered by the topic's TOPIC_INFO.
type TopicCreate struct {
	Topic    string
	Flags    uint64 // ManageRetention, ManageUpdate
	MaxAge   uint64 // nanoseconds; 0: no age limit
	MaxBytes uint64 // 0: no size limit
	// Replicas is the topic's replica count in a replicated region; 0: the region's
	// (--replicas). Encoded only when not zero, as an optional last field, so a TOPIC_CREATE
	// without it is what it always was.
	Replicas uint64
}

// TopicRemove purges (RemovePurge) or deletes (RemoveDelete) Topic. Answered by DONE
// (Count: records deleted).
type TopicRemove struct {
	Topic string
	Op    byte
	Flags uint64 // ManageForce
}

// Done says a state change is durable.
type Done struct {
	Count uint64
}

func (*Consumers) Type() Type      { return TypeConsumers }
func (*ConsumerInfo) Type() Type   { return TypeConsumerInfo }
func (*ConsumerReset) Type() Type  { return TypeConsumerReset }
func (*ConsumerDelete) Type() Type { return TypeConsumerDelete }
func (*TopicCreate) Type() Type    { return TypeTopicCreate }
func (*TopicRemove) Type() Type    { return TypeTopicRemove }
func (*Done) Type() Type           { return TypeDone }

func init() {
	for t, s := range map[Type]string{
		TypeConsumers: "CONSUMERS", TypeConsumerInfo: "CONSUMER_INFO", TypeConsumerReset: "CONSUMER_RESET",
		TypeConsumerDelete: "CONSUMER_DELETE", TypeTopicCreate: "TOPIC_CREATE", TypeTopicRemove: "TOPIC_REMOVE",
		TypeDone: "DONE",
	} {
		typeNames[t] = s
		knownType[t] = true // computed from typeNames before this init ran
	}
	codeNames[CodeTopicDeleted] = "topic deleted"
	codeNames[CodeInUse] = "in use"
}

// newManageFrame returns an empty management frame of type t, or nil.
func newManageFrame(t Type) Frame {
	switch t {
	case TypeConsumers:
		return new(Consumers)
	case TypeConsumerInfo:
		return new(ConsumerInfo)
	case TypeConsumerReset:
		return new(ConsumerReset)
	case TypeConsumerDelete:
		return new(ConsumerDelete)
	case TypeTopicCreate:
		return new(TopicCreate)
	case TypeTopicRemove:
		return new(TopicRemove)
	case TypeDone:
		return new(Done)
	}
	return newHolderFrame(t) // holder.go
}

func (f *Consumers) appendBody(e enc) enc { return e.str(f.Name) }
func (f *Consumers) decodeBody(d *dec)    { f.Name = d.str("name") }

func (f *ConsumerInfo) appendBody(e enc) enc {
	e = e.str(f.Name).str(f.Kind).str(f.Pattern).uvarint(f.Pending).uvarint(f.Members).
		uvarint(uint64(f.LastAck)).uvarint(uint64(len(f.Topics)))
	for _, t := range f.Topics {
		e = e.str(t.Topic).uvarint(t.Resume).uvarint(t.Next).uvarint(t.Pending).uvarint(uint64(t.Updated))
	}
	if g := f.Group; g != nil {
		e = e.uvarint(g.AckWait).uvarint(g.MaxDeliver).str(g.DeadLetter).byte1(g.Order).uvarint(g.Outstanding)
		for i := range f.Topics {
			var o uint64
			if i < len(g.TopicOutstanding) {
				o = g.TopicOutstanding[i]
			}
			e = e.uvarint(o)
		}
	}
	return e
}
func (f *ConsumerInfo) decodeBody(d *dec) {
	f.Name = d.str("name")
	f.Kind = d.str("kind")
	f.Pattern = d.str("pattern")
	f.Pending = d.uvarint("pending")
	f.Members = d.uvarint("members")
	f.LastAck = int64(d.uvarint("last ack"))
	n := d.uvarint("topic count")
	f.Topics = nil
	if d.err != nil || n == 0 {
		f.decodeGroup(d)
		return
	}
	// Each row takes at least 5 bytes (an empty topic and four one-byte varints): a count the
	// body cannot hold is refused before the slice is allocated.
	if n > maxConsumerTopics || n*5 > uint64(len(d.b)) {
		d.fail("%d topics: over the limit of %d or the frame's size", n, maxConsumerTopics)
		return
	}
	f.Topics = make([]ConsumerTopic, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		f.Topics = append(f.Topics, ConsumerTopic{
			Topic: d.str("topic"), Resume: d.uvarint("resume"), Next: d.uvarint("next"),
			Pending: d.uvarint("pending"), Updated: int64(d.uvarint("updated")),
		})
	}
	f.decodeGroup(d)
}

// decodeGroup reads the optional group fields, present when bytes follow the topics.
func (f *ConsumerInfo) decodeGroup(d *dec) {
	f.Group = nil
	if d.err != nil || len(d.b) == 0 {
		return
	}
	g := &ConsumerGroup{AckWait: d.uvarint("ack wait"), MaxDeliver: d.uvarint("max deliver"),
		DeadLetter: d.str("dead letter"), Order: d.byte1("order"), Outstanding: d.uvarint("outstanding")}
	if len(f.Topics) > 0 {
		g.TopicOutstanding = make([]uint64, 0, len(f.Topics))
		for range f.Topics {
			g.TopicOutstanding = append(g.TopicOutstanding, d.uvarint("topic outstanding"))
		}
	}
	f.Group = g
	d.skipExtension()
}

func (f *ConsumerReset) appendBody(e enc) enc {
	return e.str(f.Name).byte1(byte(f.Start)).uvarint(f.StartValue).uvarint(f.Flags)
}
func (f *ConsumerReset) decodeBody(d *dec) {
	f.Name = d.str("name")
	f.Start = StartKind(d.byte1("start"))
	f.StartValue = d.uvarint("start value")
	f.Flags = d.uvarint("flags")
}

func (f *ConsumerDelete) appendBody(e enc) enc { return e.str(f.Name).uvarint(f.Flags) }
func (f *ConsumerDelete) decodeBody(d *dec) {
	f.Name = d.str("name")
	f.Flags = d.uvarint("flags")
}

func (f *TopicCreate) appendBody(e enc) enc {
	e = e.str(f.Topic).uvarint(f.Flags).uvarint(f.MaxAge).uvarint(f.MaxBytes)
	if f.Replicas != 0 {
		e = e.uvarint(f.Replicas)
	}
	return e
}
func (f *TopicCreate) decodeBody(d *dec) {
	f.Topic = d.str("topic")
	f.Flags = d.uvarint("flags")
	f.MaxAge = d.uvarint("max age")
	f.MaxBytes = d.uvarint("max bytes")
	if d.err == nil && len(d.b) > 0 {
		f.Replicas = d.uvarint("replicas")
		if d.err == nil && f.Replicas == 0 {
			d.fail("replicas 0 encoded (absent means the region's)")
		}
	}
}

func (f *TopicRemove) appendBody(e enc) enc { return e.str(f.Topic).byte1(f.Op).uvarint(f.Flags) }
func (f *TopicRemove) decodeBody(d *dec) {
	f.Topic = d.str("topic")
	f.Op = d.byte1("op")
	f.Flags = d.uvarint("flags")
}

func (f *Done) appendBody(e enc) enc { return e.uvarint(f.Count) }
func (f *Done) decodeBody(d *dec)    { f.Count = d.uvarint("count") }

// ParseStart reads where a reset puts a consumer, as the CLI and the admin API take it:
// "earliest", "latest", an offset (a decimal number) or a time (RFC 3339, e.g.
// 2026-12-01T10:00:00Z).
func ParseStart(s string) (StartKind, uint64, error) {
	switch s {
	case "earliest":
		return StartEarliest, 0, nil
	case "latest":
		return StartLatest, 0, nil
	case "":
		return 0, 0, fmt.Errorf("no reset target: want earliest, latest, an offset or an RFC 3339 time")
	}
	if off, err := strconv.ParseUint(s, 10, 64); err == nil {
		return StartOffset, off, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, 0, fmt.Errorf("reset target %q: want earliest, latest, an offset or an RFC 3339 time (2026-12-01T10:00:00Z)", s)
	}
	if t.UnixNano() < 0 {
		return 0, 0, fmt.Errorf("reset target %q: a time before 1970 is not in any log", s)
	}
	return StartTime, uint64(t.UnixNano()), nil
}
