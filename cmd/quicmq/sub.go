package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/routing"
)

func init() {
	register("sub", "subscribe to a topic pattern and print its records", runSub)
}

// ackEvery bounds how many printed records may wait for their ack while records keep
// coming; when the stream goes quiet everything printed is acked at once.
const ackEvery = 256

func runSub(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "sub", "--topic PATTERN [--server HOST:PORT] [--ca FILE] [--from earliest|latest|OFFSET|TIME] [--durable NAME | --group NAME [--ack-wait D] [--max-deliver N] [--dead-letter TOPIC] [--order none|topic|key]] [--region R] [--count N] [--idle DURATION] [--until-caught-up] [--reconnect] [--failover HOST:PORT,...]")
	var cf clientFlags
	cf.register(e, fs)
	pattern := fs.String("topic", "", "topic or pattern to subscribe to ('*' one token, trailing '>' one or more), e.g. 'orders.>' (required)")
	from := fs.String("from", "earliest", "where to start in each topic without a stored durable position: earliest, latest,\n"+
		"an offset (42), a time ago (5m, 2h30m: that long before now), or a date and time: RFC 3339\n"+
		"(2025-01-02T15:04:05Z, 2025-01-02T15:04:05+02:00), 2025-01-02T15:04 or 2025-01-02 (local time)")
	durable := fs.String("durable", "", "durable consumer name: resume after the last acknowledged record, and store progress")
	region := fs.String("region", "", "replay another region's log of the topic directly, through the node's link to it, without storing it here (offsets are that region's)")
	count := fs.Int("count", 0, "exit after this many records (0: no limit)")
	untilCaughtUp := fs.Bool("until-caught-up", false, "exit once every record stored when the subscription was set up has been printed\n"+
		"(the node says so: no timeout needed to read a topic to its end)")
	idle := fs.Duration("idle", 0, "exit when no record arrived for this long, e.g. 5s (0: wait forever)")
	reconnect := fs.Bool("reconnect", false, "when the connection to the node is lost (it restarted), dial it again and go on where the\n"+
		"subscription was, printing nothing twice (with --durable: from the last acknowledged record)")
	failover := fs.String("failover", "", "nodes of other regions, comma-separated, to move to when no --server node answers\n"+
		"(implies --reconnect): the subscription resumes there after the records it printed, by their\n"+
		"origin region and origin offset, so nothing is printed twice or skipped, each region's records\n"+
		"in order; records of the lost region not yet mirrored come when it returns. With --group the\n"+
		"group resumes there from its state mirrored from the lost region: what this member printed is\n"+
		"not printed again; records other members acknowledged within the mirroring lag may be")
	var gf groupFlags
	gf.register(fs)
	format := fs.String("format", "text", "output: text (OFFSET<TAB>TOPIC<TAB>PAYLOAD per line, the payload as it is) or\n"+
		"json (one object per line with every field of the record; the payload as a string when it is UTF-8, else payload_base64)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *pattern == "" {
		return usageError("--topic is required: the topic or pattern to subscribe to, e.g. --topic 'orders.>'")
	}
	if err := routing.ValidatePattern(*pattern); err != nil {
		return flagSyntaxError("--topic", err)
	}
	start, err := parseStart(*from, time.Now())
	if err != nil {
		return err
	}
	if *count < 0 {
		return usageError("--count must not be negative, got %d", *count)
	}
	if *idle < 0 {
		return usageError("--idle must not be negative, got %v", *idle)
	}
	if *format != "text" && *format != "json" {
		return usageError("--format %q: want text or json", *format)
	}
	if err := cf.check(); err != nil {
		return err
	}
	opts := client.SubscribeOptions{From: start, Durable: *durable, Region: *region, NotifyCaughtUp: *untilCaughtUp}
	if err := gf.apply(&opts); err != nil {
		return err
	}

	conn, err := cf.dial(ctx, client.Options{Reconnect: *reconnect || *failover != "", Failover: splitServers(*failover)})
	if err != nil {
		return err
	}
	defer conn.Close()
	migrateOnSignal(ctx, conn, e.stderr)
	sctx, cancel := cf.requestCtx(ctx)
	sub, err := conn.Subscribe(sctx, *pattern, opts)
	cancel()
	if err != nil {
		return err
	}
	s := &subPrinter{e: e, sub: sub, out: bufio.NewWriter(e.stdout), json: *format == "json", unacked: map[string]client.Record{}, group: opts.Group != ""}
	err = s.run(ctx, *count, *idle)
	if aerr := s.ackAll(); err == nil {
		err = aerr
	}
	if err == nil && (opts.Durable != "" || opts.Group != "") {
		cctx, cancel := cf.requestCtx(context.WithoutCancel(ctx))
		err = sub.Commit(cctx) // every ack stored before exiting
		cancel()
	}
	sub.Close() // waits for the node to have read every ack
	if n := sub.Redelivered(); n > 0 {
		fmt.Fprintf(e.stderr, "quicmq sub: %s redelivered by the group after a move to another region, acknowledged before it: not printed again\n", plural(int(n), "record"))
	}
	return err
}

