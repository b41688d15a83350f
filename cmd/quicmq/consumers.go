package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quicmq/quicmq/client"
)

func init() {
	register("consumers", "list, inspect, reset or remove durable consumers and consumer groups (ls | info NAME | reset NAME --to WHERE | rm NAME)", runConsumers)
}

const consumersSynopsis = `[ls | info NAME | reset NAME --to earliest|latest|OFFSET|TIME [--force] | rm NAME [--force]] [--format table|json] [--server HOST:PORT] [--ca FILE]

  ls (the default)  every consumer of your tenant, durable or group: name, kind, pattern, pending
                    records, members, last ack
  info NAME         one consumer, with its position (a group's: its floor), the head and the pending
                    records of each topic; a group's settings and outstanding records too
  reset NAME        move its position on every topic: --to earliest, latest, an offset, a time ago (5m)
                    or a date and time (2026-12-01T10:00:00Z); a group forgets its outstanding records
  rm NAME           remove it (all its positions or group state; it no longer counts against the
                    tenant's limit)
reset and rm are refused while a member is connected; --force ends the members first.`

func runConsumers(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "consumers", consumersSynopsis)
	var cf clientFlags
	cf.register(e, fs)
	format := fs.String("format", "table", "output: table, or json (ls: one object per consumer per line; info, reset: one object)")
	to := fs.String("to", "", "reset: where to put the consumer: earliest, latest, OFFSET, a time ago (5m) or a date and time")
	force := fs.Bool("force", false, "reset, rm: do it although members are connected (they are ended first)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	op, name, err := consumersOp(pos)
	if err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return usageError("--format %q: want table or json", *format)
	}
	if err := checkOpFlags(fs, op, map[string][]string{"to": {"reset"}, "force": {"reset", "rm"}}); err != nil {
		return err
	}
	var start client.Start
	if op == "reset" {
		if *to == "" {
			return usageError("reset %s: --to is required: earliest, latest, an offset, a time ago (5m) or a date and time", name)
		}
		if start, err = parseStart(*to, time.Now()); err != nil {
			return usageError("%s", strings.Replace(strings.TrimPrefix(err.Error(), errUsage.Error()+": "), "--from", "--to", 1))
		}
	}
	conn, rctx, done, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	opts := client.ManageOptions{Force: *force}
	switch op {
	case "ls":
		list, err := conn.Consumers(rctx)
		if err != nil {
			return err
		}
		if *format == "json" {
			return printConsumersJSON(e, list)
		}
		printConsumers(e, list)
		if len(list) == 0 {
			fmt.Fprintln(e.stderr, "no durable consumers or consumer groups")
		}
	case "info":
		c, err := conn.ConsumerInfo(rctx, name)
		if err != nil {
			return err
		}
		return printConsumer(e, c, *format == "json")
	case "reset":
		c, err := conn.ResetConsumer(rctx, name, start, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "consumer %s reset to %s on %s: %s pending\n", name, start, plural(len(c.Topics), "topic"), plural(int(c.Pending), "record"))
		return printConsumer(e, c, *format == "json")
	case "rm":
		removed, err := conn.DeleteConsumer(rctx, name, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "consumer %s removed (%s)\n", name, plural(removed, "position"))
	}
	return nil
}

// connect checks the flags, dials and bounds one request by --timeout; done closes the
// connection.
func (f *clientFlags) connect(ctx context.Context) (conn *client.Conn, rctx context.Context, done func(), err error) {
	if err := f.check(); err != nil {
		return nil, nil, nil, err
	}
	if conn, err = f.dial(ctx, client.Options{}); err != nil {
		return nil, nil, nil, err
	}
	rctx, cancel := f.requestCtx(ctx)
	return conn, rctx, func() { cancel(); conn.Close() }, nil
}

// consumersOp reads the operation and its consumer name from the positional arguments.
func consumersOp(pos []string) (op, name string, err error) {
	if len(pos) == 0 {
		return "ls", "", nil
	}
	op = pos[0]
	switch op {
	case "ls", "list":
		if len(pos) > 1 {
			return "", "", usageError("ls takes no argument, got %q", pos[1])
		}
		return "ls", "", nil
	case "info", "reset", "rm":
		if len(pos) != 2 {
			return "", "", usageError("%s takes one consumer name, got %d arguments", op, len(pos)-1)
		}
		return op, pos[1], nil
	}
	return "", "", usageError("unknown operation %q: want ls, info NAME, reset NAME or rm NAME", op)
}

// checkOpFlags refuses a flag given to an operation it does not apply to (flag -> its ops).
func checkOpFlags(fs *flag.FlagSet, op string, applies map[string][]string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if ops, ok := applies[f.Name]; ok && err == nil && !slices.Contains(ops, op) {
			err = usageError("--%s applies to %s only, not to %s", f.Name, strings.Join(ops, " and "), op)
		}
	})
	return err
}

