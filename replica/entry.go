package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/quicmq/quicmq/wal"
)

// EntryKind says what a WalEntry does when it is applied.
type EntryKind uint8

// The kinds of WalEntry.
const (
	// EntryAppend appends records published in this region to a topic.
	EntryAppend EntryKind = 1
	// EntryMirrorAppend appends records mirrored from another region and
	// advances that region's cursor, only if the cursor is still the one
	// the link expects (I7, I10).
	EntryMirrorAppend EntryKind = 2
	// EntrySetPosition stores a named position (a durable consumer's).
	EntrySetPosition EntryKind = 3
	// EntrySetGroup stores (or removes) a shared consumer group's state of
	// the topic: its settings and the topic's floor, next offset and
	// outstanding records, under the keys wal.Log.SetGroup writes. With
	// nothing to store it is a barrier: once applied here, every earlier
	// entry of the group is too.
	EntrySetGroup EntryKind = 4
	// EntryMirrorPosition stores a durable consumer's position mirrored from
	// another region (federation.MirroredPositionName: its value the time its
	// origin stored it, with its vector), only when it is above the position
	// stored under that name: a replay or a late frame never moves it back.
	EntryMirrorPosition EntryKind = 8
	// EntryMirrorGroup stores a consumer group's state mirrored from another
	// region (federation.MirroredGroupName), keeping its origin's Updated, only
	// when it is newer than the state stored under that name (as
	// wal.Log.SetMirroredGroup does for a local topic).
	EntryMirrorGroup EntryKind = 9
	// EntryTruncate deletes a topic's records below an offset (Value), or below
	// the next offset at apply (Purge), and stores its new first offset in the
	// same batch; offsets keep going. A cut the log already passed is a no-op.
	// Retention is one, proposed by the group's leader; so is a purge.
	EntryTruncate EntryKind = 5
	// EntrySetConfig stores a topic's configuration (Config: its own retention),
	// as wal.Log.SetTopicConfig stores a local topic's.
	EntrySetConfig EntryKind = 6
	// EntryForget deletes a topic: every record (as a purge), every named
	// position and consumer group state of it and its configuration, in one
	// batch. The topic stays placed and bound, empty; its offsets keep going.
	EntryForget EntryKind = 7
)

