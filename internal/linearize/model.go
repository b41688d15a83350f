package linearize

import (
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model of one topic's log (one partition: Check runs one
// check per topic).

// pubIn is a publish's input; at is the offset the final reads show its key
// at, or -1 (no final read holds it, or there is no final read).
type pubIn struct {
	p        *Publish
	at       int64
	attempts int // the attempts this operation stands for (Check: publishOp)
}

// readIn is a read's input; its output is the read itself.
type readIn struct{ r *Read }

// logState is the model's state: the first n keys of a shared, append-only
// array. States that share a prefix share the array; appending a key that is
// not the array's next one copies the prefix (porcupine requires Step to be
// pure; one topic is checked on one goroutine, so the array needs no lock).
type logState struct {
	a *logArray
	n int
}

type logArray struct {
	keys   []Key
	hashes []uint64 // hashes[i]: hash of keys[:i+1]
	pos    map[Key]int
}

var seed = maphash.MakeSeed()

func keyHash(prev uint64, k Key) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var b [8]byte
	for i := range b {
		b[i] = byte(prev >> (8 * i))
	}
	h.Write(b[:])
	h.WriteString(k.Producer)
	for i := range b {
		b[i] = byte(k.Seq >> (8 * i))
	}
	h.Write(b[:])
	return h.Sum64()
}

func (s logState) hash() uint64 {
	if s.n == 0 {
		return 0
	}
	return s.a.hashes[s.n-1]
}

// at returns the offset of k in the log, or -1.
func (s logState) at(k Key) int {
	if i, ok := s.a.pos[k]; ok && i < s.n {
		return i
	}
	return -1
}

func (s logState) append(k Key) logState {
	a := s.a
	switch {
	case len(a.keys) == s.n:
		// The array's end: every other state sharing it sees a shorter
		// prefix, which this does not change.
	case a.keys[s.n] == k:
		return logState{a, s.n + 1}
	default:
		b := &logArray{keys: append([]Key(nil), a.keys[:s.n]...), hashes: append([]uint64(nil), a.hashes[:s.n]...), pos: make(map[Key]int, s.n+1)}
		for i, k := range b.keys {
			b.pos[k] = i
		}
		a = b
	}
	a.keys = append(a.keys, k)
	a.hashes = append(a.hashes, keyHash(s.hash(), k))
	a.pos[k] = s.n
	return logState{a, s.n + 1}
}

// equalKeys reports whether the state is exactly keys, whose hash is h.
func (s logState) equalKeys(keys []Key, h uint64) bool {
	if s.n != len(keys) || s.hash() != h {
		return false
	}
	for i, k := range keys {
		if s.a.keys[i] != k {
			return false
		}
	}
	return true
}

func hashKeys(keys []Key) uint64 {
	var h uint64
	for _, k := range keys {
		h = keyHash(h, k)
	}
	return h
}

// readOut is a read's output with its hash, computed once.
type readOut struct {
	keys []Key
	hash uint64
}

func step(state, input, output any) (bool, any) {
	s := state.(logState)
	switch in := input.(type) {
	case pubIn:
		k := in.p.Key
		cur := s.at(k)
		if in.p.Outcome == OK {
			if cur >= 0 {
				return cur == int(in.p.Offset), s // a retry answered from the de-duplication state
			}
			if int(in.p.Offset) != s.n {
				return false, s // and no append: it would grow the shared array with a key it does not hold
			}
			return true, s.append(k)
		}
		// Unanswered: it may take effect here, but only where the final reads
		// show it (a key's attempts are one operation: Check's publishOp).
		if cur >= 0 {
			return true, s
		}
		if in.at >= 0 && in.at != int64(s.n) {
			return false, s
		}
		return true, s.append(k)
	case readIn:
		out := output.(readOut)
		return s.equalKeys(out.keys, out.hash), s
	}
	panic(fmt.Sprintf("linearize: unknown input %T", input))
}

var model = porcupine.Model{
	Init: func() any { return logState{a: &logArray{pos: map[Key]int{}}} },
	Step: step,
	Equal: func(a, b any) bool {
		x, y := a.(logState), b.(logState)
		if x.n != y.n || x.hash() != y.hash() {
			return false
		}
		return x.a == y.a || x.equalKeys(y.a.keys[:y.n], y.hash())
	},
	Hash: func(s any) uint64 { return s.(logState).hash() },
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case pubIn:
			if in.attempts > 1 {
				return fmt.Sprintf("%s (%d attempts)", describePublish(in.p), in.attempts)
			}
			return describePublish(in.p)
		case readIn:
			return describeRead(in.r)
		}
		return fmt.Sprint(input)
	},
	DescribeState: func(state any) string {
		s := state.(logState)
		return fmt.Sprintf("%d records%s", s.n, tail(s.a.keys[:s.n]))
	},
}

func describePublish(p *Publish) string {
	s := fmt.Sprintf("publish %v via %s", p.Key, p.Node)
	switch p.Outcome {
	case OK:
		s += fmt.Sprintf(" -> ok @%d", p.Offset)
	case Refused:
		s += " -> refused"
	default:
		s += " -> no answer"
	}
	return s + " " + span(p.Call, p.Return, p.Outcome == OK || p.Outcome == Refused)
}

func describeRead(r *Read) string {
	what := "read"
	if r.Final {
		what = "final read"
	}
	return fmt.Sprintf("%s from 0 at %s -> %d records%s %s", what, r.Node, len(r.Keys), tail(r.Keys), span(r.Call, r.Return, true))
}

func span(call, ret int64, answered bool) string {
	if !answered {
		return fmt.Sprintf("[%v..]", time.Duration(call).Round(time.Microsecond))
	}
	return fmt.Sprintf("[%v..%v]", time.Duration(call).Round(time.Microsecond), time.Duration(ret).Round(time.Microsecond))
}

// tail names the last few keys of a log.
func tail(keys []Key) string {
	if len(keys) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" (")
	from := max(0, len(keys)-3)
	if from > 0 {
		b.WriteString("..., ")
	}
	for i := from; i < len(keys); i++ {
		if i > from {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "@%d %v", i, keys[i])
	}
	b.WriteString(")")
	return b.String()
}
