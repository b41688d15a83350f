package wire

import "fmt"

// Version is the highest protocol version this package speaks, and MinVersion the lowest
// (HELLO and WELCOME carry it; docs/protocol.md, "Versions"). A node answers a HELLO of
// version v with WELCOME of min(v, Version) and then sends that version's frames: version 1
// is frozen as documented; version 2 adds TOPIC_INFO's leader fields in every answer and the
// extension rule (extensible frames end with fields a receiver does not know, which it
// skips: skipExtension); version 3 adds the RUNS frame (runs.go) on subscription streams.
//
// PeerVersion is the version of the client protocol's frames on node-to-node links (a peer
// link has no HELLO: a node announces it in gossip as its proto feature). It stays 2: RUNS
// is a client stream's frame, and a node passes a region replay's stream through to its
// client unchanged, which must then carry only frames of every client version above 1.
const (
	Version     = 5
	MinVersion  = 1
	PeerVersion = 2
)

// Negotiate is the version a node speaks with a client that said hello in version v, and
// whether it speaks any: the lower of v and Version, at least MinVersion.
func Negotiate(v uint64) (uint64, bool) {
	if v < MinVersion {
		return 0, false
	}
	return min(v, Version), true
}

// ALPN is the TLS application protocol of client connections.
const ALPN = "quicmq/1"

// PeerALPN is the TLS application protocol of node-to-node links (mutual TLS).
const PeerALPN = "quicmq-peer/1"

// maxWatchPatterns caps the patterns of one WATCH frame.
const maxWatchPatterns = 4096

// Type is a frame's type byte.
type Type byte

// Frame types. The first frame on a stream names the stream's kind: HELLO opens the control
// stream, PUBLISH a publish stream, SUBSCRIBE a subscription stream, TOPICS a listing.
const (
	TypeHello        Type = 0x01 // client -> node, first frame of the control stream
	TypeWelcome      Type = 0x02 // node -> client, answer to HELLO
	TypeError        Type = 0x03 // either way; ends the stream's operation
	TypePublish      Type = 0x10 // client -> node
	TypePublishAck   Type = 0x11 // node -> client, after the record is durable
	TypePublishError Type = 0x12 // node -> client, the publish failed; the stream goes on
	TypePublishBatch Type = 0x13 // client -> node, a run of publishes to one topic (publishbatch.go)
	TypePublishAcks  Type = 0x14 // node -> client, a run of publishes is durable
	TypeSubscribe    Type = 0x20 // client -> node, first frame of a subscription stream
	TypeSubscribed   Type = 0x21 // node -> client, the subscription is set up
	TypeTopic        Type = 0x22 // node -> client, binds a stream-local topic index to a name
	TypeRecord       Type = 0x23 // node -> client
	TypeAck          Type = 0x24 // client -> node, cumulative per topic
	TypeGap          Type = 0x25 // node -> client, records the subscription skipped (retention)
	TypeRecords      Type = 0x26 // node -> client, a run of records of one topic (records.go)
	TypeTopics       Type = 0x30 // client -> node, first frame of a listing stream
	TypeTopicInfo    Type = 0x31 // node -> client, one per topic, then FIN

	// Node-to-node frames (ALPN quicmq-peer/1).
	TypeWatch  Type = 0x40 // first frame of a catalog stream; later WATCH frames replace the patterns
	TypeMirror Type = 0x41 // first frame of a mirror stream
	TypeHead   Type = 0x42 // serving node -> mirroring node: the origin log's head, when caught up
)

var typeNames = map[Type]string{
	TypeHello: "HELLO", TypeWelcome: "WELCOME", TypeError: "ERROR",
	TypePublish: "PUBLISH", TypePublishAck: "PUBLISH_ACK", TypePublishError: "PUBLISH_ERROR",
	TypePublishBatch: "PUBLISH_BATCH", TypePublishAcks: "PUBLISH_ACKS", TypePublishOpen: "PUBLISH_OPEN",
	TypePublishMulti: "PUBLISH_MULTI",
	TypeSubscribe:    "SUBSCRIBE", TypeSubscribed: "SUBSCRIBED", TypeTopic: "TOPIC",
	TypeRecord: "RECORD", TypeAck: "ACK", TypeGap: "GAP", TypeRecords: "RECORDS", TypeRuns: "RUNS", TypeCaughtUp: "CAUGHT_UP",
	TypeNak: "NAK", TypeCommit: "COMMIT", TypeCommitted: "COMMITTED",
	TypeTopics: "TOPICS", TypeTopicInfo: "TOPIC_INFO",
	TypeWatch: "WATCH", TypeMirror: "MIRROR", TypeHead: "HEAD", TypePosition: "POSITION", TypeGroupPosition: "GROUP_POSITION", TypeRaft: "RAFT", TypeRaftBatch: "RAFT_BATCH",
	TypeRaftFetch: "RAFT_FETCH", TypeRaftChunk: "RAFT_CHUNK",
}

