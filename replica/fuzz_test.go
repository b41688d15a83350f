package replica

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzDecodeEnvelope: entries arrive from peers; a damaged or foreign one is
// refused with an error, never a panic, and a well-formed one round-trips.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte{})
	f.Add(append([]byte{envelopeVersion}, make([]byte, envelopeSize)...))
	f.Add([]byte{2, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		env, err := decodeEnvelope(p)
		if err != nil {
			return
		}
		again := []byte{envelopeVersion}
		again = binary.BigEndian.AppendUint64(again, env.node)
		again = binary.BigEndian.AppendUint64(again, env.seq)
		again = binary.BigEndian.AppendUint64(again, uint64(env.time))
		again = append(again, env.data...)
		if !bytes.Equal(again, p) {
			t.Fatalf("%x decoded to %+v, which encodes as %x", p, env, again)
		}
	})
}

// FuzzUnsealAndDecodeEntry: stored values are checked before use; any
// damage is an error, never a panic.
func FuzzUnsealAndDecodeEntry(f *testing.F) {
	k := indexKey(prefixRaft, kindEntry, 1, 1)
	v, err := encodeEntry(k, ent(1, 1, "x"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v)
	f.Add([]byte{valueVersion, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		if e, err := decodeEntry(k, v); err == nil && e == nil {
			t.Fatal("no entry and no error")
		}
	})
}
