package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/routing"
)

func init() {
	register("topics", "list topics with their offsets, sizes and retention; create, purge or delete one", runTopics)
}

const topicsSynopsis = `[--pattern PATTERN] [--format table|json] | create TOPIC [--retention-age D] [--retention-bytes N] [--replicas N] [--update] | purge TOPIC --yes [--force] | delete TOPIC --yes [--force]  [--server HOST:PORT] [--ca FILE]

  (no operation)    list the topics matching --pattern
  create TOPIC      create an empty topic, with retention of its own when a --retention flag is given
  purge TOPIC       delete every record of it, keeping the topic, its offsets and its consumers
  delete TOPIC      delete it: its records, its consumers' positions on it and mirror cursors of it
purge and delete need --yes, and are refused while durable consumers or mirror cursors depend on
the topic (the refusal names them) unless --force.`

func runTopics(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && (args[0] == "create" || args[0] == "purge" || args[0] == "delete") {
		return runTopicOp(ctx, e, args[0], args[1:])
	}
	fs := newFlagSet(e, "topics", topicsSynopsis)
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
	if *pattern == "" {
		return usageError("--pattern must not be empty ('>' lists every topic)")
	}
	if err := routing.ValidatePattern(*pattern); err != nil {
		return flagSyntaxError("--pattern", err)
	}
	conn, rctx, done, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	// Rows are printed as they arrive: a listing of any number of topics holds none of them.
	var print func(client.TopicInfo) error
	var tp *topicTable
	if *format == "json" {
		enc := json.NewEncoder(e.stdout)
		print = func(t client.TopicInfo) error { return enc.Encode(topicJSON(t)) }
	} else {
		tp = newTopicTable(e)
		print = tp.row
	}
	count := 0
	err = conn.TopicsEach(rctx, *pattern, func(t client.TopicInfo) error {
		count++
		return print(t)
	})
	if tp != nil {
		if ferr := tp.flush(); err == nil {
			err = ferr
		}
	}
	if err != nil {
		return err
	}
	if count == 0 {
		fmt.Fprintf(e.stderr, "no topic matches %q\n", *pattern)
	}
	return nil
}

// topicTableBlock is how many rows the table holds back to size its columns: they are as
// wide as the widest cell of the header and the first rows (as text/tabwriter would align
// the whole table), and a later cell wider than its column widens it from its row on. So a
// listing of any number of topics streams, holding at most this many rows.
const topicTableBlock = 1000

var topicHeader = [...]string{"TOPIC", "FIRST", "NEXT", "RECORDS", "BYTES", "RETENTION", "LEADER", "REPLICAS"}

// topicTable writes the table of printTopics row by row: columns separated by two spaces,
// the last one not padded.
type topicTable struct {
	w       *bufio.Writer
	widths  [len(topicHeader)]int
	pending [][len(topicHeader)]string
	started bool
}

func newTopicTable(e *env) *topicTable {
	tp := &topicTable{w: bufio.NewWriter(e.stdout)}
	for i, h := range topicHeader {
		tp.widths[i] = len(h)
	}
	return tp
}

func (tp *topicTable) row(t client.TopicInfo) error {
	leader, replicas := t.Leader, strings.Join(t.Replicas, ",")
	if leader == "" {
		leader = "-"
	}
	if replicas == "" {
		replicas = "-"
	}
	cells := [len(topicHeader)]string{t.Name, strconv.FormatUint(t.First, 10), strconv.FormatUint(t.Next, 10),
		strconv.FormatUint(t.Records(), 10), humanBytes(t.Bytes), retentionCell(t.Retention), leader, replicas}
	if !tp.started {
		tp.pending = append(tp.pending, cells)
		if len(tp.pending) < topicTableBlock {
			return nil
		}
		return tp.start()
	}
	return tp.line(cells)
}

// start sizes the columns from the header and the rows held back, and writes them.
func (tp *topicTable) start() error {
	tp.started = true
	for _, cells := range tp.pending {
		for i, c := range cells {
			tp.widths[i] = max(tp.widths[i], utf8.RuneCountInString(c))
		}
	}
	if err := tp.line(topicHeader); err != nil {
		return err
	}
	for _, cells := range tp.pending {
		if err := tp.line(cells); err != nil {
			return err
		}
	}
	tp.pending = nil
	return tp.w.Flush()
}

func (tp *topicTable) line(cells [len(topicHeader)]string) error {
	for i, c := range cells {
		tp.w.WriteString(c)
		if i == len(cells)-1 {
			break
		}
		n := utf8.RuneCountInString(c)
		tp.widths[i] = max(tp.widths[i], n)
		tp.w.WriteString(strings.Repeat(" ", tp.widths[i]-n+2))
	}
	return tp.w.WriteByte('\n')
}

// flush writes what is held back and buffered.
func (tp *topicTable) flush() error {
	if !tp.started {
		if err := tp.start(); err != nil {
			return err
		}
	}
	return tp.w.Flush()
}

// printTopics writes the table: one row per topic, numbers as they are, bytes human-sized.
// The RETENTION column is "default" (the node's), "forever", or the topic's own limits as
// "age=D,bytes=N" (either one alone when the other is unlimited).
func printTopics(e *env, list []client.TopicInfo) {
	tp := newTopicTable(e)
	for _, t := range list {
		tp.row(t)
	}
	tp.flush()
}