func printConsumers(e *env, list []client.ConsumerInfo) {
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tPATTERN\tPENDING\tMEMBERS\tLAST ACK")
	for _, c := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", c.Name, c.Kind, orDash(c.Pattern), c.Pending, c.Members, timeCell(c.LastAck))
	}
	tw.Flush()
}

func printConsumer(e *env, c client.ConsumerInfo, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(consumerJSON(c, true))
	}
	fmt.Fprintf(e.stdout, "consumer %s (%s): %s pending, %s connected, last ack %s, pattern %s\n",
		c.Name, c.Kind, plural(int(c.Pending), "record"), plural(c.Members, "member"), timeCell(c.LastAck), orDash(c.Pattern))
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	if g := c.Group; g != nil {
		fmt.Fprintf(e.stdout, "group settings: ack-wait %s, max-deliver %d, dead-letter %s, order %s; %s outstanding\n",
			g.AckWait, g.MaxDeliver, orDash(g.DeadLetter), orderName(g.OrderBy), plural(int(g.Outstanding), "record"))
		fmt.Fprintln(tw, "TOPIC\tFLOOR\tNEXT\tPENDING\tOUTSTANDING\tUPDATED")
		for _, t := range c.Topics {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", t.Topic, t.Resume, t.Next, t.Pending, t.Outstanding, timeCell(t.Updated))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "TOPIC\tRESUME\tNEXT\tPENDING\tUPDATED")
	for _, t := range c.Topics {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", t.Topic, t.Resume, t.Next, t.Pending, timeCell(t.Updated))
	}
	return tw.Flush()
}

// jsonConsumer is a consumer as --format json prints it. The group fields are there for
// kind "group" only.
type jsonConsumer struct {
	Name    string     `json:"name"`
	Kind    string     `json:"kind"`
	Pattern string     `json:"pattern"` // a durable's: "" when no member is connected
	Pending uint64     `json:"pending"`
	Members int        `json:"members"`
	LastAck *time.Time `json:"last_ack"` // null: none recorded
	*jsonGroup
	Topics []jsonConsumerTopic `json:"topics,omitempty"`
}

// jsonGroup is what --format json prints of a group besides a durable's fields.
type jsonGroup struct {
	AckWait     string `json:"ack_wait"` // a Go duration: "30s"
	MaxDeliver  int    `json:"max_deliver"`
	DeadLetter  string `json:"dead_letter"` // "": records that reach max_deliver are dropped
	Order       string `json:"order"`       // none, topic or key
	Outstanding uint64 `json:"outstanding"`
}

type jsonConsumerTopic struct {
	Topic       string     `json:"topic"`
	Resume      uint64     `json:"resume"`
	Floor       *uint64    `json:"floor,omitempty"` // a group's floor (= resume)
	Next        uint64     `json:"next"`
	Pending     uint64     `json:"pending"`
	Outstanding *uint64    `json:"outstanding,omitempty"` // groups only
	Updated     *time.Time `json:"updated"`
}

func consumerJSON(c client.ConsumerInfo, withTopics bool) jsonConsumer {
	j := jsonConsumer{Name: c.Name, Kind: c.Kind, Pattern: c.Pattern, Pending: c.Pending, Members: c.Members, LastAck: timeOrNil(c.LastAck)}
	if g := c.Group; g != nil {
		j.jsonGroup = &jsonGroup{AckWait: g.AckWait.String(), MaxDeliver: g.MaxDeliver, DeadLetter: g.DeadLetter,
			Order: orderName(g.OrderBy), Outstanding: g.Outstanding}
	}
	if withTopics {
		j.Topics = []jsonConsumerTopic{}
		for _, t := range c.Topics {
			jt := jsonConsumerTopic{Topic: t.Topic, Resume: t.Resume, Next: t.Next, Pending: t.Pending, Updated: timeOrNil(t.Updated)}
			if c.Group != nil {
				jt.Floor, jt.Outstanding = &t.Resume, &t.Outstanding
			}
			j.Topics = append(j.Topics, jt)
		}
	}
	return j
}

// orderName is how the CLI names a group's order (as sub --order takes it).
func orderName(o client.Order) string {
	switch o {
	case client.OrderByTopic:
		return "topic"
	case client.OrderByKey:
		return "key"
	}
	return "none"
}

func printConsumersJSON(e *env, list []client.ConsumerInfo) error {
	enc := json.NewEncoder(e.stdout)
	for _, c := range list {
		if err := enc.Encode(consumerJSON(c, false)); err != nil {
			return err
		}
	}
	return nil
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func timeCell(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
