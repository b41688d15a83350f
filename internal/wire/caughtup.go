package wire

// CAUGHT_UP (0x27) tells a subscriber that asked for it (SubscribeCaughtUp) that every
// record up to the head each matching topic had when the subscription was set up has been
// sent on the stream, before this frame: a client reading "to the end" stops here, with no
// timeout. It is sent at most once per stream.

// TypeCaughtUp is the type of the CAUGHT_UP frame.
const TypeCaughtUp Type = 0x27

// SubscribeCaughtUp is the Subscribe flag by which a client asks for a CAUGHT_UP frame.
const SubscribeCaughtUp = 1 << 1

// CaughtUp says the subscription has delivered everything up to the heads at its set-up.
type CaughtUp struct {
	// Topics is how many topics matched the subscription at set-up: the topics whose heads
	// were reached (0 for a pattern that matched none; CAUGHT_UP then follows SUBSCRIBED).
	Topics uint64
}

func (*CaughtUp) Type() Type { return TypeCaughtUp }

func (f *CaughtUp) appendBody(e enc) enc { return e.uvarint(f.Topics) }
func (f *CaughtUp) decodeBody(d *dec)    { f.Topics = d.uvarint("topics") }
