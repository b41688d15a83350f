package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/manage"
)

func init() {
	register("members", "show a node's gossip member table (from its admin address)", runMembers)
	register("links", "show a node's links to other regions with their figures; --migrate moves them to new sockets", runLinks)
}

// adminFlagDoc is the --admin flag's help, the same for every admin command.
const adminFlagDoc = "the node's admin address, HOST:PORT or http://HOST:PORT ('quicmq node --admin', or --metrics\n" +
	"without --admin; 'quicmq dev' prints it)"

// adminBase turns --admin into the base URL of the admin API: HOST:PORT and http://HOST:PORT
// are accepted. The node serves the admin API over plain HTTP only, so https:// is refused
// with the reason rather than failing in a TLS handshake.
func adminBase(admin string) (string, error) {
	hostport := admin
	if scheme, rest, ok := strings.Cut(admin, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http":
			hostport = strings.TrimSuffix(rest, "/")
		case "https":
			return "", usageError("--admin %q: the node serves its admin API over plain HTTP, not HTTPS "+
				"(bind it to an address only operators reach): give http://HOST:PORT or HOST:PORT", admin)
		default:
			return "", usageError("--admin %q: want HOST:PORT or http://HOST:PORT", admin)
		}
	}
	if host, port, err := net.SplitHostPort(hostport); err != nil || port == "" || strings.ContainsAny(host+port, "/?#") {
		return "", usageError("--admin %q: want HOST:PORT or http://HOST:PORT, e.g. 127.0.0.1:9400", admin)
	}
	return "http://" + hostport, nil
}

// adminCall makes one request to the node's admin API and decodes the JSON answer into v. A
// refusal is told with the node's message alone when it sent one as JSON ({"error": ...}).
func adminCall(ctx context.Context, method, admin, path string, v any) error {
	base, err := adminBase(admin)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w (is the node running with --admin or --metrics %s?)", admin, err, strings.TrimPrefix(base, "http://"))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		var je struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &je) == nil && je.Error != "" {
			msg = je.Error
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	}
	return json.Unmarshal(body, v)
}

