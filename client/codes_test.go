package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
)

// codeConsts parses the Go files of dir (tests excluded) and returns every constant declared
// with type Code, by name, with its value. A Code constant whose value is not an integer
// literal fails the test, so nothing escapes the comparison.
func codeConsts(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.INT {
						t.Fatalf("%s: Code constant %s is not an integer literal", fset.Position(name.Pos()), name.Name)
					}
					v, err := strconv.ParseUint(lit.Value, 0, 64)
					if err != nil {
						t.Fatal(err)
					}
					out[name.Name] = v
				}
			}
		}
	}
	return out
}

// client.Code and wire.Code stay in step: every wire code has a client constant of the same
// name and number, with the protocol's name as its String, and the client declares no code
// the protocol lacks. A new wire code without a client one fails here.
func TestCodesMatchWire(t *testing.T) {
	wireCodes := codeConsts(t, filepath.Join("..", "internal", "wire"))
	clientCodes := codeConsts(t, ".")
	if len(wireCodes) == 0 {
		t.Fatal("found no wire.Code constants: the parse is wrong")
	}
	for name, v := range wireCodes {
		cv, ok := clientCodes[name]
		switch {
		case !ok:
			t.Errorf("wire.%s = %d has no client.%s", name, v, name)
		case cv != v:
			t.Errorf("client.%s = %d, wire.%s = %d", name, cv, name, v)
		}
		if s := Code(v).String(); s != wire.Code(v).String() || strings.HasPrefix(s, "code ") {
			t.Errorf("Code(%d).String() = %q, wire.Code(%d).String() = %q: want one protocol name (in wire.codeNames)", v, s, v, wire.Code(v).String())
		}
	}
	for name, v := range clientCodes {
		if _, ok := wireCodes[name]; !ok {
			t.Errorf("client.%s = %d is not a protocol code (no wire.%s)", name, v, name)
		}
	}
}
