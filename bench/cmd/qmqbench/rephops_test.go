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
