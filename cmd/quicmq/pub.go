package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/routing"
)

func init() {
	register("pub", "publish records: a payload given as an argument, a whole file (--file), each line of standard input, or generated ones (--count)", runPub)
}

// pubOpts is what the pub flags say, beyond the connection.
type pubOpts struct {
	topic          string
	count, size    int
	rate           float64
	print          bool
	quiet          bool   // no echo of acknowledged records on standard output
	payload        []byte // one record: the positional argument or the --file content
	payloadName    string // what the echo says of it: the argument, or "FILE (N bytes)"
	single         bool   // payload is set: publish one record, not lines of stdin
	window         int
	headers        headerFlags
	reconnect      bool          // resend in-flight publishes across a lost connection (idempotent)
	progressPeriod time.Duration // progress lines on stderr in generate mode
}

// headerFlags collects repeated --header KEY=VALUE flags.
type headerFlags []client.Header

func (h *headerFlags) String() string { return "" }

func (h *headerFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	*h = append(*h, client.Header{Key: k, Value: []byte(val)})
	return nil
}

func runPub(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "pub", "--topic TOPIC [--server HOST:PORT] [--ca FILE] [--header K=V]... [--reconnect] [--failover HOST:PORT,...] [--quiet]\n"+
		"                  [PAYLOAD | --file FILE | --count N [--size BYTES] [--rate R] [--print]]\n\n"+
		"  quicmq pub --topic t 'hello'        one record, the argument as its payload\n"+
		"  quicmq pub --topic t --file x.bin   one record, the whole file (any bytes) as its payload\n"+
		"  echo hello | quicmq pub --topic t   one record per line of standard input\n"+
		"  quicmq pub --topic t --count 1000   generated records, with progress\n"+
		"Each acknowledged record is echoed as OFFSET<TAB>PAYLOAD (--quiet: nothing).")
	var cf clientFlags
	cf.register(e, fs)
	o := pubOpts{progressPeriod: time.Second}
	fs.StringVar(&o.topic, "topic", "", "topic to publish to, e.g. orders.eu.created (required)")
	fs.IntVar(&o.count, "count", 0, "generate this many records instead of reading standard input;\n"+
		"progress (rate, acked, latency p50/p99) goes to standard error every second")
	fs.IntVar(&o.size, "size", 128, "with --count: payload bytes of each generated record")
	fs.Float64Var(&o.rate, "rate", 0, "with --count: records per second (0: as fast as the window allows)")
	fs.BoolVar(&o.print, "print", false, "with --count: print each record's offset, one per line, as it is acknowledged")
	fs.BoolVar(&o.quiet, "quiet", false, "do not echo acknowledged records on standard output (failures still go to standard error)")
	file := fs.String("file", "", "publish one record whose payload is this whole file, byte for byte ('-': all of standard input)")
	fs.IntVar(&o.window, "window", 1024, "publishes awaiting their acknowledgement at once (the pipelining window)")
	fs.Var(&o.headers, "header", "a header KEY=VALUE for every record (repeat the flag for more)")
	fs.BoolVar(&o.reconnect, "reconnect", false, "when the connection to the node is lost (it restarted), dial it again and resend the\n"+
		"publishes not yet acknowledged; the node stores each once (idempotent publish): one it had\n"+
		"stored is printed with its original offset, and the count of those goes to standard error")
	failover := fs.String("failover", "", "nodes of other regions, comma-separated, to move to when no --server node answers\n"+
		"(implies --reconnect): publishes go on there as that region's records. A publish resent there\n"+
		"is de-duplicated only against what that region stored: one the lost region had stored but not\n"+
		"acknowledged is stored again, as a record of the new region (at least once across regions)")
	args, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if o.topic == "" {
		return usageError("--topic is required: the topic to publish to, e.g. --topic orders.eu.created")
	}
	if err := routing.ValidateTopic(o.topic); err != nil {
		return flagSyntaxError("--topic", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case o.count < 0:
		return usageError("--count must not be negative, got %d", o.count)
	case o.size < 0:
		return usageError("--size must not be negative, got %d", o.size)
	case o.rate < 0:
		return usageError("--rate must not be negative, got %v", o.rate)
	case o.window <= 0:
		return usageError("--window must be positive, got %d", o.window)
	case o.count == 0 && (set["size"] || set["rate"] || set["print"]):
		return usageError("--size, --rate and --print describe generated records: add --count N (without it, lines of standard input are published)")
	case len(args) > 1:
		return usageError("%d payload arguments: give the payload as one argument (quote it: 'hello world'), or use --file or standard input", len(args))
	case len(args) == 1 && set["file"]:
		return usageError("a payload argument and --file both given: publish one or the other")
	case (len(args) == 1 || set["file"]) && o.count > 0:
		return usageError("--count generates records: it excludes a payload argument and --file")
	case o.quiet && o.print:
		return usageError("--quiet and --print exclude each other")
	case set["file"] && *file == "":
		return usageError("--file: name a file ('-' for standard input)")
	}
	switch {
	case len(args) == 1:
		o.single, o.payload, o.payloadName = true, []byte(args[0]), args[0]
	case set["file"]:
		var b []byte
		var err error
		if *file == "-" {
			b, err = io.ReadAll(e.stdin)
		} else {
			b, err = os.ReadFile(*file)
		}
		if err != nil {
			return fmt.Errorf("--file: %w", err)
		}
		o.single, o.payload, o.payloadName = true, b, fmt.Sprintf("%s (%s)", *file, plural(len(b), "byte"))
	}
	if err := cf.check(); err != nil {
		return err
	}
	o.reconnect = o.reconnect || *failover != ""
	conn, err := cf.dial(ctx, client.Options{MaxPendingPublishes: o.window, Reconnect: o.reconnect, Idempotent: o.reconnect, Failover: splitServers(*failover)})
	if err != nil {
		return err
	}
	defer conn.Close()
	migrateOnSignal(ctx, conn, e.stderr)
	switch {
	case o.count > 0:
		return pubGenerate(ctx, e, conn, o)
	case o.single:
		return pubOne(ctx, e, conn, cf, o)
	}
	return pubLines(ctx, e, conn, o)
}

