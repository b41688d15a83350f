package wire

// Holder streams (node-to-node, between nodes of one region): the node a client of an
// exclusive durable consumer is connected to asks the durable's home node for its lock with
// HOLD; the home answers HELD once the lock is the asker's (a standby's HOLD waits), or
// ERROR 15 naming the holder. The lock is held while the stream is open: the asker's FIN
// or reset, or the link's loss, releases it.
const (
	TypeHold Type = 0x4a // asker -> home: take durable Name's lock
	TypeHeld Type = 0x4b // home -> asker: the lock is held for the asker
)

// HoldStandby (Hold.Flags): wait for the lock instead of being refused.
const HoldStandby uint64 = 1 << 0

// Hold asks for the exclusive lock of durable consumer Name (namespaced, as stored) for a
// client of the asking node.
type Hold struct {
	Name   string
	Shown  string // the name as its client gives it, for messages
	Client string // the client's address, for a later refusal's message
	Flags  uint64 // HoldStandby
}

// Held says the lock is the asker's.
type Held struct{}

func (*Hold) Type() Type { return TypeHold }
func (*Held) Type() Type { return TypeHeld }

func init() {
	for t, s := range map[Type]string{TypeHold: "HOLD", TypeHeld: "HELD"} {
		typeNames[t] = s
		knownType[t] = true
	}
}

func newHolderFrame(t Type) Frame {
	switch t {
	case TypeHold:
		return new(Hold)
	case TypeHeld:
		return new(Held)
	case TypeGroupStore:
		return new(GroupStore) // groupstore.go
	}
	return nil
}

func (f *Hold) appendBody(e enc) enc {
	return e.str(f.Name).str(f.Shown).str(f.Client).uvarint(f.Flags)
}
func (f *Hold) decodeBody(d *dec) {
	f.Name = d.str("name")
	f.Shown = d.str("shown")
	f.Client = d.str("client")
	f.Flags = d.uvarint("flags")
}

func (f *Held) appendBody(e enc) enc { return e }
func (f *Held) decodeBody(d *dec)    {}