func retentionCell(r *client.TopicRetention) string {
	switch {
	case r == nil:
		return "default"
	case r.MaxAge == 0 && r.MaxBytes == 0:
		return "forever"
	}
	var parts []string
	if r.MaxAge > 0 {
		parts = append(parts, "age="+r.MaxAge.String())
	}
	if r.MaxBytes > 0 {
		parts = append(parts, fmt.Sprintf("bytes=%d", r.MaxBytes))
	}
	return strings.Join(parts, ",")
}

// jsonTopic is a topic as --format json prints it. retention_age (a Go duration, "0s": no
// age limit) and retention_bytes (0: no size limit) are null when the node's default
// retention applies.
type jsonTopic struct {
	Topic          string  `json:"topic"`
	First          uint64  `json:"first"`
	Next           uint64  `json:"next"`
	Records        uint64  `json:"records"`
	Bytes          uint64  `json:"bytes"`
	RetentionAge   *string `json:"retention_age"`
	RetentionBytes *int64  `json:"retention_bytes"`
	// Leader is the node taking the topic's publishes ("" when none is known); Replicas the
	// nodes holding its log (the one owner of a single-copy topic).
	Leader   string   `json:"leader"`
	Replicas []string `json:"replicas"`
}

func topicJSON(t client.TopicInfo) jsonTopic {
	j := jsonTopic{Topic: t.Name, First: t.First, Next: t.Next, Records: t.Records(), Bytes: t.Bytes, Leader: t.Leader, Replicas: t.Replicas}
	if j.Replicas == nil {
		j.Replicas = []string{}
	}
	if r := t.Retention; r != nil {
		age, bytes := r.MaxAge.String(), r.MaxBytes
		j.RetentionAge, j.RetentionBytes = &age, &bytes
	}
	return j
}

func printTopicsJSON(e *env, list []client.TopicInfo) error {
	enc := json.NewEncoder(e.stdout)
	for _, t := range list {
		if err := enc.Encode(topicJSON(t)); err != nil {
			return err
		}
	}
	return nil
}

// runTopicOp runs topics create, purge or delete.
func runTopicOp(ctx context.Context, e *env, op string, args []string) error {
	fs := newFlagSet(e, "topics", topicsSynopsis)
	var cf clientFlags
	cf.register(e, fs)
	age := fs.Duration("retention-age", -1, "create: delete the topic's records older than this (0: no age limit); default: the node's retention")
	bytes := fs.Int64("retention-bytes", -1, "create: keep at most this many bytes of the topic (0: no size limit); default: the node's retention")
	update := fs.Bool("update", false, "create: change the retention of an existing topic instead of refusing it")
	replicas := fs.Int("replicas", 0, "create: the topic's replica count in a replicated region (set once, at creation); default: the region's --replicas")
	yes := fs.Bool("yes", false, "purge, delete: confirm that the records (and, for delete, the topic's consumer positions and mirror cursors) go")
	force := fs.Bool("force", false, "purge, delete: do it although durable consumers or mirror cursors depend on the topic")
	format := fs.String("format", "table", "create: output the topic as a table row, or json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("topics %s takes one topic, got %d arguments", op, len(pos))
	}
	topic := pos[0]
	if err := routing.ValidateTopic(topic); err != nil {
		return flagSyntaxError("topic", err)
	}
	if err := checkOpFlags(fs, op, map[string][]string{"retention-age": {"create"}, "retention-bytes": {"create"}, "update": {"create"}, "replicas": {"create"},
		"format": {"create"}, "yes": {"purge", "delete"}, "force": {"purge", "delete"}}); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return usageError("--format %q: want table or json", *format)
	}
	if *age < -1 || *bytes < -1 {
		return usageError("--retention-age and --retention-bytes must not be negative")
	}
	if *replicas < 0 {
		return usageError("--replicas %d: want at least 1 (or leave it out for the region's)", *replicas)
	}
	conn, rctx, done, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	if op == "create" {
		opts := client.TopicOptions{Update: *update, Replicas: *replicas}
		if *age >= 0 || *bytes >= 0 {
			opts.Retention = &client.TopicRetention{MaxAge: max(*age, 0), MaxBytes: max(*bytes, 0)}
		}
		t, err := conn.CreateTopic(rctx, topic, opts)
		if err != nil {
			return err
		}
		if *format == "json" {
			return printTopicsJSON(e, []client.TopicInfo{t})
		}
		printTopics(e, []client.TopicInfo{t})
		return nil
	}
	if !*yes {
		what := "every record of " + topic + " (the topic, its offsets and its consumers stay)"
		if op == "delete" {
			what = "topic " + topic + ": its records, its durable consumers' positions on it and the mirror cursors of it"
		}
		if list, err := conn.Topics(rctx, topic); err == nil && len(list) == 1 {
			what += fmt.Sprintf("; it holds %s", plural(int(list[0].Records()), "record"))
		}
		return usageError("%s deletes %s: add --yes to confirm", op, what)
	}
	opts := client.ManageOptions{Force: *force}
	var records uint64
	if op == "purge" {
		records, err = conn.PurgeTopic(rctx, topic, opts)
	} else {
		records, err = conn.DeleteTopic(rctx, topic, opts)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "topic %s %sd: %s deleted\n", topic, op, plural(int(records), "record"))
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