func runMembers(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "members", "[--admin HOST:PORT] [--format table|json]")
	admin := fs.String("admin", "127.0.0.1:9400", adminFlagDoc)
	timeout := fs.Duration("timeout", 20*time.Second, "how long to wait for the node")
	format := fs.String("format", "table", "output: table, or json: one JSON array of objects with the fields\n"+
		"name, region, status, quic, gossip, pools (array), tags (object), local (true for this node)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkTableFormat(*format); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var ms []manage.MemberInfo
	if err := adminCall(ctx, http.MethodGet, *admin, "/v1/members", &ms); err != nil {
		return err
	}
	if *format == "json" {
		out := make([]jsonMember, 0, len(ms))
		for _, m := range ms {
			out = append(out, jsonMember{Name: m.Name, Region: m.Region, Status: m.Status, QUIC: m.QUIC, Gossip: m.Gossip,
				Pools: nonNil(m.Pools), Tags: m.Tags, Local: m.IsLocal})
		}
		return writeJSON(e, out)
	}
	if len(ms) == 0 {
		fmt.Fprintln(e.stdout, "no members: this node runs without gossip (standalone)")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREGION\tSTATUS\tQUIC\tGOSSIP\tPOOLS\tFEATURES")
	for _, m := range ms {
		name := m.Name
		if m.IsLocal {
			name += " (this node)"
		}
		// What the node announces it knows (docs/operations.md, "Upgrading one node at a
		// time"); none from a node of release v0.2.0 or older.
		feat, ok := m.Tags[node.FeaturesTag]
		if !ok {
			feat = "- (v0.2.0 or older)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, m.Region, m.Status, m.QUIC, m.Gossip, strings.Join(m.Pools, ","), feat)
	}
	return tw.Flush()
}

func runLinks(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "links", "[--admin HOST:PORT] [--format table|json] [--migrate [--region R]]")
	admin := fs.String("admin", "127.0.0.1:9400", adminFlagDoc)
	format := fs.String("format", "table", "output: table, or json: one JSON array of objects with the fields region, node, addr,\n"+
		"local_addr, connected, since (RFC 3339), last_error, rtt_ms, min_rtt_ms, congestion_window_bytes,\n"+
		"sent_bytes, received_bytes, lost_packets, mirrors (array of topics mirrored, open or parked),\n"+
		"mirrored_topics (their count),\n"+
		"mirror_streams (mirrors holding a stream), mirrors_waiting (waiting for one), mirrors_stalled,\n"+
		"migrations, reconnects")
	timeout := fs.Duration("timeout", 20*time.Second, "how long to wait for the node")
	migrate := fs.Bool("migrate", false, "move the links (all, or those to --region) to new local UDP sockets by QUIC connection migration")
	region := fs.String("region", "", "with --migrate: only the links to this region")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *region != "" && !*migrate {
		return usageError("--region goes with --migrate")
	}
	if err := checkTableFormat(*format); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var links []federation.LinkInfo
	if *migrate {
		if err := adminCall(ctx, http.MethodPost, *admin, "/v1/links/migrate?region="+url.QueryEscape(*region), &links); err != nil {
			return err
		}
		fmt.Fprintln(e.stderr, "migrated; links now:")
	} else {
		path := "/v1/links?mirrors=0" // the table shows the count of mirrored topics only
		if *format == "json" {
			path = fmt.Sprintf("/v1/links?mirrors=%d", linksMirrorPage)
		}
		if err := adminCall(ctx, http.MethodGet, *admin, path, &links); err != nil {
			return err
		}
	}
	if *format == "json" {
		if err := allMirrors(ctx, *admin, links); err != nil {
			return err
		}
		out := make([]jsonLink, 0, len(links))
		for _, l := range links {
			out = append(out, jsonLink{Region: l.Region, Node: l.Node, Addr: l.Addr, LocalAddr: l.LocalAddr,
				Connected: l.Connected, Since: l.Since, LastError: l.LastError,
				RTTms: millis(l.RTT), MinRTTms: millis(l.MinRTT), CongestionWindow: l.CongestionWindow,
				SentBytes: l.BytesSent, ReceivedBytes: l.BytesReceived, LostPackets: l.PacketsLost,
				Mirrors: nonNil(l.Mirrors), MirroredTopics: l.MirroredTopics, MirrorStreams: l.MirrorStreams, MirrorsWaiting: l.MirrorsWaiting,
				MirrorsStalled: l.MirrorsStalled, Migrations: l.Migrations, Reconnects: l.Reconnects})
		}
		return writeJSON(e, out)
	}
	if len(links) == 0 {
		fmt.Fprintln(e.stdout, "no links: this node has no peers in other regions (or no WAN gossip)")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REGION\tNODE\tSTATE\tLOCAL\tREMOTE\tRTT\tCWND\tSENT\tRECEIVED\tLOST\tMIRRORS\tMIGRATIONS\tRECONNECTS")
	for _, l := range links {
		state := "up"
		if !l.Connected {
			state = "down"
			if l.LastError != "" {
				state = "down: " + l.LastError
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", l.Region, l.Node, state, l.LocalAddr, l.Addr,
			l.RTT.Round(time.Microsecond), humanBytes(l.CongestionWindow), humanBytes(l.BytesSent), humanBytes(l.BytesReceived),
			l.PacketsLost, l.MirroredTopics, l.Migrations, l.Reconnects)
	}
	return tw.Flush()
}

// checkTableFormat checks a --format flag of a command printing a table or JSON.
func checkTableFormat(format string) error {
	if format != "table" && format != "json" {
		return usageError("--format %q: want table or json", format)
	}
	return nil
}

// jsonMember is a member as 'members --format json' prints it; its field names are part of
// the CLI's interface (documented in -h) and kept apart from the admin API's.
type jsonMember struct {
	Name   string            `json:"name"`
	Region string            `json:"region"`
	Status string            `json:"status"`
	QUIC   string            `json:"quic"`
	Gossip string            `json:"gossip"`
	Pools  []string          `json:"pools"`
	Tags   map[string]string `json:"tags"`
	Local  bool              `json:"local"`
}

// jsonLink is a link as 'links --format json' prints it.
type jsonLink struct {
	Region           string    `json:"region"`
	Node             string    `json:"node"`
	Addr             string    `json:"addr"`
	LocalAddr        string    `json:"local_addr"`
	Connected        bool      `json:"connected"`
	Since            time.Time `json:"since"`
	LastError        string    `json:"last_error"`
	RTTms            float64   `json:"rtt_ms"`
	MinRTTms         float64   `json:"min_rtt_ms"`
	CongestionWindow uint64    `json:"congestion_window_bytes"`
	SentBytes        uint64    `json:"sent_bytes"`
	ReceivedBytes    uint64    `json:"received_bytes"`
	LostPackets      uint64    `json:"lost_packets"`
	Mirrors          []string  `json:"mirrors"`
	MirroredTopics   int       `json:"mirrored_topics"`
	MirrorStreams    int       `json:"mirror_streams"`
	MirrorsWaiting   int       `json:"mirrors_waiting"`
	MirrorsStalled   int       `json:"mirrors_stalled"`
	Migrations       uint64    `json:"migrations"`
	Reconnects       uint64    `json:"reconnects"`
}

// linksMirrorPage is how many mirrored topics of a link 'links --format json' asks the
// admin API for at a time (GET /v1/links lists them by pages).
var linksMirrorPage = 10000

// allMirrors completes each link's list of mirrored topics, page after page (mirrors_next),
// for the JSON output, which lists them all.
func allMirrors(ctx context.Context, admin string, links []federation.LinkInfo) error {
	for i := range links {
		for next := links[i].MirrorsNext; next != ""; {
			var page []federation.LinkInfo
			path := fmt.Sprintf("/v1/links?node=%s&mirrors=%d&mirrors_after=%s", url.QueryEscape(links[i].Node), linksMirrorPage, url.QueryEscape(next))
			if err := adminCall(ctx, http.MethodGet, admin, path, &page); err != nil {
				return err
			}
			next = ""
			for _, p := range page {
				if p.Region == links[i].Region && p.Node == links[i].Node {
					links[i].Mirrors = append(links[i].Mirrors, p.Mirrors...)
					next = p.MirrorsNext
				}
			}
		}
		links[i].MirrorsNext = ""
	}
	return nil
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// nonNil makes an absent list an empty JSON array rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writeJSON prints v as one indented JSON document.
func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
