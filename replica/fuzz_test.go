package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/quicmq/quicmq/wal"
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

// FuzzDecodeBatchEnvelope: a batch entry (batch.go) arrives from peers too; damage is an error,
// never a panic, and a well-formed one round-trips.
func FuzzDecodeBatchEnvelope(f *testing.F) {
	f.Add([]byte{})
	f.Add(encodeBatch(nil, 7, []subProposal{{seq: 1, time: 2, data: []byte("a")}, {seq: 2, time: 2, data: nil}}))
	f.Add([]byte{envelopeBatch, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := decodeBatch(p)
		if err != nil {
			return
		}
		if again := encodeBatch(nil, b.node, b.subs); !bytes.Equal(again, p) {
			t.Fatalf("%x decoded to %+v, which encodes as %x", p, b, again)
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

// FuzzDecodeSnapshot: snapshot data and fetched chunks arrive from peers; damaged,
// truncated or foreign ones are refused with an error naming the problem, never a panic.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(encodeLogSnap(logState{applied: 9, next: 4, lastTime: 7}))
	lo, _ := groupRange(5)
	wk := append(append([]byte(nil), lo...), kindWalApplied)
	tk := append(append([]byte(nil), lo...), append([]byte{kindWalTopic}, "t"...)...)
	var ap, tp [16]byte
	ap[7], tp[7] = 9, 3
	p := binary.AppendUvarint(nil, 2)
	p = appendBytes(appendBytes(p, wk[len(lo):]), seal(wk, ap[:]))
	p = appendBytes(appendBytes(p, tk[len(lo):]), seal(tk, tp[:]))
	p = binary.AppendUvarint(p, 1)
	p = binary.AppendUvarint(appendStr(p, "t"), 0)
	f.Add(frameSnap(snapVersion, snapKindWal, p))
	// A topic cut at offset 2: its state carries the log start.
	cp := binary.AppendUvarint(nil, 2)
	cp = appendBytes(appendBytes(cp, wk[len(lo):]), seal(wk, ap[:]))
	cp = appendBytes(appendBytes(cp, tk[len(lo):]), seal(tk, encodeTopicState(&walTopic{next: 3, first: 2})))
	cp = binary.AppendUvarint(cp, 1)
	cp = binary.AppendUvarint(appendStr(cp, "t"), 0)
	f.Add(frameSnap(snapVersion, snapKindWal, cp))
	f.Add(frameSnap(chunkVersion, snapKindLog, append(binary.AppendUvarint(nil, 1), 3, 9, 7, 1, 'x')))
	f.Add(frameSnap(chunkVersion, snapKindWal, appendFetched(binary.AppendUvarint(nil, 1), &wal.Record{Offset: 3, Time: 5, ProducerID: "p", Sequence: 2,
		Headers: []wal.Header{{Key: "k", Value: []byte("v")}}, Payload: []byte("x")})))
	f.Add([]byte{snapVersion, snapKindWal, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		if ws, err := decodeWalSnap(5, p); err == nil && ws == nil {
			t.Fatal("no snapshot and no error")
		} else if err != nil && !errors.Is(err, errSnapshot) {
			t.Fatalf("error %v does not say the snapshot is malformed", err)
		}
		_, _ = decodeLogSnap(p)
		if recs, err := decodeLogChunk(p); err == nil {
			for i := 1; i < len(recs); i++ {
				if recs[i].Offset != recs[i-1].Offset+1 {
					t.Fatalf("chunk with offsets %d then %d accepted", recs[i-1].Offset, recs[i].Offset)
				}
			}
		}
		if recs, err := decodeWalChunk(p); err == nil {
			for i := 1; i < len(recs); i++ {
				if recs[i].Offset != recs[i-1].Offset+1 || recs[i].Time < recs[i-1].Time {
					t.Fatalf("chunk with offsets %d then %d, times %d then %d accepted", recs[i-1].Offset, recs[i].Offset, recs[i-1].Time, recs[i].Time)
				}
			}
		}
	})
}