// pubOne publishes the one record of a payload argument or --file and echoes its offset.
func pubOne(ctx context.Context, e *env, conn *client.Conn, cf clientFlags, o pubOpts) error {
	rctx, cancel := cf.requestCtx(ctx)
	defer cancel()
	a, err := conn.Publish(rctx, client.Message{Topic: o.topic, Headers: o.headers, Payload: o.payload})
	if err != nil {
		return err
	}
	if !o.quiet {
		fmt.Fprintf(e.stdout, "%d\t%s\n", a.Offset, o.payloadName)
	}
	if a.Duplicate {
		reportDuplicates(e.stderr, 1)
	}
	return nil
}

// maxLine is the longest line pub reads; the node's payload limit (announced when connecting,
// 1 MiB by default) is checked per line by the client and fails only that line.
const maxLine = 64<<20 + 1

// pubLines publishes each line of standard input as one record, pipelined, and prints
// "OFFSET\tLINE" per record in input order as soon as its ack arrives.
func pubLines(ctx context.Context, e *env, conn *client.Conn, o pubOpts) error {
	in := readLines(e.stdin)
	defer close(in.stop)
	queue := make(chan pubSent, o.window)
	var pr pubPrinter
	var wg sync.WaitGroup
	wg.Go(func() { pr.run(ctx, e, o, queue) })

	n := 0
	var fatal error
loop:
	for {
		select {
		case line, ok := <-in.lines:
			if !ok {
				break loop
			}
			n++
			f, err := conn.PublishAsync(ctx, client.Message{Topic: o.topic, Headers: o.headers, Payload: line})
			var ce *client.Error
			if err != nil && !errors.As(err, &ce) {
				fatal = err // the connection is gone or ctx ended: later lines would fail alike
				break loop
			}
			queue <- pubSent{n: n, line: line, f: f, err: err} // err: this line refused (too large)
		case <-ctx.Done():
			break loop
		}
	}
	close(queue)
	wg.Wait()
	reportDuplicates(e.stderr, pr.dups)
	switch {
	case ctx.Err() != nil && pr.unconfirmed > 0:
		return fmt.Errorf("interrupted: %s not confirmed", plural(pr.unconfirmed, "published record"))
	case ctx.Err() != nil:
		return nil
	case fatal != nil:
		return fmt.Errorf("stopped at line %d: %w", n, fatal)
	case pr.failed > 0:
		return fmt.Errorf("%d of %s failed (see above)", pr.failed, plural(n, "record"))
	}
	select {
	case <-in.lines: // closed: in.err is set
		if errors.Is(in.err, bufio.ErrTooLong) {
			return fmt.Errorf("standard input: line %d is longer than %d bytes", n+1, maxLine-1)
		}
		if in.err != nil {
			return fmt.Errorf("standard input: %w", in.err)
		}
	default:
	}
	return nil
}

