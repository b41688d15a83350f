package manage

import (
	"strings"
	"testing"
)

func TestNodeInfoString(t *testing.T) {
	mi := NodeInfo{Name: "eu-4", State: "up", Held: 2, Moves: []MoveInfo{{Group: "g3", From: "eu-1", To: "eu-4", State: "catching up", Entries: 10, Of: 90, Bytes: 4096}}}
	if s := mi.String(); !strings.Contains(s, "10/90 entries 4096 bytes") {
		t.Fatalf("%q does not show the move's entries and bytes", s)
	}
}