// parseStart reads --from; now is the instant a relative time counts back from.
func parseStart(v string, now time.Time) (client.Start, error) {
	switch v {
	case "earliest", "":
		return client.Earliest, nil
	case "latest":
		return client.Latest, nil
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		return client.AtOffset(n), nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return client.Start{}, usageError("--from %q: a time ago must not be negative (5m means 5 minutes ago)", v)
		}
		return client.AtTime(now.Add(-d)), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return client.AtTime(t), nil
	}
	// Without a zone, the date is the user's local time, as a shell's `date` shows it.
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", time.DateOnly} {
		if t, err := time.ParseInLocation(layout, v, now.Location()); err == nil {
			return client.AtTime(t), nil
		}
	}
	return client.Start{}, usageError("--from %q: want earliest, latest, an offset (42), a time ago (5m, 2h) "+
		"or a date and time (2025-01-02T15:04:05Z, 2025-01-02T15:04, 2025-01-02)", v)
}

// subPrinter prints records and acks them once printed (and flushed).
type subPrinter struct {
	e       *env
	sub     *client.Subscription
	out     *bufio.Writer
	json    bool                     // --format json
	unacked map[string]client.Record // per topic, the last printed record not yet acked
	group   bool                     // --group: every record is acked (groupAcks), not the last per topic
	grouped []client.Record          // with group: printed records not yet acked
	pending int
	printed int
}

// run prints records until count were printed, the stream was idle for idle, ctx ended
// (an interrupt: not an error) or the subscription failed.
func (s *subPrinter) run(ctx context.Context, count int, idle time.Duration) error {
	// Records already received are taken without waiting (a done context); only before
	// waiting for more are output and acks flushed, so a fast stream is printed in large
	// writes and a slow one at once.
	drained, cancelDrained := context.WithCancel(ctx)
	cancelDrained()
	for count == 0 || s.printed < count {
		rec, err := s.sub.Next(drained)
		if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
			if err := s.ackAll(); err != nil {
				return err
			}
			rec, err = s.wait(ctx, idle)
		}
		if err != nil {
			var gap *client.GapError
			switch {
			case errors.As(err, &gap):
				fmt.Fprintf(s.e.stderr, "quicmq sub: gap: %v\n", err)
				if !s.group {
					// Acknowledged like the records it stands for: a durable resumes past it.
					delete(s.unacked, gap.Topic)
					if err := s.sub.AckGap(gap); err != nil {
						return err
					}
				}
				continue
			case ctx.Err() != nil:
				return nil // interrupted
			case errors.Is(err, client.ErrCaughtUp):
				fmt.Fprintf(s.e.stderr, "quicmq sub: caught up after %s\n", plural(s.printed, "record"))
				return nil
			case errors.Is(err, context.DeadlineExceeded):
				fmt.Fprintf(s.e.stderr, "quicmq sub: no record for %v, exiting after %s\n", idle, plural(s.printed, "record"))
				return nil
			}
			return err
		}
		if err := s.print(rec); err != nil {
			return err
		}
		s.printed++
		if s.group {
			s.grouped = append(s.grouped, rec)
		} else {
			s.unacked[rec.Topic] = rec
		}
		if s.pending++; s.pending >= ackEvery {
			if err := s.ackAll(); err != nil {
				return err
			}
		}
	}
	return nil
}

// wait blocks for the next record, at most idle (0: no limit).
func (s *subPrinter) wait(ctx context.Context, idle time.Duration) (client.Record, error) {
	if idle <= 0 {
		return s.sub.Next(ctx)
	}
	ictx, cancel := context.WithTimeout(ctx, idle)
	defer cancel()
	return s.sub.Next(ictx)
}

// ackAll flushes the output, then acks the last printed record of every topic: nothing is
// acknowledged before it was written out.
func (s *subPrinter) ackAll() error {
	if err := s.out.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	for _, rec := range s.grouped {
		if err := s.sub.Ack(rec); err != nil {
			return err
		}
	}
	clear(s.grouped)
	s.grouped = s.grouped[:0]
	for topic, rec := range s.unacked {
		if err := s.sub.Ack(rec); err != nil {
			return err
		}
		delete(s.unacked, topic)
	}
	s.pending = 0
	return nil
}

// jsonRecord is a record as --format json prints it.
type jsonRecord struct {
	Topic         string            `json:"topic"`
	Offset        uint64            `json:"offset"`
	Time          time.Time         `json:"time"`
	OriginRegion  string            `json:"origin_region,omitempty"`
	OriginOffset  uint64            `json:"origin_offset"`
	ProducerID    string            `json:"producer_id,omitempty"`
	Sequence      uint64            `json:"sequence,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"` // values as strings: bytes that are not UTF-8 become U+FFFD
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
}

func (s *subPrinter) print(rec client.Record) error {
	if !s.json {
		_, err := fmt.Fprintf(s.out, "%d\t%s\t%s\n", rec.Offset, rec.Topic, rec.Payload)
		return err
	}
	j := jsonRecord{Topic: rec.Topic, Offset: rec.Offset, Time: rec.Time, OriginRegion: rec.OriginRegion,
		OriginOffset: rec.OriginOffset, ProducerID: rec.ProducerID, Sequence: rec.Sequence}
	if utf8.Valid(rec.Payload) {
		p := string(rec.Payload)
		j.Payload = &p
	} else {
		j.PayloadBase64 = rec.Payload
	}
	if len(rec.Headers) > 0 {
		j.Headers = make(map[string]string, len(rec.Headers))
		for _, h := range rec.Headers {
			j.Headers[h.Key] = string(h.Value)
		}
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	s.out.Write(b)
	return s.out.WriteByte('\n')
}
