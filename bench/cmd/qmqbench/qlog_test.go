package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A trace as quic-go writes it: a header record, then one event per line, each prefixed by
// the JSON-SEQ record separator.
const sampleQlog = "\x1e{\"file_schema\":\"urn:ietf:params:qlog:file:sequential\",\"trace\":{}}\n" +
	"\x1e{\"time\":10,\"name\":\"transport:packet_sent\",\"data\":{}}\n" +
	"\x1e{\"time\":11,\"name\":\"recovery:metrics_updated\",\"data\":{\"congestion_window\":12000,\"bytes_in_flight\":3000}}\n" +
	"\x1e{\"time\":60,\"name\":\"transport:packet_sent\",\"data\":{}}\n" +
	"\x1e{\"time\":70,\"name\":\"recovery:packet_lost\",\"data\":{}}\n" +
	"\x1e{\"time\":71,\"name\":\"recovery:metrics_updated\",\"data\":{\"congestion_window\":6000}}\n" +
	"\x1e{\"time\":900,\"name\":\"recovery:loss_timer_updated\",\"data\":{\"timer_type\":\"pto\",\"event_type\":\"expired\"}}\n" +
	"\x1e{\"time\":950,\"name\":\"recovery:loss_timer_updated\",\"data\":{\"timer_type\":\"ack\",\"event_type\":\"expired\"}}\n" +
	"\x1e{\"time\":2000,\"name\":\"transport:packet_sent\",\"data\":{}}\n"

func TestReadQlog(t *testing.T) {
	tr, err := readQlog(strings.NewReader(sampleQlog), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.sent) != 2 || len(tr.lost) != 1 || len(tr.pto) != 1 || len(tr.cwnd) != 2 || len(tr.inFlight) != 1 {
		t.Fatalf("sent %v lost %v pto %v cwnd %v in flight %v", tr.sent, tr.lost, tr.pto, tr.cwnd, tr.inFlight)
	}
	if minY(tr.cwnd) != 6000 || maxY(tr.cwnd) != 12000 || tr.lost[0] != 0.07 {
		t.Fatalf("cwnd %v, lost at %v", tr.cwnd, tr.lost)
	}
	png := filepath.Join(t.TempDir(), "q.png")
	if err := plotQlog(tr, "sample", png); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("plot: %v %v", st, err)
	}

	if _, err := readQlog(strings.NewReader(sampleQlog), 5, 6); err == nil || !strings.Contains(err.Error(), "no event") {
		t.Fatalf("an empty window: %v", err)
	}
	bad := sampleQlog + "\x1e{\"time\":\n"
	if _, err := readQlog(strings.NewReader(bad), 0, 0); err == nil || !strings.Contains(err.Error(), "line 10") {
		t.Fatalf("a broken line: %v", err)
	}
	if _, err := readQlog(strings.NewReader(""), 0, 0); err == nil {
		t.Fatal("an empty file was read")
	}
}