func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type 0x%02x", byte(t))
}

// Frame is one decoded frame. The concrete types below are the only implementations.
type Frame interface {
	Type() Type
	appendBody(e enc) enc
	decodeBody(d *dec)
}

// Header is one record header. Keys are strings; values are bytes.
type Header struct {
	Key   string
	Value []byte
}

// Hello opens the control stream.
type Hello struct {
	Version uint64
	Client  string // free-form client name, for logs
	Token   string // authentication token; empty when the node allows anonymous clients
}

// Welcome answers Hello and tells the client the node's limits.
type Welcome struct {
	Version          uint64
	Node             string
	Region           string
	MaxPayload       uint64
	MaxFrame         uint64
	MaxSubscriptions uint64 // open subscription streams per connection
	MaxStreams       uint64 // open streams of any kind per connection
}

// ErrorFrame reports a failure and ends the stream's operation (the connection, for the
// control stream). It converts to *Error with AsError.
type ErrorFrame struct {
	Code    Code
	Message string
}

// AsError converts the frame to the error type applications see.
func (f *ErrorFrame) AsError() *Error { return &Error{Code: f.Code, Message: f.Message} }

// Publish appends one record to a topic. Seq is chosen by the client, increasing per stream,
// and echoed in the answer.
type Publish struct {
	Seq        uint64
	Topic      string
	ProducerID string
	Sequence   uint64
	Headers    []Header
	Payload    []byte
	// Refused is set by decoding a well-formed publish that breaks a per-publish limit of
	// the Limits it was decoded with (see Limits); it names the limit and the value. The
	// publish then keeps only Seq and Topic (empty when the topic was over MaxTopic): the
	// receiver answers it with PUBLISH_ERROR and goes on with the stream. Never encoded.
	Refused *Error
}

// PublishAck says the record of Seq is durable at Offset.
type PublishAck struct {
	Seq    uint64
	Offset uint64
	Time   int64 // unix nanoseconds assigned by the node
	// Flags (AckDuplicate) are encoded only when not zero, as an optional last field, so a
	// PUBLISH_ACK without flags is what it always was.
	Flags uint64
}

// PUBLISH_ACK flags.
const (
	// AckDuplicate: the publish carried a (producer id, sequence) the node had already stored
	// for the topic; nothing was appended, and Offset and Time are those of the stored record.
	AckDuplicate uint64 = 1 << 0
)

// PublishError says the publish of Seq failed; nothing was appended.
type PublishError struct {
	Seq     uint64
	Code    Code
	Message string
}

// StartKind says where a subscription starts when it has no stored durable position.
type StartKind byte

const (
	StartEarliest StartKind = 0 // the first retained record of each matching topic
	StartLatest   StartKind = 1 // only records appended after the subscription was set up
	StartOffset   StartKind = 2 // StartValue is an offset (applied to each matching topic)
	StartTime     StartKind = 3 // StartValue is unix nanoseconds: first record at or after it
)

func (k StartKind) String() string {
	switch k {
	case StartEarliest:
		return "earliest"
	case StartLatest:
		return "latest"
	case StartOffset:
		return "offset"
	case StartTime:
		return "time"
	}
	return fmt.Sprintf("start(%d)", byte(k))
}

// Subscribe opens a subscription stream.
type Subscribe struct {
	Pattern    string
	Start      StartKind
	StartValue uint64
	// Durable names a consumer whose acknowledged positions the node stores; when one is
	// stored for a topic the subscription resumes after it and Start applies only to topics
	// without a position.
	Durable string
	// Region, when not empty and not the node's own, replays that region's log of the
	// topic directly over the node's link to it, without storing it locally.
	Region string
	// Flags are options of the subscriber (SubscribeRecords). Encoded only when not zero, as
	// an optional last field, so SUBSCRIBE without flags is what it always was; a node
	// ignores bits it does not know.
	Flags uint64
	// Group, when not nil, makes the subscription a member of a shared consumer group
	// (groups.go); it is encoded after Flags, which then carry SubscribeGroup.
	Group *Group
	// Vector, when not nil, is a position per topic (vector.go): encoded after the group
	// block, with SubscribeVector in Flags. An empty, non-nil Vector is a block of 0 topics.
	Vector []TopicVector
}

