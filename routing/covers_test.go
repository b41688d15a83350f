package routing

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCovers(t *testing.T) {
	cases := []struct {
		allowed, pattern string
		want             bool
	}{
		{">", "a", true},
		{">", "a.b.c", true},
		{">", ">", true},
		{">", "a.*", true},
		{"a.>", "a.b", true},
		{"a.>", "a.*.c", true},
		{"a.>", "a.>", true},
		{"a.>", "a", false},
		{"a.>", ">", false},
		{"a.>", "b.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a.*", true},
		{"a.*", "a.>", false},
		{"a.*", "a.b.c", false},
		{"a.*", "a", false},
		{"a.b", "a.b", true},
		{"a.b", "a.*", false},
		{"a.b", "a.b.c", false},
		{"*.b", "x.b", true},
		{"*.b", "*.b", true},
		{"*.b", "*.c", false},
		{"a.*.>", "a.b.c.d", true},
		{"a.*.>", "a.b", false},
		{"a..b", "a.b", false}, // invalid grant
		{"a.b", "a..b", false}, // invalid pattern
	}
	for _, c := range cases {
		if got := Covers(c.allowed, c.pattern); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.allowed, c.pattern, got, c.want)
		}
	}
}

// TestCoversAgainstMatch checks Covers against its definition on random subjects over a
// small alphabet: if Covers(a, p), every sampled topic matching p matches a; if not, some
// topic of a small universe matches p and not a (enumerated exhaustively).
func TestCoversAgainstMatch(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	tokens := []string{"a", "b"}
	// Every topic of 1-4 tokens over {a, b, c}: c stands for "any other token".
	var universe []string
	var gen func(prefix []string)
	gen = func(prefix []string) {
		if len(prefix) > 0 {
			universe = append(universe, strings.Join(prefix, "."))
		}
		if len(prefix) == 4 {
			return
		}
		for _, tk := range []string{"a", "b", "c"} {
			gen(append(prefix, tk))
		}
	}
	gen(nil)
	randPattern := func() string {
		n := 1 + r.IntN(3)
		parts := make([]string, n)
		for i := range parts {
			switch x := r.IntN(5); {
			case x == 0:
				parts[i] = "*"
			case x == 1 && i == n-1:
				parts[i] = ">"
			default:
				parts[i] = tokens[r.IntN(len(tokens))]
			}
		}
		return strings.Join(parts, ".")
	}
	for range 20000 {
		a, p := randPattern(), randPattern()
		want := true
		for _, topic := range universe {
			if Match(p, topic) && !Match(a, topic) {
				want = false
				break
			}
		}
		if got := Covers(a, p); got != want {
			t.Fatalf("Covers(%q, %q) = %v, but over every topic of up to 4 tokens the answer is %v", a, p, got, want)
		}
	}
}
