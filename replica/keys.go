package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Key spaces of the package in the shared Pebble DB (see doc.go). wal uses
// 'm', 'p', 'r' and 't'; these two bytes are not among them.
const (
	prefixRaft = 'R' // raft storage of a group
	prefixLog  = 'L' // the log state machine of a group
)

// Kinds within a group's raft key space.
const (
	kindConfState = 'c'
	kindEntry     = 'e'
	kindHardState = 'h'
	kindSnapshot  = 's'
	kindTrunc     = 't'
)

// Kinds within a group's log key space.
const (
	kindApplied = 'a'
	kindRecord  = 'o'
)

const valueVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is returned for a stored value whose version or CRC is wrong.
var errCorrupt = errors.New("replica: corrupt value")

func groupKey(prefix, kind byte, group uint64) []byte {
	return appendGroupKey(make([]byte, 0, 18), prefix, kind, group)
}

// appendGroupKey appends groupKey's key to k.
func appendGroupKey(k []byte, prefix, kind byte, group uint64) []byte {
	k = append(k, prefix)
	k = binary.BigEndian.AppendUint64(k, group)
	return append(k, kind)
}

func indexKey(prefix, kind byte, group, index uint64) []byte {
	return binary.BigEndian.AppendUint64(groupKey(prefix, kind, group), index)
}

// seal frames a value as version | crc32c(key, payload) | payload.
func seal(key, payload []byte) []byte {
	v := make([]byte, 5, 5+len(payload))
	v = append(v, payload...)
	sealHeader(key, v)
	return v
}

// sealHeader fills in the header of v, whose payload follows five bytes
// left for it, without copying the payload.
func sealHeader(key, v []byte) {
	v[0] = valueVersion
	crc := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, v[5:])
	binary.BigEndian.PutUint32(v[1:5], crc)
}

// unseal checks a value framed by seal and returns its payload (aliasing v).
func unseal(key, v []byte) ([]byte, error) {
	if len(v) < 5 || v[0] != valueVersion {
		return nil, fmt.Errorf("%w: key %x: bad header", errCorrupt, key)
	}
	p := v[5:]
	crc := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, p)
	if crc != binary.BigEndian.Uint32(v[1:5]) {
		return nil, fmt.Errorf("%w: key %x: checksum mismatch", errCorrupt, key)
	}
	return p, nil
}