// Subscribed confirms a subscription.
type Subscribed struct{}

// Topic binds a stream-local index to a topic name before the first record of that topic.
type Topic struct {
	Index uint64
	Name  string
}

// Record is one record delivered on a subscription stream.
type Record struct {
	Index        uint64 // stream-local topic index (see Topic)
	Offset       uint64
	Time         int64
	OriginRegion string
	OriginOffset uint64
	ProducerID   string
	Sequence     uint64
	Headers      []Header
	Payload      []byte
	// Bind, in a record of a RUNS frame (runs.go), is the name its entry binds Index to,
	// as a TOPIC frame before the record would; "" when the index was bound before. Never
	// encoded in a RECORD frame.
	Bind string
}

// Ack acknowledges, cumulatively, every record of the topic up to and including Offset.
type Ack struct {
	Index  uint64
	Offset uint64
}

// Gap says the records [From, To) of a topic were deleted by retention before this
// subscription reached them: they are skipped, and the skip is never silent.
type Gap struct {
	Index uint64
	From  uint64
	To    uint64
}

// Topics asks for the topics matching Pattern.
type Topics struct {
	Pattern string
}

// TopicInfo describes one topic in a listing.
type TopicInfo struct {
	Name  string
	First uint64 // first retained offset
	Next  uint64 // the next offset to be written (the durable high-watermark)
	Bytes uint64 // approximate stored bytes
	// RetentionSet: the topic has retention of its own, RetentionAge (nanoseconds, 0: no age
	// limit) and RetentionBytes (0: no size limit); otherwise the node's default applies.
	// Encoded only when set, as optional last fields, so a TOPIC_INFO without them is what it
	// always was.
	RetentionSet   bool
	RetentionAge   uint64
	RetentionBytes uint64
	// Leader is the node leading the topic's raft group ("" when none is known; for a
	// single-copy topic its owner) and Replicas the nodes holding its log. Encoded only when
	// either is set, after the retention fields (then always present), a flags uvarint (bit
	// 0: RetentionSet), the leader and the replicas.
	Leader   string
	Replicas []string
}

// topicInfoRetention is TopicInfo's flag bit: the retention fields are the topic's own.
const topicInfoRetention = 1

// Watch asks a peer to announce (with TOPIC frames, index 0) each of its topics matching one
// of Patterns, now and whenever one is created. A later Watch on the same stream replaces
// the patterns.
type Watch struct {
	Patterns []string
	// Incarnation identifies the dialing node's process: a random number chosen at each
	// start, so the peer can tell a restarted node from a reconnect. Encoded only when not
	// zero, as an optional last field; a WATCH without it is what it always was.
	Incarnation uint64
}

// Mirror asks a peer for the records of Topic that originated in the peer's region, starting
// at origin offset From, then follows the log.
type Mirror struct {
	Topic string
	From  uint64
}

// Head tells a mirroring node how far behind it is: sent by the serving node after each batch
// it sent and whenever it has caught up.
type Head struct {
	Next     uint64 // the origin log's high-watermark
	Position uint64 // the serving node's scan position in that log (records before it are sent or skipped)
	Lag      int64  // nanoseconds between the log's last record and the last record scanned
	// Time is the origin's head time: the timestamp (unix nanoseconds, the origin's clock)
	// of the log's last record, 0 for an empty log. Topic names the topic on the catalog
	// stream, where HEAD reports the head of an announced topic; it is empty on a mirror
	// stream. Both are optional last fields, encoded only when set (Topic after Time), so a
	// HEAD without them is what it always was.
	Time  int64
	Topic string
}

func (*Watch) Type() Type  { return TypeWatch }
func (*Mirror) Type() Type { return TypeMirror }
func (*Head) Type() Type   { return TypeHead }

