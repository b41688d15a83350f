package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/routing"
)

func init() {
	register("topics", "list topics with their offsets and sizes", runTopics)
}

func runTopics(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "topics", "[--server HOST:PORT] [--ca FILE] [--pattern PATTERN] [--format table|json]")
	var cf clientFlags
	cf.register(e, fs)
	pattern := fs.String("pattern", ">", "topics to list: a topic or a pattern ('*' one token, trailing '>' one or more)")
	format := fs.String("format", "table", "output: table, or json (one object per topic per line, sizes in bytes)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return usageError("--format %q: want table or json", *format)
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *pattern == "" {
		return usageError("--pattern must not be empty ('>' lists every topic)")
	}
	if err := routing.ValidatePattern(*pattern); err != nil {
		return flagSyntaxError("--pattern", err)
	}
	conn, err := cf.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := cf.requestCtx(ctx)
	defer cancel()
	list, err := conn.Topics(rctx, *pattern)
	if err != nil {
		return err
	}
	if *format == "json" {
		if err := printTopicsJSON(e, list); err != nil {
			return err
		}
	} else {
		printTopics(e, list)
	}
	if len(list) == 0 {
		fmt.Fprintf(e.stderr, "no topic matches %q\n", *pattern)
	}
	return nil
}

// printTopics writes the table: one row per topic, numbers as they are, bytes human-sized.
func printTopics(e *env, list []client.TopicInfo) {
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tFIRST\tNEXT\tRECORDS\tBYTES")
	for _, t := range list {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", t.Name, t.First, t.Next, t.Records(), humanBytes(t.Bytes))
	}
	tw.Flush()
}

// jsonTopic is a topic as --format json prints it.
type jsonTopic struct {
	Topic   string `json:"topic"`
	First   uint64 `json:"first"`
	Next    uint64 `json:"next"`
	Records uint64 `json:"records"`
	Bytes   uint64 `json:"bytes"`
}

func printTopicsJSON(e *env, list []client.TopicInfo) error {
	enc := json.NewEncoder(e.stdout)
	for _, t := range list {
		if err := enc.Encode(jsonTopic{Topic: t.Name, First: t.First, Next: t.Next, Records: t.Records(), Bytes: t.Bytes}); err != nil {
			return err
		}
	}
	return nil
}

// humanBytes formats n in binary units: "512 B", "1.5 KiB", "3.0 GiB".
func humanBytes(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, 0
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	for v >= 1024 && unit < len(units)-1 {
		v /= 1024
		unit++
	}
	return fmt.Sprintf("%.1f %s", v, units[unit])
}
