package config

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
)

// ErrInvalid is wrapped by every *Error: the file was read but has problems.
var ErrInvalid = errors.New("config: invalid file")

// Pos is a position in a file; lines and columns count from 1.
type Pos struct {
	File         string
	Line, Column int
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column) }

// Problem is one thing wrong with a file.
type Problem struct {
	Pos Pos
	Msg string
}

func (p Problem) String() string { return p.Pos.String() + ": " + p.Msg }

// Error lists every problem of a file, in file order.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Setting is one key set by a file, with its value spelt as the key's flag takes it: lists
// joined with commas, numbers in decimal.
type Setting struct {
	Key   Key
	Value string
	Pos   Pos
}

// File is a parsed and checked configuration file.
type File struct {
	Path     string
	Settings []Setting // in file order
}

// Get returns the setting of the key called name, if the file sets it.
func (f *File) Get(name string) (Setting, bool) {
	for _, s := range f.Settings {
		if s.Key.Name == name {
			return s, true
		}
	}
	return Setting{}, false
}

// Require reports, as an *Error, each of the named keys the file does not set.
func (f *File) Require(names ...string) error {
	var probs []Problem
	for _, n := range names {
		if _, ok := f.Get(n); !ok {
			probs = append(probs, Problem{Pos{f.Path, 1, 1}, fmt.Sprintf("%s: required, and not set", n)})
		}
	}
	if probs == nil {
		return nil
	}
	return &Error{probs}
}

// Load reads and parses the file at path. A file that cannot be read is an ordinary error; a
// file with problems is an *Error listing all of them.
func Load(path string) (*File, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, src)
}

// Parse parses src, the content of the file named path (HCL, or HCL's JSON form when path
// ends in ".json"), and checks every value. Secret files it names are read to check them.
func Parse(path string, src []byte) (*File, error) {
	p := &parser{f: &File{Path: path}}
	var file *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(path, ".json") {
		file, diags = hcljson.Parse(src, path)
	} else {
		file, diags = hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	}
	p.diags(diags)
	if file != nil {
		attrs, diags := file.Body.JustAttributes()
		p.diags(diags)
		list := make([]*hcl.Attribute, 0, len(attrs))
		for _, a := range attrs {
			list = append(list, a)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Range.Start.Byte < list[j].Range.Start.Byte })
		for _, a := range list {
			p.attr(a)
		}
		p.crossCheck()
	}
	if len(p.probs) > 0 {
		sort.SliceStable(p.probs, func(i, j int) bool {
			a, b := p.probs[i].Pos, p.probs[j].Pos
			return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
		})
		return nil, &Error{p.probs}
	}
	return p.f, nil
}

type parser struct {
	f     *File
	probs []Problem
}

func (p *parser) bad(r hcl.Range, format string, args ...any) {
	p.probs = append(p.probs, Problem{pos(r), fmt.Sprintf(format, args...)})
}

func pos(r hcl.Range) Pos { return Pos{r.Filename, r.Start.Line, r.Start.Column} }

func (p *parser) diags(ds hcl.Diagnostics) {
	for _, d := range ds {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		r := hcl.Range{Filename: p.f.Path, Start: hcl.InitialPos}
		if d.Subject != nil {
			r = *d.Subject
		}
		p.bad(r, "%s", msg)
	}
}

