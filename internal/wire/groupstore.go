package wire

// Group store streams (node-to-node, between nodes of one region): a node serving a consumer
// group asks the leader of a replicated topic to propose the group's state of that topic.
// GROUP_STORE carries the raft entry, replica's set group encoding (opaque here: the leader
// decodes and checks it, docs/protocol.md gives its layout); the leader answers DONE, its
// count the raft index the entry was applied at, once it is committed and applied there, or
// ERROR. One request per stream.
const TypeGroupStore Type = 0x4e

// GroupStore asks the leader of Topic's raft group to propose Entry.
type GroupStore struct {
	Topic string
	Entry []byte // a copy: it does not alias the frame body
}

func (*GroupStore) Type() Type { return TypeGroupStore }

func init() {
	typeNames[TypeGroupStore] = "GROUP_STORE"
	knownType[TypeGroupStore] = true
}

func (f *GroupStore) appendBody(e enc) enc { return append(e.str(f.Topic), f.Entry...) }
func (f *GroupStore) decodeBody(d *dec) {
	f.Topic = d.str("topic")
	if d.err == nil {
		if len(d.b) > 0 {
			f.Entry = append([]byte(nil), d.b...)
		}
		d.b = d.b[len(d.b):]
	}
}
