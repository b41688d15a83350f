package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHopsPerRecord reads two scrapes of a node's link counters and a client's packets and
// checks the per-record figures and their order: sent on a link names the node first,
// received on it names the peer first.
func TestHopsPerRecord(t *testing.T) {
	var sent, recv, stored float64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# HELP quicmq_link_sent_packets_total x\n")
		fmt.Fprintf(w, "quicmq_link_sent_packets_total{peer_node=\"n2\",peer_region=\"r\"} %g\n", sent)
		fmt.Fprintf(w, "quicmq_link_sent_bytes_total{peer_node=\"n2\",peer_region=\"r\"} %g\n", sent*1400)
		fmt.Fprintf(w, "quicmq_link_received_packets_total{peer_node=\"n2\",peer_region=\"r\"} %g\n", recv)
		fmt.Fprintf(w, "quicmq_link_received_bytes_total{peer_node=\"n2\",peer_region=\"r\"} %g\n", recv*50)
		fmt.Fprintf(w, "quicmq_publish_records_total %g\n", stored)
		fmt.Fprintf(w, "quicmq_link_open_streams{peer_node=\"n2\",peer_region=\"r\"} 3\n")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	read := func() hopCounts {
		h := hopCounts{packets: map[string]float64{}, bytes: map[string]float64{}}
		if err := readLinkCounters("n1", addr, &h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	sent, recv, stored = 100, 10, 500
	before := read()
	sent, recv, stored = 850, 50, 1500
	after := read()
	hops, _ := hopsPerRecord(before, after)
	want := []repHop{{Hop: "n1->n2", Packets: 0.75, Bytes: 1050}, {Hop: "n2->n1 (n1's link)", Packets: 0.04, Bytes: 2}}
	if fmt.Sprint(hops) != fmt.Sprint(want) {
		t.Fatalf("hops %v, want %v", hops, want)
	}
	if _, err := udpInDatagrams(); err != nil {
		t.Fatal(err)
	}
}

// TestShareOf classes a traces listing: crypto under packing is crypto, a labelled sample is
// read past its label line, and what matches no quic-go frame falls to its own class.
func TestShareOf(t *testing.T) {
	traces := `File: quicmq
-----------+-------------------------------------------------------
      10ms   crypto/internal/fips140/aes/gcm.gcmAesEnc
             github.com/quic-go/quic-go.(*packetPacker).appendPacket
-----------+-------------------------------------------------------
         pebble:[flush]
      30ms   runtime.memmove
             github.com/cockroachdb/pebble/v2.(*memTable).apply
-----------+-------------------------------------------------------
     1.5s   internal/runtime/syscall/linux.Syscall6
             syscall.sendmsg
             github.com/quic-go/quic-go.(*sendQueue).Run
-----------+-------------------------------------------------------
     500µs   github.com/quic-go/quic-go.(*packetPacker).appendPacket
`
	got := shareOf(traces)
	want := map[string]float64{
		"quic: crypto (AEAD seal/open, header protection)": 10000,
		"pebble": 30000,
		"quic: UDP send (sendmsg with GSO, send queue)": 1.5e6,
		"quic: packing and stream framing (send)":       500,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("shareOf: %v, want %v", got, want)
	}
}