// attr checks one attribute and records it as a setting when it is good.
func (p *parser) attr(a *hcl.Attribute) {
	k, ok := KeyByName(a.Name)
	if !ok {
		msg := fmt.Sprintf("unknown key %q", a.Name)
		if s := suggest(a.Name); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		p.bad(a.NameRange, "%s", msg)
		return
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		p.diags(diags)
		return
	}
	if v.IsNull() || !v.IsWhollyKnown() {
		p.bad(a.Expr.Range(), "%s: no value", k.Name)
		return
	}
	n0 := len(p.probs)
	var value string
	switch k.Kind {
	case AddrList, Patterns, Tokens:
		value = p.list(k, a.Expr, v)
	case Size, Positive:
		value = p.number(k, a.Expr, v)
	case Bool:
		if v.Type() != cty.Bool {
			p.bad(a.Expr.Range(), "%s: want true or false, got %s", k.Name, v.Type().FriendlyName())
			return
		}
		value = fmt.Sprint(v.True())
	default:
		if v.Type() != cty.String {
			p.bad(a.Expr.Range(), "%s: want a string, got %s", k.Name, v.Type().FriendlyName())
			return
		}
		value = v.AsString()
		if msg := checkScalar(k.Kind, value); msg != "" {
			p.bad(a.Expr.Range(), "%s: %s", k.Name, msg)
		}
	}
	if len(p.probs) == n0 {
		p.f.Settings = append(p.f.Settings, Setting{Key: k, Value: value, Pos: pos(a.NameRange)})
	}
}

func (p *parser) list(k Key, expr hcl.Expression, v cty.Value) string {
	t := v.Type()
	if !t.IsTupleType() && !t.IsListType() && !t.IsSetType() {
		p.bad(expr.Range(), "%s: want a list of strings such as [\"a\", \"b\"], got %s", k.Name, t.FriendlyName())
		return ""
	}
	// Element positions, where the syntax keeps them (native HCL tuples).
	var elems []hclsyntax.Expression
	if tc, ok := expr.(*hclsyntax.TupleConsExpr); ok {
		elems = tc.Exprs
	}
	var out []string
	i := 0
	for it := v.ElementIterator(); it.Next(); i++ {
		_, e := it.Element()
		r := expr.Range()
		if i < len(elems) {
			r = elems[i].Range()
		}
		if e.IsNull() || e.Type() != cty.String {
			p.bad(r, "%s[%d]: want a string, got %s", k.Name, i, e.Type().FriendlyName())
			continue
		}
		s := e.AsString()
		if msg := checkItem(k.Kind, s); msg != "" {
			p.bad(r, "%s[%d]: %s", k.Name, i, msg)
			continue
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func (p *parser) number(k Key, expr hcl.Expression, v cty.Value) string {
	if v.Type() != cty.Number {
		p.bad(expr.Range(), "%s: want a whole number, got %s", k.Name, v.Type().FriendlyName())
		return ""
	}
	n, acc := v.AsBigFloat().Int64()
	if acc != big.Exact {
		p.bad(expr.Range(), "%s: want a whole number, got %s", k.Name, v.AsBigFloat().Text('g', -1))
		return ""
	}
	if msg := checkNumber(k.Kind, n); msg != "" {
		p.bad(expr.Range(), "%s: %s", k.Name, msg)
	}
	return fmt.Sprint(n)
}

// crossCheck reports keys that need another key, or exclude one.
func (p *parser) crossCheck() {
	has := func(n string) (Setting, bool) { return p.f.Get(n) }
	at := func(s Setting) hcl.Range {
		return hcl.Range{Filename: s.Pos.File, Start: hcl.Pos{Line: s.Pos.Line, Column: s.Pos.Column}}
	}
	for _, need := range [][2]string{{"wan", "gossip"}, {"join", "gossip"}, {"wan_join", "wan"}} {
		if s, ok := has(need[0]); ok {
			if _, ok := has(need[1]); !ok {
				p.bad(at(s), "%s needs %s to be set too", need[0], need[1])
			}
		}
	}
	if s, ok := has("gossip_key_file"); ok {
		if _, ok := has("gossip_key"); ok {
			p.bad(at(s), "gossip_key_file and gossip_key: set one of them")
		}
	}
}

// suggest returns the key closest to a misspelt name, if one is close.
func suggest(name string) string {
	best, bestD := "", 3
	for _, k := range Keys {
		if d := distance(name, k.Name); d < bestD {
			best, bestD = k.Name, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
