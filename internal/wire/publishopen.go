package wire

// PUBLISH_OPEN (0x15) may be the first frame of a publish stream: it sets the stream's
// options before any publish. Its body is flags varint; a node ignores bits it does not
// know. Bit 0 (PublishAnyOrder): the sender matches each answer to its publish by seq, so
// the node answers every publish as soon as its record is durable (or refused), in any
// order, instead of in the order the publishes were sent: a stall of one topic's group no
// longer holds back the answers of the others. The sender sends it only to a node that
// reads it: a client on a connection of version 4 or later, a node to a peer that
// announces the publishopen feature (docs/protocol.md, "Publish stream").

// TypePublishOpen is the type of the PUBLISH_OPEN frame.
const TypePublishOpen Type = 0x15

// PublishAnyOrder is the PUBLISH_OPEN flag by which the sender takes answers in any order.
const PublishAnyOrder = 1 << 0

// PublishOpen opens a publish stream with options.
type PublishOpen struct {
	Flags uint64
}

func (*PublishOpen) Type() Type { return TypePublishOpen }

func (f *PublishOpen) appendBody(e enc) enc { return e.uvarint(f.Flags) }
func (f *PublishOpen) decodeBody(d *dec)    { f.Flags = d.uvarint("flags") }