// lineReader is standard input read line by line by a goroutine that owns it. It ends at the
// end of the input, or at its next line once stop is closed. A read blocked on a terminal
// cannot be interrupted: after an interrupt it is left to the process exit.
type lineReader struct {
	lines chan []byte   // closed at the end
	stop  chan struct{} // closed by the reader's user
	err   error         // the read's error, written before lines is closed
}

func readLines(in io.Reader) *lineReader {
	r := &lineReader{lines: make(chan []byte), stop: make(chan struct{})}
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), maxLine)
		for sc.Scan() {
			select {
			case r.lines <- bytes.Clone(sc.Bytes()):
			case <-r.stop:
				return
			}
		}
		r.err = sc.Err()
	}()
	return r
}

// pubSent is a line handed to PublishAsync: its number, its bytes, its future or refusal.
type pubSent struct {
	n    int
	line []byte
	f    *client.Future
	err  error // PublishAsync's refusal
}

// pubPrinter owns standard output and the counters while `quicmq pub` reads lines; it gets
// the records in input order, so failures are reported in order too.
type pubPrinter struct {
	failed, unconfirmed, dups int
}

func (p *pubPrinter) run(ctx context.Context, e *env, o pubOpts, queue <-chan pubSent) {
	out := bufio.NewWriter(e.stdout)
	defer out.Flush()
	for s := range queue {
		err := s.err
		if err == nil {
			select {
			case <-s.f.Done():
			default:
				out.Flush() // about to wait: show what is acked so far
			}
			var a client.Ack
			if a, err = s.f.Wait(ctx); err == nil {
				if !o.quiet {
					fmt.Fprintf(out, "%d\t%s\n", a.Offset, s.line)
				}
				if a.Duplicate {
					p.dups++
				}
				continue
			}
		}
		if ctx.Err() != nil {
			p.unconfirmed++
			continue
		}
		p.failed++
		out.Flush()
		fmt.Fprintf(e.stderr, "quicmq pub: line %d not published: %v\n", s.n, err)
	}
}

// pubGenerate publishes o.count generated records, paced by o.rate, and reports progress and
// a summary on standard error.
func pubGenerate(ctx context.Context, e *env, conn *client.Conn, o pubOpts) error {
	payload := bytes.Repeat([]byte{'x'}, o.size) // shared: never modified
	type sent struct {
		at time.Time
		f  *client.Future
	}
	queue := make(chan sent, o.window)
	st := &pubStats{total: o.count, size: o.size, start: time.Now()}
	st.last = st.start

	// The collector goroutine owns st and standard output: it waits for the futures in
	// order (the node answers in order) and prints progress every period.
	var wg sync.WaitGroup
	wg.Go(func() {
		out := bufio.NewWriter(e.stdout)
		defer out.Flush()
		tick := time.NewTicker(o.progressPeriod)
		defer tick.Stop()
		for {
			var s sent
			var ok bool
			select {
			case s, ok = <-queue:
				if !ok {
					return
				}
			case <-tick.C:
				out.Flush()
				st.progress(e.stderr)
				continue
			}
			for waiting := true; waiting; {
				select {
				case <-s.f.Done():
					waiting = false
				case <-ctx.Done():
					waiting = false
				case <-tick.C:
					out.Flush()
					st.progress(e.stderr)
				}
			}
			a, err := s.f.Wait(ctx)
			switch {
			case err == nil:
				st.acked(time.Since(s.at))
				if a.Duplicate {
					st.dups++
				}
				if o.print {
					fmt.Fprintf(out, "%d\n", a.Offset)
				}
			case ctx.Err() != nil:
				st.unconfirmed++
			default:
				st.fail(e.stderr, err)
			}
		}
	})

	var fatal error
	for i := 0; i < o.count && ctx.Err() == nil; i++ {
		if o.rate > 0 {
			due := st.start.Add(time.Duration(float64(i) / o.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
				if ctx.Err() != nil {
					break
				}
			}
		}
		f, err := conn.PublishAsync(ctx, client.Message{Topic: o.topic, Headers: o.headers, Payload: payload})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fatal = err
			break
		}
		queue <- sent{at: time.Now(), f: f}
	}
	close(queue)
	wg.Wait()
	st.summary(e.stderr)
	reportDuplicates(e.stderr, st.dups)
	switch {
	case fatal != nil:
		return fmt.Errorf("stopped after %s: %w", plural(st.ok+st.failed, "record"), fatal)
	case st.failed > 0:
		return fmt.Errorf("%d of %s failed", st.failed, plural(st.ok+st.failed, "record"))
	case st.unconfirmed > 0:
		return fmt.Errorf("interrupted: %s not confirmed", plural(st.unconfirmed, "published record"))
	}
	return nil
}

