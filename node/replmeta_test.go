package node

import "testing"

// TestMemberRecord: a member record round-trips, and every truncation of it (or of a
// placement) is refused rather than misread: its bytes come from raft entries.
func TestMemberRecord(t *testing.T) {
	b := encodeMember("eu-2", 0xdeadbeef12345678)
	name, id, err := decodeMember(b)
	if err != nil || name != "eu-2" || id != 0xdeadbeef12345678 {
		t.Fatalf("decode: %q %x %v", name, id, err)
	}
	for i := range len(b) {
		if _, _, err := decodeMember(b[:i]); err == nil {
			t.Errorf("a member record cut to %d of %d bytes decoded", i, len(b))
		}
	}
	if _, _, err := decodeMember(append(b, 0)); err == nil {
		t.Error("a member record with a trailing byte decoded")
	}
	if _, err := decodePlacement(b); err == nil {
		t.Error("a member record decoded as a placement")
	}
}

func FuzzMemberRecord(f *testing.F) {
	f.Add(encodeMember("eu-1", 7))
	f.Fuzz(func(t *testing.T, p []byte) {
		name, id, err := decodeMember(p)
		if err != nil {
			return
		}
		if got := encodeMember(name, id); string(got) != string(p) {
			t.Fatalf("%x decoded as %q %d, which encodes as %x", p, name, id, got)
		}
	})
}
