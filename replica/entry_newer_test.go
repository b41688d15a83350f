package replica

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/wal"
)

// reseal rewrites an encoded entry's checksum after its bytes were changed, as a proposer
// of that (other) format would have written it.
func reseal(p []byte) []byte {
	binary.LittleEndian.PutUint32(p[1:5], crc32.Checksum(p[5:], castagnoli))
	return p
}

// TestDecodeEntryNewer: an entry of a later version, a later kind or a later body layout,
// with a valid checksum, is told apart (ErrEntryNewer) from a malformed one, which stays a
// no-op on every replica; and WalSM stops on it rather than skip what newer replicas apply.
func TestDecodeEntryNewer(t *testing.T) {
	enc := func(e *WalEntry) []byte {
		p, err := EncodeEntry(nil, e)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pos := enc(&WalEntry{Kind: EntrySetPosition, Topic: "t", Name: "d", Value: 3, Vector: map[string]uint64{"eu": 2}})
	grp := enc(&WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{State: &wal.GroupState{Floor: 3, Next: 3}}})
	newer := map[string][]byte{
		"version": reseal(append([]byte{entryVersion + 1}, pos[1:]...)),
		"kind":    reseal(func() []byte { p := append([]byte(nil), pos...); p[5] = byte(maxEntryKind) + 1; return p }()),
		"position layout": reseal(func() []byte {
			p := append([]byte(nil), pos...)
			i := len(p) - (1 + 1 + 1 + 2 + 1) // layout | count | "eu" | offset
			if p[i] != posLayoutVector {
				t.Fatalf("position layout byte not where expected: % x", p)
			}
			p[i] = posLayoutVector + 1
			return p
		}()),
		"group layout": reseal(func() []byte {
			p := append([]byte(nil), grp...)
			i := entryHeaderLen + 1 + len("t") + 1 + len("g")
			if p[i] != groupLayout {
				t.Fatalf("group layout byte not where expected: % x", p)
			}
			p[i] = groupLayoutVector + 1
			return p
		}()),
	}
	for name, p := range newer {
		_, err := DecodeEntry(p)
		if !errors.Is(err, ErrEntryNewer) || !errors.Is(err, errEntry) {
			t.Errorf("%s: %v, want ErrEntryNewer", name, err)
		}
	}
	malformed := map[string][]byte{
		"checksum":  func() []byte { p := append([]byte(nil), pos...); p[5] = byte(maxEntryKind) + 1; return p }(),
		"version 0": reseal(append([]byte{0}, pos[1:]...)),
		"kind 0":    reseal(func() []byte { p := append([]byte(nil), pos...); p[5] = 0; return p }()),
		"truncated": reseal(append([]byte(nil), pos[:len(pos)-1]...)),
	}
	for name, p := range malformed {
		_, err := DecodeEntry(p)
		if err == nil || errors.Is(err, ErrEntryNewer) {
			t.Errorf("%s: %v, want a malformed entry that is not newer", name, err)
		}
	}

	s := newSnapSM(t)
	s.apply(1, &WalEntry{Kind: EntryAppend, Topic: "t", Records: []wal.Record{{Payload: []byte("x")}}})
	b := s.log.DB().NewBatch()
	defer b.Close()
	res, err := s.sm.Apply(b, 7, 2, []Entry{{Index: 2, Time: 2000, Data: malformed["kind 0"]}})
	if err != nil || len(res) != 1 {
		t.Fatalf("a malformed entry: %v, %d results; want a no-op with a result", err, len(res))
	}
	_, err = s.sm.Apply(b, 7, 3, []Entry{{Index: 3, Time: 3000, Data: newer["kind"]}})
	if !errors.Is(err, ErrEntryNewer) || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("an entry of a newer build: %v, want an error that stops the driver and says to upgrade", err)
	}
}
