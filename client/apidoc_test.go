package client_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// The SDK's API (what `go doc -all ./client` shows) names no measurement aid: the
// shared-stream ablation lives in bench/sharedstream, for the bench module only.
func TestAPINamesNoAblation(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	p := doc.New(pkgs["client"], "github.com/quicmq/quicmq/client", 0)
	bad := regexp.MustCompile(`(?i)ablation|shared`)
	var names []string
	fields := func(spec ast.Expr) {
		st, ok := spec.(*ast.StructType)
		if !ok {
			return
		}
		for _, f := range st.Fields.List {
			for _, n := range f.Names {
				if n.IsExported() {
					names = append(names, n.Name)
				}
			}
		}
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			names = append(names, v.Names...)
		}
	}
	values(p.Consts)
	values(p.Vars)
	for _, f := range p.Funcs {
		names = append(names, f.Name)
	}
	for _, ty := range p.Types {
		names = append(names, ty.Name)
		fields(ty.Decl.Specs[0].(*ast.TypeSpec).Type)
		values(ty.Consts)
		values(ty.Vars)
		for _, f := range append(ty.Funcs, ty.Methods...) {
			names = append(names, f.Name)
		}
	}
	if len(names) < 20 {
		t.Fatalf("found only %d exported identifiers: %v", len(names), names)
	}
	for _, n := range names {
		if bad.MatchString(n) {
			t.Errorf("exported identifier %s names a measurement aid", n)
		}
	}
}