func (*Hello) Type() Type        { return TypeHello }
func (*Welcome) Type() Type      { return TypeWelcome }
func (*ErrorFrame) Type() Type   { return TypeError }
func (*Publish) Type() Type      { return TypePublish }
func (*PublishAck) Type() Type   { return TypePublishAck }
func (*PublishError) Type() Type { return TypePublishError }
func (*Subscribe) Type() Type    { return TypeSubscribe }
func (*Subscribed) Type() Type   { return TypeSubscribed }
func (*Topic) Type() Type        { return TypeTopic }
func (*Record) Type() Type       { return TypeRecord }
func (*Ack) Type() Type          { return TypeAck }
func (*Gap) Type() Type          { return TypeGap }
func (*Topics) Type() Type       { return TypeTopics }
func (*TopicInfo) Type() Type    { return TypeTopicInfo }

// newFrame returns an empty frame of type t, or nil for an unknown type.
func newFrame(t Type) Frame {
	switch t {
	case TypeHello:
		return new(Hello)
	case TypeWelcome:
		return new(Welcome)
	case TypeError:
		return new(ErrorFrame)
	case TypePublish:
		return new(Publish)
	case TypePublishAck:
		return new(PublishAck)
	case TypePublishError:
		return new(PublishError)
	case TypePublishBatch:
		return new(PublishBatch)
	case TypePublishAcks:
		return new(PublishAcks)
	case TypePublishOpen:
		return new(PublishOpen)
	case TypePublishMulti:
		return new(PublishMulti)
	case TypeSubscribe:
		return new(Subscribe)
	case TypeSubscribed:
		return new(Subscribed)
	case TypeTopic:
		return new(Topic)
	case TypeRecord:
		return new(Record)
	case TypeRecords:
		return new(Records)
	case TypeRuns:
		return new(Runs)
	case TypeAck:
		return new(Ack)
	case TypeGap:
		return new(Gap)
	case TypeCaughtUp:
		return new(CaughtUp)
	case TypeTopics:
		return new(Topics)
	case TypeTopicInfo:
		return new(TopicInfo)
	case TypeWatch:
		return new(Watch)
	case TypeMirror:
		return new(Mirror)
	case TypeHead:
		return new(Head)
	case TypePosition:
		return new(Position)
	case TypeGroupPosition:
		return new(GroupPosition)
	case TypeRaft:
		return new(Raft)
	case TypeRaftBatch:
		return new(RaftBatch)
	case TypeRaftFetch:
		return new(RaftFetchReq)
	case TypeRaftChunk:
		return new(RaftChunk)
	case TypeNak:
		return new(Nak)
	case TypeCommit:
		return new(Commit)
	case TypeCommitted:
		return new(Committed)
	}
	return newManageFrame(t)
}

func (f *Hello) appendBody(e enc) enc { return e.uvarint(f.Version).str(f.Client).str(f.Token) }
func (f *Hello) decodeBody(d *dec) {
	f.Version = d.uvarint("version")
	f.Client = d.str("client")
	f.Token = d.str("token")
}

func (f *Welcome) appendBody(e enc) enc {
	return e.uvarint(f.Version).str(f.Node).str(f.Region).uvarint(f.MaxPayload).
		uvarint(f.MaxFrame).uvarint(f.MaxSubscriptions).uvarint(f.MaxStreams)
}
func (f *Welcome) decodeBody(d *dec) {
	f.Version = d.uvarint("version")
	f.Node = d.str("node")
	f.Region = d.str("region")
	f.MaxPayload = d.uvarint("max payload")
	f.MaxFrame = d.uvarint("max frame")
	f.MaxSubscriptions = d.uvarint("max subscriptions")
	f.MaxStreams = d.uvarint("max streams")
	d.skipExtension()
}

func (f *ErrorFrame) appendBody(e enc) enc { return e.uvarint(uint64(f.Code)).str(f.Message) }
func (f *ErrorFrame) decodeBody(d *dec) {
	f.Code = Code(d.uvarint("code"))
	f.Message = d.str("message")
}

func (f *Publish) appendBody(e enc) enc {
	return e.uvarint(f.Seq).str(f.Topic).str(f.ProducerID).uvarint(f.Sequence).
		headers(f.Headers).bytes(f.Payload)
}
func (f *Publish) decodeBody(d *dec) {
	*f = Publish{Seq: d.uvarint("seq")}
	f.Topic, f.Refused = d.publishTopic()
	f.decodeEntry(d)
}

