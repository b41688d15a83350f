package routing

import (
	"errors"
	"strings"
	"testing"
)

// FuzzMatch checks Match against the reference matcher, and a one-entry Table
// against both. Neither may panic on any input.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"a.*", "a.b"}, {"a.>", "a"}, {">", "x.y.z"}, {"*.b.>", "a.b.c"},
		{"a..b", "a..b"}, {"a.*", "a.*"}, {"", ""}, {"a.>.b", "a.x.b"},
		{"a.b.>", "a.b"}, {"a.b.>", "a.bc.d"}, {">", "a"}, {"a.>", "ab.c"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, topic string) {
		got := Match(pattern, topic)
		if want := refMatch(pattern, topic); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", pattern, topic, got, want)
		}
		if m, err := NewMatcher(pattern); (err == nil) != refValid(pattern, true) {
			t.Fatalf("NewMatcher(%q) = %v, reference validity %v", pattern, err, refValid(pattern, true))
		} else if refValid(topic, false) && m.Match(topic) != got {
			t.Fatalf("NewMatcher(%q).Match(%q) = %v, Match says %v", pattern, topic, !got, got)
		}
		tab := NewTable[int]()
		if err := tab.Add(pattern, 1); (err == nil) != refValid(pattern, true) {
			t.Fatalf("Table.Add(%q) = %v, reference validity %v", pattern, err, refValid(pattern, true))
		}
		for range 2 { // the second lookup is served from the cache
			if r := tab.Match(topic); (len(r) == 1) != got || len(r) > 1 {
				t.Fatalf("Table{%q}.Match(%q) = %v, Match says %v", pattern, topic, r, got)
			}
		}
		if got && !tab.Remove(pattern, 1) {
			t.Fatalf("Remove(%q) = false after a successful Add", pattern)
		}
		if r := tab.Match(topic); len(r) != 0 {
			t.Fatalf("Match(%q) = %v after removing everything", topic, r)
		}
	})
}

// FuzzValidate checks ValidateTopic and ValidatePattern against the reference
// grammar, the shape of their errors, and that a valid topic matches itself, ">"
// and the generalizations that mask selects: bit i turns token i into "*", and
// bits 32.. choose a cut after which the rest of the topic becomes ">".
func FuzzValidate(f *testing.F) {
	for _, s := range []string{"a", "orders.eu.created", "a..b", "a.*", "a.>", "*", ">", "a b", "caf\u00e9", ""} {
		f.Add(s, uint64(0))
		f.Add(s, uint64(5))
	}
	f.Fuzz(func(t *testing.T, s string, mask uint64) {
		errT, errP := ValidateTopic(s), ValidatePattern(s)
		checkErr(t, s, errT, ErrInvalidTopic, refValid(s, false))
		checkErr(t, s, errP, ErrInvalidPattern, refValid(s, true))
		if errP == nil && IsLiteral(s) && errT != nil {
			t.Fatalf("%q is a literal pattern but not a topic: %v", s, errT)
		}
		if errT != nil {
			return
		}
		if errP != nil || !IsLiteral(s) {
			t.Fatalf("topic %q: ValidatePattern = %v, IsLiteral = %v", s, errP, IsLiteral(s))
		}
		if !Match(s, s) || !Match(">", s) {
			t.Fatalf("topic %q does not match itself or \">\"", s)
		}
		toks := strings.Split(s, ".")
		gen := make([]string, len(toks))
		for i, tok := range toks {
			gen[i] = tok
			if mask&(1<<(i%32)) != 0 {
				gen[i] = "*"
			}
		}
		if cut := int(mask>>32) % (len(toks) + 1); cut < len(toks) {
			gen = append(gen[:cut], ">")
		}
		p := strings.Join(gen, ".")
		if err := ValidatePattern(p); err != nil {
			t.Fatalf("generalization %q of %q: %v", p, s, err)
		}
		if !Match(p, s) {
			t.Fatalf("generalization %q does not match %q", p, s)
		}
		// Changing one literal token of the generalization makes it miss.
		for i, tok := range gen {
			if tok != "*" && tok != ">" {
				gen[i] = tok + "x"
				if q := strings.Join(gen, "."); len(q) <= MaxTopicLen && Match(q, s) {
					t.Fatalf("%q matches %q", q, s)
				}
				break
			}
		}
	})
}

func checkErr(t *testing.T, s string, err, kind error, refOK bool) {
	t.Helper()
	if (err == nil) != refOK {
		t.Fatalf("validating %q: got %v, reference validity %v", s, err, refOK)
	}
	if err == nil {
		return
	}
	var se *SubjectError
	if !errors.As(err, &se) || !errors.Is(err, kind) {
		t.Fatalf("validating %q: %v is not a *SubjectError wrapping %v", s, err, kind)
	}
	if se.Subject != s || se.Pos < 0 || se.Pos > len(s) || se.Reason == "" {
		t.Fatalf("validating %q: bad error fields %+v", s, se)
	}
}
