package node

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/quicmq/quicmq/wal"
)

// A placement is one record of the region's metadata group (replicated.go): topic T is
// held by these replicas, in preference order. Layout, version 1 (uvarints; str is uvarint
// length | bytes):
//
//	version u8 = 1 | topic str | count | (node name str | raft ID)...
//
// Every voter applies the records in log order and the first placement of a topic wins, so
// a record that repeats a topic (two requests raced) changes nothing anywhere.
const placementVersion = 1

// A member record (version 2) says that the node named name is raft node id in the
// region's groups from now on: recorded by the metadata leader for each voter of the
// metadata group it finds unnamed, and when a replica restarted empty under a new ID has
// replaced its old one in the metadata group (replmember.go). Applied in log order, the
// last one of a name wins:
//
//	version u8 = 2 | node name str | raft ID
const memberVersion = 2

func encodeMember(name string, id uint64) []byte {
	b := []byte{memberVersion}
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return binary.AppendUvarint(b, id)
}

func decodeMember(p []byte) (name string, id uint64, err error) {
	if len(p) == 0 || p[0] != memberVersion {
		return "", 0, fmt.Errorf("%w: not a member record", errPlacement)
	}
	p = p[1:]
	l, n := uvarint(p)
	if n <= 0 || l == 0 || l > uint64(len(p)-n) || l > wal.MaxNameLen {
		return "", 0, fmt.Errorf("%w: member name", errPlacement)
	}
	name = string(p[n : n+int(l)])
	p = p[n+int(l):]
	id, n = uvarint(p)
	if n <= 0 || id == 0 || n != len(p) {
		return "", 0, fmt.Errorf("%w: member %q's raft ID", errPlacement, name)
	}
	return name, id, nil
}

// uvarint is binary.Uvarint refusing an overlong encoding (n 0): a metadata record has one
// encoding only, so every replica that decodes it would write it back the same.
func uvarint(p []byte) (uint64, int) {
	x, n := binary.Uvarint(p)
	var shortest [binary.MaxVarintLen64]byte // on the stack: every uvarint of a groups record is read here
	if n > 0 && n != binary.PutUvarint(shortest[:], x) {
		return 0, 0
	}
	return x, n
}

// maxPlacementReplicas bounds a decoded replica count.
const maxPlacementReplicas = 64

func encodePlacement(t *repTopic) []byte {
	b := []byte{placementVersion}
	b = binary.AppendUvarint(b, uint64(len(t.name)))
	b = append(b, t.name...)
	b = binary.AppendUvarint(b, uint64(len(t.replicas)))
	for _, m := range t.replicas {
		b = binary.AppendUvarint(b, uint64(len(m.name)))
		b = append(b, m.name...)
		b = binary.AppendUvarint(b, m.id)
	}
	return b
}

var errPlacement = errors.New("node: malformed placement record")

// metaDecoder reads a metadata record's uvarints and strings; bad is set by the first
// malformed one, after which every read returns zero. With whole set (the record's bytes
// from p on, as one string), strings are cut from it rather than each copied: a groups
// record names thousands of topics, which live as long as the node does.
type metaDecoder struct {
	p     []byte
	whole string
	bad   bool
}

func (d *metaDecoder) uv() uint64 {
	if d.bad {
		return 0
	}
	x, n := uvarint(d.p)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.p = d.p[n:]
	return x
}

func (d *metaDecoder) str() string {
	l := d.uv()
	if d.bad || l > uint64(len(d.p)) || l > wal.MaxNameLen {
		d.bad = true
		return ""
	}
	var s string
	if d.whole != "" {
		at := len(d.whole) - len(d.p)
		s = d.whole[at : at+int(l)]
	} else {
		s = string(d.p[:l])
	}
	d.p = d.p[l:]
	return s
}

// decodePlacement decodes a placement record (its bytes come from raft entries: every
// length is checked).
func decodePlacement(p []byte) (*repTopic, error) {
	if len(p) == 0 || p[0] != placementVersion {
		return nil, fmt.Errorf("%w: unknown version", errPlacement)
	}
	d := &metaDecoder{p: p[1:]}
	t := &repTopic{name: d.str()}
	count := d.uv()
	if d.bad || t.name == "" || count == 0 || count > maxPlacementReplicas {
		return nil, fmt.Errorf("%w: topic or replica count", errPlacement)
	}
	for range count {
		m := repMember{name: d.str(), id: d.uv()}
		if d.bad || m.name == "" || m.id == 0 {
			return nil, fmt.Errorf("%w: replica of %q", errPlacement, t.name)
		}
		t.replicas = append(t.replicas, m)
	}
	if len(d.p) > 0 {
		return nil, fmt.Errorf("%w: %d bytes after the end", errPlacement, len(d.p))
	}
	t.group = topicGroup(t.name)
	for _, m := range t.replicas {
		t.boot = append(t.boot, m.id)
	}
	return t, nil
}
