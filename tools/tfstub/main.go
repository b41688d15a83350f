package main

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

//go:embed schemas/*.json.gz
var schemaFiles embed.FS

func main() {
	name := "aws"
	if strings.Contains(filepath.Base(os.Args[0]), "google") {
		name = "google"
	}
	if len(os.Args) > 1 && os.Args[1] == "-schema" { // debugging: print the decoded schema's size
		p, err := load(name)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d resources, %d data sources\n", name, len(p.resources), len(p.data))
		return
	}
	p, err := load(name)
	if err != nil {
		log.Fatal(err)
	}
	if err := tf6server.Serve("registry.opentofu.org/hashicorp/"+name, func() tfprotov6.ProviderServer { return p }); err != nil {
		log.Fatal(err)
	}
}

// The JSON form of `tofu providers schema -json`.
type jsonAttr struct {
	Type     json.RawMessage `json:"type"`
	Required bool            `json:"required"`
	Optional bool            `json:"optional"`
	Computed bool            `json:"computed"`
}

type jsonBlock struct {
	Attributes map[string]jsonAttr `json:"attributes"`
	BlockTypes map[string]struct {
		NestingMode string    `json:"nesting_mode"`
		Block       jsonBlock `json:"block"`
		MinItems    int64     `json:"min_items"`
		MaxItems    int64     `json:"max_items"`
	} `json:"block_types"`
}

type jsonSchema struct {
	Version int64     `json:"version"`
	Block   jsonBlock `json:"block"`
}

func load(name string) (*provider, error) {
	f, err := schemaFiles.Open("schemas/" + name + ".json.gz")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		return nil, err
	}
	var doc struct {
		ProviderSchemas map[string]struct {
			Provider          jsonSchema            `json:"provider"`
			ResourceSchemas   map[string]jsonSchema `json:"resource_schemas"`
			DataSourceSchemas map[string]jsonSchema `json:"data_source_schemas"`
		} `json:"provider_schemas"`
	}
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("stub: schema %s: %w", name, err)
	}
	p := &provider{resources: map[string]*tfprotov6.Schema{}, data: map[string]*tfprotov6.Schema{}}
	for _, ps := range doc.ProviderSchemas {
		if p.config, err = convert(ps.Provider); err != nil {
			return nil, fmt.Errorf("stub: provider schema: %w", err)
		}
		for n, s := range ps.ResourceSchemas {
			if p.resources[n], err = convert(s); err != nil {
				return nil, fmt.Errorf("stub: %s: %w", n, err)
			}
		}
		for n, s := range ps.DataSourceSchemas {
			if p.data[n], err = convert(s); err != nil {
				return nil, fmt.Errorf("stub: data %s: %w", n, err)
			}
		}
	}
	return p, nil
}

func convert(s jsonSchema) (*tfprotov6.Schema, error) {
	b, err := convertBlock(s.Block)
	return &tfprotov6.Schema{Version: s.Version, Block: b}, err
}

func convertBlock(jb jsonBlock) (*tfprotov6.SchemaBlock, error) {
	b := &tfprotov6.SchemaBlock{}
	for _, n := range sortedKeys(jb.Attributes) {
		a := jb.Attributes[n]
		t, err := tftypes.ParseJSONType(a.Type)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		b.Attributes = append(b.Attributes, &tfprotov6.SchemaAttribute{
			Name: n, Type: strip(t), Required: a.Required, Optional: a.Optional, Computed: a.Computed})
	}
	for _, n := range sortedKeys(jb.BlockTypes) {
		bt := jb.BlockTypes[n]
		inner, err := convertBlock(bt.Block)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		mode := map[string]tfprotov6.SchemaNestedBlockNestingMode{
			"single": tfprotov6.SchemaNestedBlockNestingModeSingle, "list": tfprotov6.SchemaNestedBlockNestingModeList,
			"set": tfprotov6.SchemaNestedBlockNestingModeSet, "map": tfprotov6.SchemaNestedBlockNestingModeMap,
		}[bt.NestingMode]
		b.BlockTypes = append(b.BlockTypes, &tfprotov6.SchemaNestedBlock{
			TypeName: n, Block: inner, Nesting: mode, MinItems: bt.MinItems, MaxItems: bt.MaxItems})
	}
	return b, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// provider is immutable after load, so the plugin server's goroutines share it freely.
type provider struct {
	config    *tfprotov6.Schema
	resources map[string]*tfprotov6.Schema
	data      map[string]*tfprotov6.Schema
}

var _ tfprotov6.ProviderServer = (*provider)(nil)

func errDiag(format string, args ...any) []*tfprotov6.Diagnostic {
	return []*tfprotov6.Diagnostic{{Severity: tfprotov6.DiagnosticSeverityError, Summary: fmt.Sprintf(format, args...)}}
}

// strip drops the optional-attribute markers of object types: they belong to type
// constraints, and values of such types cannot be decoded. Configuration that sets a nested
// object attribute must then give all its keys (stricter than the real provider; the
// modules set none).
func strip(t tftypes.Type) tftypes.Type {
	switch t := t.(type) {
	case tftypes.Object:
		attrs := make(map[string]tftypes.Type, len(t.AttributeTypes))
		for n, a := range t.AttributeTypes {
			attrs[n] = strip(a)
		}
		return tftypes.Object{AttributeTypes: attrs}
	case tftypes.List:
		return tftypes.List{ElementType: strip(t.ElementType)}
	case tftypes.Set:
		return tftypes.Set{ElementType: strip(t.ElementType)}
	case tftypes.Map:
		return tftypes.Map{ElementType: strip(t.ElementType)}
	case tftypes.Tuple:
		elems := make([]tftypes.Type, len(t.ElementTypes))
		for i, e := range t.ElementTypes {
			elems[i] = strip(e)
		}
		return tftypes.Tuple{ElementTypes: elems}
	}
	return t
}
