package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/node"
)

func init() {
	register("members", "show a node's gossip member table (from its admin address)", runMembers)
	register("links", "show a node's links to other regions with their figures; --migrate moves them to new sockets", runLinks)
}

// adminCall makes one request to the node's admin API and decodes the JSON answer into v.
func adminCall(ctx context.Context, method, admin, path string, v any) error {
	u := "http://" + admin + path
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w (is the node running with --metrics %s?)", admin, err, admin)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

func runMembers(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "members", "[--admin HOST:PORT]")
	admin := fs.String("admin", "127.0.0.1:9400", "the node's metrics/admin address (quicmq node --metrics)")
	timeout := fs.Duration("timeout", 20*time.Second, "how long to wait for the node")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var ms []node.MemberInfo
	if err := adminCall(ctx, http.MethodGet, *admin, "/v1/members", &ms); err != nil {
		return err
	}
	if len(ms) == 0 {
		fmt.Fprintln(e.stdout, "no members: this node runs without gossip (standalone)")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREGION\tSTATUS\tQUIC\tGOSSIP\tPOOLS")
	for _, m := range ms {
		name := m.Name
		if m.IsLocal {
			name += " (this node)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, m.Region, m.Status, m.QUIC, m.Gossip, strings.Join(m.Pools, ","))
	}
	return tw.Flush()
}

func runLinks(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "links", "[--admin HOST:PORT] [--migrate [--region R]]")
	admin := fs.String("admin", "127.0.0.1:9400", "the node's metrics/admin address (quicmq node --metrics)")
	timeout := fs.Duration("timeout", 20*time.Second, "how long to wait for the node")
	migrate := fs.Bool("migrate", false, "move the links (all, or those to --region) to new local UDP sockets by QUIC connection migration")
	region := fs.String("region", "", "with --migrate: only the links to this region")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *region != "" && !*migrate {
		return usageError("--region goes with --migrate")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var links []federation.LinkInfo
	if *migrate {
		if err := adminCall(ctx, http.MethodPost, *admin, "/v1/links/migrate?region="+url.QueryEscape(*region), &links); err != nil {
			return err
		}
		fmt.Fprintln(e.stderr, "migrated; links now:")
	} else if err := adminCall(ctx, http.MethodGet, *admin, "/v1/links", &links); err != nil {
		return err
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
			l.PacketsLost, len(l.Mirrors), l.Migrations, l.Reconnects)
	}
	return tw.Flush()
}
