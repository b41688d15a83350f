package relocate

import (
	"encoding/binary"

	"github.com/quicmq/quicmq/wal"
)

// reader reads the uvarints and strings of a drain or move record, in the metadata's
// encoding (node/replmeta.go: a uvarint has one encoding only, so every replica that
// decodes a record would write it back the same; a string is a uvarint length and at most
// wal.MaxNameLen bytes). bad is set by the first malformed field, after which every read
// returns zero.
type reader struct {
	p   []byte
	bad bool
}

func (d *reader) uv() uint64 {
	if d.bad {
		return 0
	}
	x, n := binary.Uvarint(d.p)
	var shortest [binary.MaxVarintLen64]byte
	if n <= 0 || n != binary.PutUvarint(shortest[:], x) {
		d.bad = true
		return 0
	}
	d.p = d.p[n:]
	return x
}

func (d *reader) str() string {
	l := d.uv()
	if d.bad || l > uint64(len(d.p)) || l > wal.MaxNameLen {
		d.bad = true
		return ""
	}
	s := string(d.p[:l])
	d.p = d.p[l:]
	return s
}