func (f *PublishAck) appendBody(e enc) enc {
	e = e.uvarint(f.Seq).uvarint(f.Offset).uvarint(uint64(f.Time))
	if f.Flags != 0 {
		e = e.uvarint(f.Flags)
	}
	return e
}
func (f *PublishAck) decodeBody(d *dec) {
	f.Seq = d.uvarint("seq")
	f.Offset = d.uvarint("offset")
	f.Time = int64(d.uvarint("time"))
	f.Flags = 0 // decoded in place (Decoder): a frame without the field has none
	if d.err == nil && len(d.b) > 0 {
		if f.Flags = d.uvarint("flags"); d.err == nil && f.Flags == 0 {
			d.fail("flags: 0 is sent by leaving the field out")
		}
	}
}

func (f *PublishError) appendBody(e enc) enc {
	return e.uvarint(f.Seq).uvarint(uint64(f.Code)).str(f.Message)
}
func (f *PublishError) decodeBody(d *dec) {
	f.Seq = d.uvarint("seq")
	f.Code = Code(d.uvarint("code"))
	f.Message = d.str("message")
}

func (f *Subscribe) appendBody(e enc) enc {
	e = e.str(f.Pattern).byte1(byte(f.Start)).uvarint(f.StartValue).str(f.Durable).str(f.Region)
	flags := f.Flags &^ (SubscribeGroup | SubscribeVector)
	if f.Group != nil {
		flags |= SubscribeGroup
	}
	if f.Vector != nil {
		flags |= SubscribeVector
	}
	if flags != 0 {
		e = e.uvarint(flags)
	}
	return appendVector(f.Group.appendTo(e), f.Vector)
}
func (f *Subscribe) decodeBody(d *dec) {
	f.Flags, f.Group, f.Vector = 0, nil, nil
	f.Pattern = d.str("pattern")
	f.Start = StartKind(d.byte1("start"))
	f.StartValue = d.uvarint("start value")
	f.Durable = d.str("durable")
	f.Region = d.str("region")
	if d.err == nil && len(d.b) > 0 {
		if f.Flags = d.uvarint("flags"); d.err == nil && f.Flags == 0 {
			d.fail("flags: 0 is sent by leaving the field out")
		}
	}
	f.Group = decodeGroup(d, f.Flags)
	f.Vector = decodeVector(d, f.Flags)
	// An unknown start kind is not malformed: the node answers it with ERROR 13 (invalid
	// argument), naming the kind.
}

func (f *Subscribed) appendBody(e enc) enc { return e }
func (f *Subscribed) decodeBody(d *dec)    {}

func (f *Topic) appendBody(e enc) enc { return e.uvarint(f.Index).str(f.Name) }
func (f *Topic) decodeBody(d *dec) {
	f.Index = d.uvarint("index")
	f.Name = d.str("name")
}

func (f *Record) appendBody(e enc) enc {
	return e.uvarint(f.Index).uvarint(f.Offset).uvarint(uint64(f.Time)).str(f.OriginRegion).
		uvarint(f.OriginOffset).str(f.ProducerID).uvarint(f.Sequence).
		headers(f.Headers).bytes(f.Payload)
}
func (f *Record) decodeBody(d *dec) {
	f.Bind = ""
	f.Index = d.uvarint("index")
	f.Offset = d.uvarint("offset")
	f.Time = int64(d.uvarint("time"))
	f.OriginRegion = d.strSlot("origin region", slotRegion)
	f.OriginOffset = d.uvarint("origin offset")
	f.ProducerID = d.strSlot("producer id", slotProducer)
	f.Sequence = d.uvarint("sequence")
	f.Headers = d.headers()
	f.Payload = d.bytesMax("payload", d.lim.MaxPayload)
}

func (f *Ack) appendBody(e enc) enc { return e.uvarint(f.Index).uvarint(f.Offset) }
func (f *Ack) decodeBody(d *dec) {
	f.Index = d.uvarint("index")
	f.Offset = d.uvarint("offset")
}

func (f *Gap) appendBody(e enc) enc { return e.uvarint(f.Index).uvarint(f.From).uvarint(f.To) }
func (f *Gap) decodeBody(d *dec) {
	f.Index = d.uvarint("index")
	f.From = d.uvarint("from")
	f.To = d.uvarint("to")
}

func (f *Topics) appendBody(e enc) enc { return e.str(f.Pattern) }
func (f *Topics) decodeBody(d *dec)    { f.Pattern = d.str("pattern") }

