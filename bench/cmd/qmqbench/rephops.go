package main

// Where a replicated record's packets go (issue 29: QUIC is the largest item of an R3
// record's CPU, and quic-go's work is per packet). Around the measured window the worker
// reads three sets of counters and reports each per acked record:
//   - the clients' own connections (client.Conn.Stats, quic-go's ConnectionStats): the
//     client -> node hop, publishes, and the node -> client hop, answers;
//   - each node's links to the other nodes of the region (quicmq_link_*_total, quic-go's
//     ConnectionStats of the connection that node dialed): a follower's link to the leader
//     carries its relayed publishes one way and their answers the other, besides the raft
//     messages it sends; the leader's links carry its appends (MsgApp) to the followers
//     and bring back their acknowledgements of those packets;
//   - the run's network namespace as a whole (/proc/net/snmp Udp InDatagrams: every UDP
//     datagram delivered on its loopback, from every process of the run).

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
)

// repHop is one direction of one hop, per record the nodes stored in the window.
type repHop struct {
	Hop     string  // "clients->nodes", "nodes->clients", or "n1->n2" (on n1's link to n2)
	Packets float64 // QUIC packets per record
	Bytes   float64 // bytes of those packets per record (links only: 0 for the clients)
}

// hopCounts is one reading of the counters, by hop.
type hopCounts struct {
	packets, bytes map[string]float64
	udpIn          float64
	// stored is the records the nodes stored (quicmq_publish_records_total, counted by the
	// node that appended them): the hops' denominator. Not the records acked in the window,
	// which lag the traffic by an ack's latency (seconds, with 16 windows of 1,024).
	stored float64
}

// readHops reads the counters: the clients' connections (QuicMQ ones), each node's links
// from its metrics address (names[i] at metrics[i]) and the namespace's UDP counters.
func readHops(pubs []asyncPub, names, metrics []string) (hopCounts, error) {
	h := hopCounts{packets: map[string]float64{}, bytes: map[string]float64{}}
	for _, p := range pubs {
		if q, ok := p.(*quicmqPub); ok {
			st := q.c.Stats()
			h.packets["clients->nodes"] += float64(st.PacketsSent)
			h.packets["nodes->clients"] += float64(st.PacketsReceived)
		}
	}
	for i, addr := range metrics {
		if err := readLinkCounters(names[i], addr, &h); err != nil {
			return h, err
		}
	}
	var err error
	h.udpIn, err = udpInDatagrams()
	return h, err
}

// readLinkCounters adds node name's link counters, read from its /metrics, to h: sent
// on its link to peer P as "name->P", received on it as "P->name (name's link)".
func readLinkCounters(name, addr string, h *hopCounts) error {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return fmt.Errorf("node %s metrics: %w", name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var into map[string]float64
		var sent bool
		switch {
		case strings.HasPrefix(line, "quicmq_link_sent_packets_total{"):
			into, sent = h.packets, true
		case strings.HasPrefix(line, "quicmq_link_received_packets_total{"):
			into = h.packets
		case strings.HasPrefix(line, "quicmq_link_sent_bytes_total{"):
			into, sent = h.bytes, true
		case strings.HasPrefix(line, "quicmq_link_received_bytes_total{"):
			into = h.bytes
		case strings.HasPrefix(line, "quicmq_publish_records_total "):
			fs := strings.Fields(line)
			v, err := strconv.ParseFloat(fs[len(fs)-1], 64)
			if err != nil {
				return fmt.Errorf("node %s metrics: %q", name, line)
			}
			h.stored += v
			continue
		default:
			continue
		}
		peer := labelValue(line, "peer_node")
		fs := strings.Fields(line)
		v, err := strconv.ParseFloat(fs[len(fs)-1], 64)
		if err != nil || peer == "" {
			return fmt.Errorf("node %s metrics: %q", name, line)
		}
		if sent {
			into[name+"->"+peer] += v
		} else {
			into[peer+"->"+name+" ("+name+"'s link)"] += v
		}
	}
	return sc.Err()
}

// labelValue is the value of label in a Prometheus text line, "" if absent.
func labelValue(line, label string) string {
	_, rest, ok := strings.Cut(line, label+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// udpInDatagrams is Udp InDatagrams of this process's network namespace.
func udpInDatagrams() (float64, error) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, err
	}
	var head []string
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) == 0 || fs[0] != "Udp:" {
			continue
		}
		if head == nil {
			head = fs
			continue
		}
		for i, name := range head {
			if name == "InDatagrams" && i < len(fs) {
				return strconv.ParseFloat(fs[i], 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/net/snmp: no Udp InDatagrams")
}

// hopsPerRecord is what moved between two readings, per record stored between them,
// busiest hops first; hops under 0.01 packets a record are left out.
func hopsPerRecord(before, after hopCounts) (hops []repHop, udp float64) {
	r := after.stored - before.stored
	if r <= 0 {
		return nil, 0
	}
	for hop, p := range after.packets {
		pk := (p - before.packets[hop]) / r
		if pk < 0.01 {
			continue
		}
		hops = append(hops, repHop{Hop: hop, Packets: pk, Bytes: (after.bytes[hop] - before.bytes[hop]) / r})
	}
	sort.Slice(hops, func(i, j int) bool { return hops[i].Packets > hops[j].Packets })
	return hops, (after.udpIn - before.udpIn) / r
}

// formatHops is the hops as one line: "udp 2.71 datagrams; n2->n1 0.76 pk 1094 B, ...".
func formatHops(hops []repHop, udp float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "a record stored: %.2f UDP datagrams in the namespace", udp)
	for _, h := range hops {
		fmt.Fprintf(&b, "; %s %.2f packets", h.Hop, h.Packets)
		if h.Bytes > 0 {
			fmt.Fprintf(&b, " %.0f B", h.Bytes)
		}
	}
	return b.String()
}