// reportDuplicates says on w how many acks were for records stored by an earlier attempt:
// publishes resent after a lost connection that the node had stored before it was lost.
func reportDuplicates(w io.Writer, dups int) {
	if dups > 0 {
		verb := "were"
		if dups == 1 {
			verb = "was"
		}
		fmt.Fprintf(w, "quicmq pub: %s %s already stored by an attempt before the connection was lost (resent, not stored again; original offsets printed)\n", plural(dups, "record"), verb)
	}
}

// pubStats is the generate mode's bookkeeping, owned by the collector goroutine.
type pubStats struct {
	total, size             int
	start, last             time.Time
	ok, failed, unconfirmed int
	dups                    int // acks of publishes an earlier attempt had stored (--reconnect)
	sinceLast               int
	all, window             latencyHist
}

func (s *pubStats) acked(d time.Duration) {
	s.ok++
	s.sinceLast++
	s.all.add(d)
	s.window.add(d)
}

// fail reports the first few failures in full and counts the rest.
func (s *pubStats) fail(w io.Writer, err error) {
	s.failed++
	if s.failed <= 10 {
		fmt.Fprintf(w, "quicmq pub: record %d not published: %v\n", s.ok+s.failed, err)
	} else if s.failed == 11 {
		fmt.Fprintln(w, "quicmq pub: more failures; counting them in the summary")
	}
}

func (s *pubStats) progress(w io.Writer) {
	now := time.Now()
	rate := float64(s.sinceLast) / now.Sub(s.last).Seconds()
	fmt.Fprintf(w, "quicmq pub: %.0f rec/s, acked %d/%d, latency p50 %v p99 %v\n",
		rate, s.ok, s.total, s.window.quantile(0.5), s.window.quantile(0.99))
	s.last, s.sinceLast = now, 0
	s.window = latencyHist{}
}

func (s *pubStats) summary(w io.Writer) {
	el := time.Since(s.start)
	rate := float64(s.ok) / el.Seconds()
	fmt.Fprintf(w, "quicmq pub: %s of %s acked in %v: %.0f rec/s, %s/s; latency p50 %v p99 %v max %v",
		plural(s.ok, "record"), plural(s.size, "byte"), el.Round(time.Millisecond), rate, humanBytes(uint64(rate*float64(s.size))),
		s.all.quantile(0.5), s.all.quantile(0.99), s.all.max.Round(time.Microsecond))
	if s.failed > 0 {
		fmt.Fprintf(w, "; %d failed", s.failed)
	}
	if s.unconfirmed > 0 {
		fmt.Fprintf(w, "; %d not confirmed (interrupted)", s.unconfirmed)
	}
	fmt.Fprintln(w)
}

// latencyHist is a log-linear histogram of durations in microseconds: exact below 32 µs,
// then 16 buckets per power of two (about 6% resolution), constant memory for any count.
type latencyHist struct {
	counts [640]uint64
	n      uint64
	max    time.Duration
}

func (h *latencyHist) add(d time.Duration) {
	u := uint64(max(d, 0) / time.Microsecond)
	i := 0
	if u < 32 {
		i = int(u)
	} else {
		e := bits.Len64(u) - 5
		i = 32 + (e-1)*16 + int(u>>e) - 16
	}
	h.counts[min(i, len(h.counts)-1)]++
	h.n++
	h.max = max(h.max, d)
}

// quantile returns the midpoint of the bucket holding the q-quantile, rounded for display.
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	if rank >= h.n {
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			lo, width := uint64(i), uint64(1)
			if i >= 32 {
				e := (i-32)/16 + 1
				lo, width = uint64((i-32)%16+16)<<e, 1<<e
			}
			d := time.Duration(lo)*time.Microsecond + time.Duration(width)*time.Microsecond/2
			return min(d, h.max).Round(time.Microsecond)
		}
	}
	return h.max
}
