package linearize

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quicmq/quicmq/internal/campaign"
)

// Config bounds a check. The zero value works.
type Config struct {
	// Region is the region the records originate in (their OriginRegion);
	// the judge's Ack.Region. Default "region".
	Region string
	// Timeout bounds porcupine's search per topic; a topic not decided in
	// time is reported as unknown. Default 2 minutes.
	Timeout time.Duration
	// MaxOps bounds the operations of one topic's history given to
	// porcupine; a longer one is reported as unknown, unchecked. Default
	// 100,000.
	MaxOps int
	// VisualizeDir is where a violation's HTML visualization is written.
	// Default os.TempDir().
	VisualizeDir string
}

func (c Config) withDefaults() Config {
	if c.Region == "" {
		c.Region = "region"
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.MaxOps == 0 {
		c.MaxOps = 100_000
	}
	if c.VisualizeDir == "" {
		c.VisualizeDir = os.TempDir()
	}
	return c
}

// Report is the verdict on a history.
type Report struct {
	// Judge is internal/campaign's verdict on the acknowledgements against
	// the final agreed log: lost, duplicated, offset conflicts, corrupt,
	// phantom.
	Judge *campaign.Report
	// Publishes by outcome, reads and final reads.
	OKs, Refusals, Unanswered, Reads, FinalReads int
	// Diverged counts replicas whose final log differs from the agreed one;
	// PastCommit reads that observed a record the agreed log does not hold
	// at that offset; Retried keys acknowledged at two offsets;
	// StoredRefused keys stored although every attempt was refused.
	Diverged, PastCommit, Retried, StoredRefused int
	// Linearizable is porcupine's verdict per topic: Ok, Illegal, or
	// Unknown (timed out, or over Config.MaxOps).
	Linearizable map[string]porcupine.CheckResult
	// Visualizations are the HTML files written for Illegal topics.
	Visualizations []string
	Problems       []string
}

// OK reports whether the history passed every check, linearizability
// proven for every topic.
func (r *Report) OK() bool {
	if !r.Judge.OK() || r.Diverged+r.PastCommit+r.Retried+r.StoredRefused > 0 {
		return false
	}
	for _, v := range r.Linearizable {
		if v != porcupine.Ok {
			return false
		}
	}
	return true
}

func (r *Report) problem(counter *int, format string, args ...any) {
	*counter++
	if len(r.Problems) < 30 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

func (r *Report) String() string {
	byResult := map[porcupine.CheckResult][]string{}
	for _, tp := range slices.Sorted(mapKeys(r.Linearizable)) {
		byResult[r.Linearizable[tp]] = append(byResult[r.Linearizable[tp]], tp)
	}
	s := fmt.Sprintf("publishes: %d ok, %d refused, %d unanswered; %d reads, %d final reads; replicas diverged %d, served past commit %d, retries at another offset %d, refused but stored %d; linearizable: %d topics ok, illegal %v, unknown %v\n  judge: %v",
		r.OKs, r.Refusals, r.Unanswered, r.Reads, r.FinalReads, r.Diverged, r.PastCommit, r.Retried, r.StoredRefused,
		len(byResult[porcupine.Ok]), byResult[porcupine.Illegal], byResult[porcupine.Unknown], r.Judge)
	if len(r.Problems) > 0 {
		s += "\n  " + strings.Join(r.Problems, "\n  ")
	}
	return s
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Check judges a history. Every topic with a final read gets the agreed
// log: the longest final read of it (every other must equal it).
func Check(h *History, cfg Config) *Report {
	cfg = cfg.withDefaults()
	pubs, reads := h.Ops()
	r := &Report{Linearizable: map[string]porcupine.CheckResult{}}

	byTopic := map[string]*topicOps{}
	topic := func(name string) *topicOps {
		t, ok := byTopic[name]
		if !ok {
			t = &topicOps{name: name, attempts: map[Key][]*Publish{}}
			byTopic[name] = t
		}
		return t
	}
	for i := range pubs {
		p := &pubs[i]
		if p.Outcome == Pending {
			p.Outcome = Unknown
		}
		switch p.Outcome {
		case OK:
			r.OKs++
		case Refused:
			r.Refusals++
		default:
			r.Unanswered++
		}
		t := topic(p.Topic)
		t.pubs = append(t.pubs, p)
		t.attempts[p.Key] = append(t.attempts[p.Key], p)
	}
	for i := range reads {
		rd := &reads[i]
		t := topic(rd.Topic)
		if rd.Final {
			r.FinalReads++
			t.finals = append(t.finals, rd)
		} else {
			r.Reads++
			t.reads = append(t.reads, rd)
		}
	}

	var acks []campaign.Ack
	attempted := map[string]uint64{}
	agreed := map[string][]campaign.Rec{}
	for _, name := range slices.Sorted(mapKeys(byTopic)) {
		t := byTopic[name]
		t.agree(r)
		if t.final != nil {
			agreed[name] = t.final.Recs
		}
		for _, p := range t.pubs {
			attempted[p.Key.Producer] = max(attempted[p.Key.Producer], p.Key.Seq+1)
		}
		acks = append(acks, t.acks(r, cfg.Region)...)
		t.pastCommit(r)
		t.storedRefused(r)
		r.Linearizable[name] = t.linearize(r, cfg)
	}
	r.Judge = campaign.Check(acks, map[string]map[string][]campaign.Rec{cfg.Region: agreed}, attempted)
	return r
}

// topicOps is one topic's operations.
type topicOps struct {
	name     string
	pubs     []*Publish
	attempts map[Key][]*Publish
	reads    []*Read
	finals   []*Read
	final    *Read // the agreed log: the longest final read
	finalAt  map[Key]int
}

// agree picks the agreed log and reports every replica whose final log
// differs from it.
func (t *topicOps) agree(r *Report) {
	if len(t.finals) == 0 {
		return
	}
	t.final = slices.MaxFunc(t.finals, func(a, b *Read) int {
		return cmp.Or(cmp.Compare(len(a.Keys), len(b.Keys)), strings.Compare(b.Node, a.Node))
	})
	t.finalAt = make(map[Key]int, len(t.final.Keys))
	for i, k := range t.final.Keys {
		if _, ok := t.finalAt[k]; !ok {
			t.finalAt[k] = i
		}
	}
	for _, f := range t.finals {
		if f == t.final {
			continue
		}
		for i, rec := range f.Recs {
			if rec != t.final.Recs[i] {
				r.problem(&r.Diverged, "%s: %s's log differs from %s's at offset %d: %v (offset %d) against %v (offset %d)",
					t.name, f.Node, t.final.Node, i, rec.Key(), rec.Offset, t.final.Recs[i].Key(), t.final.Recs[i].Offset)
				goto next
			}
		}
		if len(f.Recs) != len(t.final.Recs) {
			r.problem(&r.Diverged, "%s: %s's log ends at offset %d, %s's at %d", t.name, f.Node, len(f.Recs), t.final.Node, len(t.final.Recs))
		}
	next:
	}
}

// acks returns one judge's Ack per acknowledged key and reports keys
// acknowledged at two offsets.
func (t *topicOps) acks(r *Report, region string) []campaign.Ack {
	var out []campaign.Ack
	for _, k := range slices.SortedFunc(func(yield func(Key) bool) {
		for k := range t.attempts {
			if !yield(k) {
				return
			}
		}
	}, func(a, b Key) int { return cmp.Or(strings.Compare(a.Producer, b.Producer), cmp.Compare(a.Seq, b.Seq)) }) {
		var first *Publish
		for _, p := range t.attempts[k] {
			if p.Outcome != OK {
				continue
			}
			if first == nil {
				first = p
				out = append(out, campaign.Ack{Region: region, Topic: t.name, Offset: p.Offset, Key: k})
			} else if p.Offset != first.Offset {
				r.problem(&r.Retried, "%s: %s, then %s: a retry answered with another offset", t.name, describePublish(first), describePublish(p))
			}
		}
	}
	return out
}

// pastCommit reports every record a read observed that the agreed log does
// not hold at that offset.
func (t *topicOps) pastCommit(r *Report) {
	if t.final == nil {
		return
	}
	for _, rd := range t.reads {
		for i, k := range rd.Keys {
			if i >= len(t.final.Keys) || t.final.Keys[i] != k {
				held := "nothing"
				if i < len(t.final.Keys) {
					held = t.final.Keys[i].String()
				}
				r.problem(&r.PastCommit, "%s: served past commit: %s observed %v at offset %d; the final log holds %s there", t.name, describeRead(rd), k, i, held)
				break
			}
		}
	}
}

func (t *topicOps) storedRefused(r *Report) {
	for k := range t.finalAt {
		ps, ok := t.attempts[k]
		if !ok || slices.ContainsFunc(ps, func(p *Publish) bool { return p.Outcome != Refused }) {
			continue
		}
		r.problem(&r.StoredRefused, "%s: %v is stored at offset %d, yet %s: %s", t.name, k, t.finalAt[k], describePublish(ps[0]), ps[0].Err)
	}
}

// linearize builds the topic's porcupine history (package doc: the three
// deductions from the final reads) and checks it.
func (t *topicOps) linearize(r *Report, cfg Config) porcupine.CheckResult {
	var finalReturn int64 = math.MaxInt64
	if len(t.finals) > 0 {
		finalReturn = 0
		for _, f := range t.finals {
			finalReturn = max(finalReturn, f.Return)
		}
	}
	var ops []porcupine.Operation
	for _, k := range t.keys() {
		ops = append(ops, t.publishOps(k, finalReturn)...)
	}
	for _, rd := range append(slices.Clone(t.reads), t.finals...) {
		ops = append(ops, porcupine.Operation{ClientId: rd.Client, Input: readIn{rd}, Call: rd.Call, Output: readOut{rd.Keys, hashKeys(rd.Keys)}, Return: rd.Return})
	}
	if len(ops) > cfg.MaxOps {
		r.Problems = append(r.Problems, fmt.Sprintf("%s: linearizability unknown: %d operations, over the bound of %d", t.name, len(ops), cfg.MaxOps))
		return porcupine.Unknown
	}
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, cfg.Timeout)
	switch res {
	case porcupine.Unknown:
		r.Problems = append(r.Problems, fmt.Sprintf("%s: linearizability unknown: porcupine did not decide %d operations within %v", t.name, len(ops), cfg.Timeout))
	case porcupine.Illegal:
		msg := fmt.Sprintf("%s: not linearizable (%d operations, decided in %v): %s", t.name, len(ops), time.Since(start).Round(time.Millisecond), blame(ops, info))
		path := filepath.Join(cfg.VisualizeDir, fmt.Sprintf("linearize-%s-%d.html", strings.ReplaceAll(t.name, "/", "_"), time.Now().UnixNano()))
		vstart := time.Now()
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			msg += fmt.Sprintf("; visualization not written: %v", err)
		} else {
			r.Visualizations = append(r.Visualizations, path)
			msg += fmt.Sprintf("; visualization (written in %v): %s", time.Since(vstart).Round(time.Millisecond), path)
		}
		r.Problems = append(r.Problems, msg)
	}
	return res
}

// keys lists the topic's keys in the order first published.
func (t *topicOps) keys() []Key {
	var out []Key
	seen := map[Key]bool{}
	for _, p := range t.pubs {
		if !seen[p.Key] {
			seen[p.Key] = true
			out = append(out, p.Key)
		}
	}
	return out
}

// publishOps is the one porcupine operation of all the attempts of key k that were not
// refused (plus one per acknowledgement at another offset than the first's, which no
// order admits): it appends k (once: publishes are idempotent), somewhere between the first
// attempt's invocation and the first acknowledgement (or the last final read, when none
// was acknowledged), at the offset acknowledged (or where the final reads show it). This
// is exact: whichever attempt stored k did so in that interval, and the other attempts
// change nothing. One operation per key keeps the search from trying the attempts that
// change nothing in every order. It returns nothing when k cannot have been stored
// before the final reads.
func (t *topicOps) publishOps(k Key, finalReturn int64) []porcupine.Operation {
	var merged *Publish
	var others []porcupine.Operation
	n := 0
	first := slices.IndexFunc(t.attempts[k], func(p *Publish) bool { return p.Outcome == OK })
	for _, p := range t.attempts[k] {
		if p.Outcome == Refused {
			continue
		}
		if p.Outcome == OK && p.Offset != t.attempts[k][first].Offset {
			others = append(others, porcupine.Operation{ClientId: p.Client, Input: pubIn{p: p, at: -1, attempts: 1}, Call: p.Call, Return: p.Return})
			continue
		}
		n++
		switch {
		case merged == nil:
			c := *p
			merged = &c
		case p.Outcome == OK && (merged.Outcome != OK || p.Return < merged.Return):
			call := merged.Call
			*merged = *p
			merged.Call = min(call, p.Call)
		default:
			merged.Call = min(merged.Call, p.Call)
		}
	}
	if merged == nil {
		return others
	}
	in := pubIn{p: merged, at: -1, attempts: n}
	if merged.Outcome != OK {
		merged.Return = math.MaxInt64
		if t.final != nil {
			at, stored := t.finalAt[k]
			if !stored {
				return others // linearized after the final reads, if at all: it changes nothing observed
			}
			in.at, merged.Return = int64(at), finalReturn
		}
	}
	return append(others, porcupine.Operation{ClientId: merged.Client, Input: in, Call: merged.Call, Return: max(merged.Return, merged.Call)})
}

// blame names the operation porcupine could not place: the one that
// returned first among those outside the longest linearizable prefix found.
func blame(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := info.PartialLinearizations()
	if len(parts) == 0 {
		return "no linearization found"
	}
	var longest []int
	for _, l := range parts[0] {
		if len(l) > len(longest) {
			longest = l
		}
	}
	in := make(map[int]bool, len(longest))
	for _, id := range longest {
		in[id] = true
	}
	culprit := -1
	for id, op := range ops {
		if !in[id] && (culprit < 0 || op.Return < ops[culprit].Return) {
			culprit = id
		}
	}
	desc := func(id int) string { return model.DescribeOperation(ops[id].Input, ops[id].Output) }
	s := fmt.Sprintf("the longest linearizable order has %d operations", len(longest))
	if len(longest) > 0 {
		s += fmt.Sprintf(", ending with %s", desc(longest[len(longest)-1]))
	}
	if culprit >= 0 {
		s += fmt.Sprintf("; no order admits %s", desc(culprit))
	}
	return s
}