func (f *TopicInfo) appendBody(e enc) enc {
	e = e.str(f.Name).uvarint(f.First).uvarint(f.Next).uvarint(f.Bytes)
	if f.Leader != "" || len(f.Replicas) > 0 {
		var flags uint64
		age, bytes := uint64(0), uint64(0)
		if f.RetentionSet {
			flags, age, bytes = topicInfoRetention, f.RetentionAge, f.RetentionBytes
		}
		e = e.uvarint(age).uvarint(bytes).uvarint(flags).str(f.Leader).uvarint(uint64(len(f.Replicas)))
		for _, r := range f.Replicas {
			e = e.str(r)
		}
		return e
	}
	if f.RetentionSet {
		e = e.uvarint(f.RetentionAge).uvarint(f.RetentionBytes)
	}
	return e
}
func (f *TopicInfo) decodeBody(d *dec) {
	f.Name = d.str("name")
	f.First = d.uvarint("first")
	f.Next = d.uvarint("next")
	f.Bytes = d.uvarint("bytes")
	f.RetentionSet, f.RetentionAge, f.RetentionBytes = false, 0, 0
	if d.err == nil && len(d.b) > 0 {
		f.RetentionSet = true
		f.RetentionAge = d.uvarint("retention age")
		f.RetentionBytes = d.uvarint("retention bytes")
	}
	f.Leader, f.Replicas = "", nil
	if d.err == nil && len(d.b) > 0 {
		if d.uvarint("flags")&topicInfoRetention == 0 {
			f.RetentionSet, f.RetentionAge, f.RetentionBytes = false, 0, 0
		}
		f.Leader = d.str("leader")
		n := d.uvarint("replica count")
		if d.err == nil && n > uint64(len(d.b)) {
			d.fail("replica count %d past the end", n)
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			f.Replicas = append(f.Replicas, d.str("replica"))
		}
		d.skipExtension()
	}
}

func (f *Watch) appendBody(e enc) enc {
	e = e.uvarint(uint64(len(f.Patterns)))
	for _, p := range f.Patterns {
		e = e.str(p)
	}
	if f.Incarnation != 0 {
		e = e.uvarint(f.Incarnation)
	}
	return e
}
func (f *Watch) decodeBody(d *dec) {
	n := d.uvarint("pattern count")
	if d.err != nil {
		return
	}
	if n > maxWatchPatterns || n > uint64(len(d.b)) {
		d.fail("%d patterns: over the limit of %d or the frame's size", n, maxWatchPatterns)
		return
	}
	f.Patterns = make([]string, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		f.Patterns = append(f.Patterns, d.str("pattern"))
	}
	f.Incarnation = 0 // decoded in place (Decoder): a frame without the field has none
	if d.err == nil && len(d.b) > 0 {
		if f.Incarnation = d.uvarint("incarnation"); d.err == nil && f.Incarnation == 0 {
			d.fail("incarnation: 0 is sent by leaving the field out")
		}
	}
}

func (f *Mirror) appendBody(e enc) enc { return e.str(f.Topic).uvarint(f.From) }
func (f *Mirror) decodeBody(d *dec) {
	f.Topic = d.str("topic")
	f.From = d.uvarint("from")
}

func (f *Head) appendBody(e enc) enc {
	e = e.uvarint(f.Next).uvarint(f.Position).uvarint(uint64(f.Lag))
	if f.Time != 0 || f.Topic != "" {
		e = e.uvarint(uint64(f.Time))
	}
	if f.Topic != "" {
		e = e.str(f.Topic)
	}
	return e
}
func (f *Head) decodeBody(d *dec) {
	f.Next = d.uvarint("next")
	f.Position = d.uvarint("position")
	f.Lag = int64(d.uvarint("lag"))
	f.Time, f.Topic = 0, "" // decoded in place (Decoder): a frame without the fields has none
	if d.err == nil && len(d.b) > 0 {
		if f.Time = int64(d.uvarint("time")); d.err == nil && f.Time == 0 && len(d.b) == 0 {
			d.fail("time: 0 without a topic is sent by leaving the field out")
		}
	}
	if d.err == nil && len(d.b) > 0 {
		if f.Topic = d.str("topic"); d.err == nil && f.Topic == "" {
			d.fail("topic: empty is sent by leaving the field out")
		}
	}
}