func (k EntryKind) String() string {
	switch k {
	case EntryAppend:
		return "append"
	case EntryMirrorAppend:
		return "mirror append"
	case EntrySetPosition:
		return "set position"
	case EntrySetGroup:
		return "set group"
	case EntryMirrorPosition:
		return "mirror position"
	case EntryMirrorGroup:
		return "mirror group"
	case EntryTruncate:
		return "truncate"
	case EntrySetConfig:
		return "set config"
	case EntryForget:
		return "forget"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// carriesRecords reports whether the kind's layout ends with records.
func (k EntryKind) carriesRecords() bool { return k == EntryAppend || k == EntryMirrorAppend }

// WalEntry is the command a raft entry of a replicated topic carries, as
// WalSM applies it.
type WalEntry struct {
	Kind  EntryKind
	Topic string
	// Records of an append or mirror append. Offset and Time are assigned
	// at apply; OriginRegion is ignored (a mirror append's records get
	// Region); OriginOffset is carried by a mirror append only.
	Records []wal.Record
	// Region is a mirror append's origin region.
	Region string
	// Name is the position's name: the mirror cursor of a mirror append
	// (the name federation stores it under), or the consumer's position of
	// a set position.
	Name string
	// HasExpected and Expected are the cursor a mirror append expects to
	// find stored (absent when !HasExpected); anything else makes the entry
	// a no-op.
	HasExpected bool
	Expected    uint64
	// Value is the cursor a mirror append leaves behind, or the position a
	// set position (or a mirror position) stores.
	Value uint64
	// Vector is the portable position a set position or a mirror position
	// stores with Value (wal.Position.Vector): origin region -> last origin
	// offset. A mirror position needs one; a set position without one is
	// encoded in layout 1, as before vectors.
	Vector map[string]uint64
	// Group is what a set group does (Name is the group's name); nil, or
	// one that stores nothing, is a barrier. A mirror group's is a State
	// alone, with its Vector and its origin's Updated.
	Group *GroupOp
	// Purge makes a truncate cut below the topic's next offset at apply (its
	// Value is then 0): every record is deleted.
	Purge bool
	// Config is what a set config stores.
	Config wal.TopicConfig
}

// GroupOp is what an EntrySetGroup does to one consumer group's state of
// its topic. The node serving the group proposes one per topic that
// changed (each topic's entry goes to that topic's raft group).
type GroupOp struct {
	// Settings are stored when not nil.
	Settings *wal.GroupSettings
	// State is the topic's state, stored when not nil; its Updated is the
	// entry's time at apply, whatever is given.
	State *wal.GroupState
	// Remove removes the group's state of the topic and its settings (a
	// group being removed: one entry per topic it has state on). It goes
	// with neither Settings nor State.
	Remove bool
}

// stores reports whether the op writes anything (else it is a barrier).
func (g *GroupOp) stores() bool { return g != nil && (g.Settings != nil || g.State != nil || g.Remove) }

// Entry layout, version 1 (integers are uvarints unless noted; str is
// uvarint length | bytes):
//
//	version u8 = 1 | crc32c u32 LE over everything after it | kind u8 | topic str
//	append:        count | record...
//	mirror append: region str | name str | flags u8 (1: has expected) | expected | value | count | record...
//	set position:  name str | value                                        (body layout 1: no vector)
//	               | [layout u8 = 2 | count >= 1 | (region str | origin offset)...]  (layout 2: regions ascending)
//	truncate:      flags u8 (1: purge: before the next offset) | before
//	set config:    flags u8 (1: retention set) | max age ns | max bytes
//	forget:        (nothing more)
//	set group:     name str | group layout u8 = 1 or 2 | flags u8 (1: settings, 2: state, 4: remove)
//	               | [settings: pattern str | ack-wait ns | max-deliver | dead-letter str | order u8]
//	               | [state: floor | next | count | (offset - floor | deliveries)...
//	                  | layout 2 only: vector str (wal.AppendGroupVector: flags, origins, the
//	                  entries' origins, outstanding elsewhere)]
//	               (entries strictly ascending, in [floor, next); no flag set: a barrier; layout 2,
//	               written only for a state with a vector, needs the state flag)
//	mirror position (8): as a set position in layout 2 (a vector is required)
//	mirror group (9):    name str | updated (unix ns, > 0) | set group body (layout 2, state only)
//	record:        flags u8 (1: producer, 2: headers) | [producer str | sequence]
//	               | [origin offset, mirror append only] | [count | (key str | value str)...] | payload str
const (
	entryVersion     = 1
	entryHeaderLen   = 1 + 4 + 1
	recFlagProducer  = 1 << 0
	recFlagHeaders   = 1 << 1
	knownRecFlags    = recFlagProducer | recFlagHeaders
	mirrorHasCursor  = 1 << 0
	maxEntryStrBytes = wal.MaxNameLen

	groupLayout       = 1 // the set group body's own layout without a vector
	groupLayoutVector = 2 // ... and with the state's vector (entry_vector.go)
	posLayoutVector   = 2 // the set position body's layout with a vector
	groupFlagSettings = 1 << 0
	groupFlagState    = 1 << 1
	groupFlagRemove   = 1 << 2
	knownGroupFlags   = groupFlagSettings | groupFlagState | groupFlagRemove
	maxGroupOrder     = 2 // the wire's group orders: 0 none, 1 topic, 2 key

	truncFlagPurge    = 1 << 0
	configFlagRetains = 1 << 0
)

// errEntry is wrapped by every decoding error.
var errEntry = errors.New("replica: malformed entry")

// ErrEntryNewer is matched (errors.Is) by the decoding error of an entry whose version, kind
// or body layout is past what this build knows, with a valid checksum: the entry was
// proposed by a newer QuicMQ. Every other malformed entry is a no-op on every replica alike
// (an older proposer's bug); this one must not be, since the newer replicas apply it. WalSM
// stops on it (the replica would diverge), saying to upgrade the node.
var ErrEntryNewer = errors.New("replica: entry written by a newer QuicMQ")

// maxEntryKind is the highest kind this build applies.
const maxEntryKind = EntryMirrorGroup

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func uvLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// Validate reports what makes e impossible to apply.
func (e *WalEntry) Validate() error {
	var errs []error
	name := func(what, s string) {
		switch {
		case s == "":
			errs = append(errs, fmt.Errorf("empty %s", what))
		case len(s) > maxEntryStrBytes:
			errs = append(errs, fmt.Errorf("%s of %d bytes, at most %d", what, len(s), maxEntryStrBytes))
		}
	}
	name("topic", e.Topic)
	switch e.Kind {
	case EntryAppend:
		if len(e.Records) == 0 {
			errs = append(errs, errors.New("an append without records"))
		}
	case EntryMirrorAppend:
		name("origin region", e.Region)
		name("cursor name", e.Name)
	case EntrySetPosition, EntryMirrorPosition:
		name("position name", e.Name)
		if len(e.Records) > 0 {
			errs = append(errs, fmt.Errorf("a %v with records", e.Kind))
		}
		errs = append(errs, validateVector(e.Vector)...)
		if e.Kind == EntryMirrorPosition && len(e.Vector) == 0 {
			errs = append(errs, errors.New("a mirror position without a vector"))
		}
	case EntryMirrorGroup:
		name("group name", e.Name)
		if len(e.Records) > 0 {
			errs = append(errs, errors.New("a mirror group with records"))
		}
		errs = append(errs, e.Group.validateMirrored()...)
	case EntrySetGroup:
		name("group name", e.Name)
		if len(e.Records) > 0 {
			errs = append(errs, errors.New("a set group with records"))
		}
		errs = append(errs, e.Group.validate()...)
	case EntryTruncate:
		if len(e.Records) > 0 {
			errs = append(errs, errors.New("a truncate with records"))
		}
		if e.Purge && e.Value != 0 {
			errs = append(errs, errors.New("a purge with an offset"))
		}
	case EntrySetConfig:
		if len(e.Records) > 0 {
			errs = append(errs, errors.New("a set config with records"))
		}
		r := e.Config.Retention
		if r.MaxAge < 0 || r.MaxBytes < 0 {
			errs = append(errs, errors.New("negative retention"))
		}
		if !e.Config.RetentionSet && r != (wal.Retention{}) {
			errs = append(errs, errors.New("retention given but not set"))
		}
	case EntryForget:
		if len(e.Records) > 0 || e.Value != 0 {
			errs = append(errs, errors.New("a forget with records or an offset"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown entry %v", e.Kind))
	}
	for i := range e.Records {
		if len(e.Records[i].ProducerID) > maxEntryStrBytes {
			errs = append(errs, fmt.Errorf("record %d: producer ID of %d bytes, at most %d", i, len(e.Records[i].ProducerID), maxEntryStrBytes))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("replica: %v entry of %q: %w", e.Kind, e.Topic, errors.Join(errs...))
	}
	return nil
}

// EncodeEntry appends e's encoding to dst, after checking it.
func EncodeEntry(dst []byte, e *WalEntry) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return dst, err
	}
	// Grown once for the records (most of an entry's bytes), not doubled as they append.
	dst = slices.Grow(dst, recordsBound(e))
	start := len(dst)
	dst = append(dst, entryVersion, 0, 0, 0, 0, byte(e.Kind))
	dst = appendStr(dst, e.Topic)
	switch e.Kind {
	case EntryMirrorAppend:
		dst = appendStr(dst, e.Region)
		dst = appendStr(dst, e.Name)
		var flags byte
		if e.HasExpected {
			flags |= mirrorHasCursor
		}
		dst = append(dst, flags)
		dst = binary.AppendUvarint(dst, e.Expected)
		dst = binary.AppendUvarint(dst, e.Value)
	case EntrySetPosition, EntryMirrorPosition:
		dst = appendStr(dst, e.Name)
		dst = binary.AppendUvarint(dst, e.Value)
		dst = appendPosVector(dst, e.Vector) // entry_vector.go
	case EntrySetGroup:
		dst = appendStr(dst, e.Name)
		dst = e.Group.append(dst)
	case EntryMirrorGroup:
		dst = appendStr(dst, e.Name)
		dst = binary.AppendUvarint(dst, uint64(e.Group.State.Updated.UnixNano()))
		dst = e.Group.append(dst)
	case EntryTruncate:
		var flags byte
		if e.Purge {
			flags |= truncFlagPurge
		}
		dst = append(dst, flags)
		dst = binary.AppendUvarint(dst, e.Value)
	case EntrySetConfig:
		var flags byte
		if e.Config.RetentionSet {
			flags |= configFlagRetains
		}
		dst = append(dst, flags)
		dst = binary.AppendUvarint(dst, uint64(e.Config.Retention.MaxAge))
		dst = binary.AppendUvarint(dst, uint64(e.Config.Retention.MaxBytes))
	}
	if e.Kind.carriesRecords() {
		dst = binary.AppendUvarint(dst, uint64(len(e.Records)))
		for i := range e.Records {
			r := &e.Records[i]
			var flags byte
			if r.ProducerID != "" || r.Sequence != 0 {
				flags |= recFlagProducer
			}
			if len(r.Headers) > 0 {
				flags |= recFlagHeaders
			}
			dst = append(dst, flags)
			if flags&recFlagProducer != 0 {
				dst = appendStr(dst, r.ProducerID)
				dst = binary.AppendUvarint(dst, r.Sequence)
			}
			if e.Kind == EntryMirrorAppend {
				dst = binary.AppendUvarint(dst, r.OriginOffset)
			}
			if flags&recFlagHeaders != 0 {
				dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
				for _, h := range r.Headers {
					dst = appendStr(dst, h.Key)
					dst = appendBytes(dst, h.Value)
				}
			}
			dst = appendBytes(dst, r.Payload)
		}
	}
	crc := crc32.Checksum(dst[start+5:], castagnoli)
	binary.LittleEndian.PutUint32(dst[start+1:start+5], crc)
	return dst, nil
}

// EncodedBound is at least the bytes EncodeEntry appends for an append or mirror append (a
// guess for the other kinds): a buffer with that much room takes the entry without growing.
func EncodedBound(e *WalEntry) int { return recordsBound(e) }

// recordsBound is at least the bytes of an append's or mirror append's encoding (a guess for
// the other kinds, whose appends grow past it if short), for EncodeEntry to grow its buffer
// once.
func recordsBound(e *WalEntry) int {
	n := entryHeaderLen + 4*binary.MaxVarintLen64 + len(e.Topic) + len(e.Region) + len(e.Name) + 1
	if !e.Kind.carriesRecords() {
		return n
	}
	n += binary.MaxVarintLen64
	for i := range e.Records {
		r := &e.Records[i]
		n += 1 + 3*binary.MaxVarintLen64 + len(r.ProducerID) + len(r.Payload)
		for _, h := range r.Headers {
			n += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
		}
		if len(r.Headers) > 0 {
			n += binary.MaxVarintLen64
		}
	}
	return n
}

// DecodeEntry decodes an entry. The bytes come from the network (raft
// appends from a leader): every length is checked before it is used, nothing
// panics, and the result shares no memory with p.
func DecodeEntry(p []byte) (*WalEntry, error) { return decodeWalEntry(p, false) }

// decodeEntryView is DecodeEntry whose records' payloads and header values alias p (no copy
// of the bytes that are most of an entry): for WalSM's apply, which encodes them into its
// batch and keeps none, so p must stay unchanged only until it returns.
func decodeEntryView(p []byte) (*WalEntry, error) { return decodeWalEntry(p, true) }

func decodeWalEntry(p []byte, view bool) (*WalEntry, error) {
	e := &WalEntry{}
	if err := decodeWalEntryTo(p, e, entryDecoder{view: view}); err != nil {
		return nil, err
	}
	return e, nil
}

// decodeEntryInto is decodeEntryView into e, which it overwrites: e's Records (their
// backing array) are reused when large enough, and a topic named in names takes that
// key's string. WalSM's apply decodes every entry into one WalEntry: a one-record
// publish over many topics was an entry each, and a new WalEntry, topic string and
// records slice for each were a third of what a region's replicas allocated per record
// (issue 29, BenchmarkProposeTopics).
func decodeEntryInto(p []byte, e *WalEntry, names map[string]*walTopic) error {
	return decodeWalEntryTo(p, e, entryDecoder{view: true, names: names})
}

func decodeWalEntryTo(p []byte, e *WalEntry, d entryDecoder) error {
	if err := checkEntryHeader(p); err != nil {
		return err
	}
	d.b = p[entryHeaderLen:]
	*e = WalEntry{Kind: EntryKind(p[5]), Topic: d.name(), Records: e.Records[:0]}
	if !d.kindFields(e) {
		return fmt.Errorf("%w: unknown kind %d", errEntry, p[5])
	}
	if e.Kind.carriesRecords() {
		d.records(e)
	}
	if d.bad == "" && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d bytes after the end", len(d.b)))
	}
	if d.bad != "" {
		if d.newer {
			return fmt.Errorf("%w: %w: %v of %q: %s", errEntry, ErrEntryNewer, e.Kind, e.Topic, d.bad)
		}
		return fmt.Errorf("%w: %v of %q: %s", errEntry, e.Kind, e.Topic, d.bad)
	}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errEntry, err)
	}
	return nil
}

// checkEntryHeader checks an entry's header: its length, a version this build reads, the
// checksum of the rest and a kind it knows.
func checkEntryHeader(p []byte) error {
	if len(p) < entryHeaderLen {
		return fmt.Errorf("%w: %d bytes", errEntry, len(p))
	}
	if p[0] == 0 {
		return fmt.Errorf("%w: unknown version %d", errEntry, p[0])
	}
	if p[0] > entryVersion {
		return fmt.Errorf("%w: %w: version %d (this build knows up to %d)", errEntry, ErrEntryNewer, p[0], entryVersion)
	}
	if crc32.Checksum(p[5:], castagnoli) != binary.LittleEndian.Uint32(p[1:5]) {
		return fmt.Errorf("%w: checksum mismatch", errEntry)
	}
	if k := EntryKind(p[5]); k > maxEntryKind {
		return fmt.Errorf("%w: %w: kind %d (this build knows up to %d)", errEntry, ErrEntryNewer, k, maxEntryKind)
	}
	return nil
}

// kindFields decodes the fields of e's kind, after its topic; false for a kind it does not
// know.
func (d *entryDecoder) kindFields(e *WalEntry) bool {
	switch e.Kind {
	case EntryAppend:
	case EntryMirrorAppend:
		e.Region = d.str()
		e.Name = d.str()
		flags := d.byte()
		if flags&^mirrorHasCursor != 0 {
			d.fail("unknown mirror flags")
		}
		e.HasExpected = flags&mirrorHasCursor != 0
		e.Expected = d.uvarint()
		e.Value = d.uvarint()
	case EntrySetPosition, EntryMirrorPosition:
		e.Name = d.str()
		e.Value = d.uvarint()
		e.Vector = d.posVector(e.Kind == EntryMirrorPosition) // entry_vector.go
	case EntrySetGroup:
		e.Name = d.str()
		e.Group = d.groupOp()
	case EntryMirrorGroup:
		e.Name = d.str()
		updated := d.uvarint()
		if d.bad == "" && (updated == 0 || updated > math.MaxInt64) {
			d.fail("mirror group time out of range")
		}
		e.Group = d.groupOp()
		if e.Group.State != nil {
			e.Group.State.Updated = time.Unix(0, int64(updated))
		}
	case EntryTruncate:
		flags := d.byte()
		if flags&^truncFlagPurge != 0 {
			d.fail("unknown truncate flags")
		}
		e.Purge = flags&truncFlagPurge != 0
		e.Value = d.uvarint()
	case EntrySetConfig:
		flags := d.byte()
		if flags&^configFlagRetains != 0 {
			d.fail("unknown config flags")
		}
		e.Config.RetentionSet = flags&configFlagRetains != 0
		age, size := d.uvarint(), d.uvarint()
		if age > math.MaxInt64 || size > math.MaxInt64 {
			d.fail("retention out of range")
		}
		e.Config.Retention = wal.Retention{MaxAge: time.Duration(age), MaxBytes: int64(size)}
	case EntryForget:
	default:
		return false
	}
	return true
}

// records decodes the records of an entry that carries them.
func (d *entryDecoder) records(e *WalEntry) {
	n := d.uvarint()
	// A record takes at least two bytes (flags, payload length): bound
	// the allocation by what the entry can hold.
	if n > uint64(len(d.b))/2 {
		d.fail("record count past the end")
	}
	if d.bad == "" && n > 0 {
		if uint64(cap(e.Records)) >= n {
			e.Records = e.Records[:n] // decodeEntryInto's: every field is set below
			clear(e.Records)
		} else {
			e.Records = make([]wal.Record, n)
		}
	}
	for i := range e.Records {
		if d.bad != "" {
			break
		}
		r := &e.Records[i]
		flags := d.byte()
		if flags&^knownRecFlags != 0 {
			d.fail("unknown record flags")
		}
		if flags&recFlagProducer != 0 {
			r.ProducerID = d.str()
			r.Sequence = d.uvarint()
			if d.bad == "" && r.ProducerID == "" && r.Sequence == 0 {
				d.fail("empty producer")
			}
		}
		if e.Kind == EntryMirrorAppend {
			r.OriginOffset = d.uvarint()
		}
		if flags&recFlagHeaders != 0 {
			hn := d.uvarint()
			if hn == 0 || hn > uint64(len(d.b))/2 {
				d.fail("bad header count")
				break
			}
			r.Headers = make([]wal.Header, hn)
			for j := range r.Headers {
				r.Headers[j].Key = d.longStr()
				r.Headers[j].Value = d.bytes()
			}
		}
		r.Payload = d.bytes()
	}
}

// entryDecoder reads an entry's fields; the first problem sticks in bad.
type entryDecoder struct {
	b     []byte
	bad   string
	newer bool // bad is a body layout past this build's (ErrEntryNewer)
	view  bool // bytes aliases b instead of copying (decodeEntryView)
	// names: the topic's name is this map's key string when it holds one with the name
	// (decodeEntryInto), not a new string.
	names map[string]*walTopic
}

// failNewer fails on a body layout this build does not know yet.
func (d *entryDecoder) failNewer(why string) {
	if d.bad == "" {
		d.newer = true
	}
	d.fail(why)
}

func (d *entryDecoder) fail(why string) {
	if d.bad == "" {
		d.bad = why
	}
	d.b = nil
}

func (d *entryDecoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *entryDecoder) uvarint() uint64 {
	if d.bad != "" {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 || n != uvLen(x) { // canonical only: one encoding per value
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return x
}

func (d *entryDecoder) raw(limit uint64) []byte {
	n := d.uvarint()
	if d.bad != "" {
		return nil
	}
	if n > uint64(len(d.b)) || n > limit {
		d.fail("length past the end")
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

// str reads a name (at most wal.MaxNameLen bytes).
func (d *entryDecoder) str() string { return string(d.raw(maxEntryStrBytes)) }

// name reads the entry's topic: names' string for it when known (decodeEntryInto).
func (d *entryDecoder) name() string {
	raw := d.raw(maxEntryStrBytes)
	if st := d.names[string(raw)]; st != nil && st.name != "" {
		return st.name
	}
	return string(raw)
}

// longStr reads a string of any length the entry holds (a header key).
func (d *entryDecoder) longStr() string { return string(d.raw(uint64(len(d.b)))) }

// bytes reads a byte string of any length the entry holds: copied, or a view of the
// entry's bytes (capacity cut to its length, so an append never writes into the entry).
func (d *entryDecoder) bytes() []byte {
	s := d.raw(uint64(len(d.b)))
	if s == nil {
		return nil
	}
	if d.view {
		if len(s) == 0 {
			return nil // as a copy of nothing is
		}
		return s[:len(s):len(s)]
	}
	return append([]byte(nil), s...)
}

// EntryFeatures is what this build knows of the raft entry format, as levels a node
// announces to its region (node/features.go): the entry version, the highest kind it
// applies, and the highest layouts of the set position and set group bodies. A proposer uses
// a newer version, kind or layout only once every replica of the region announces it: a
// replica given one it does not know stops (ErrEntryNewer) rather than diverge.
func EntryFeatures() map[string]int {
	return map[string]int{"entry": entryVersion, "kind": int(maxEntryKind), "poslayout": posLayoutVector, "grouplayout": groupLayoutVector,
		"envelope": EnvelopeFeature}
}
