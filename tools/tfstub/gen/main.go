// Command gen rebuilds provider schemas, in the JSON form `tofu providers schema -json` prints,
// from the npm packages that CDK for Terraform generated from the real providers
// (@cdktf/provider-aws, @cdktf/provider-google). Each resource's TypeScript source, kept in
// the package's source maps, states per attribute "computed/optional/required" and how it
// is synthesized (attribute or block, list/set/map, element type); that is the provider's
// schema, minus value validation.
//
//	npm pack @cdktf/provider-aws@21.22.1 @cdktf/provider-google@16.12.1   # AWS 6.25.0, Google 6.50.0
//	go run ./gen -pkg cdktf-provider-aws-21.22.1.tgz -provider aws -out schemas/aws.json.gz
//	go run ./gen -pkg cdktf-provider-google-16.12.1.tgz -provider google -out schemas/google.json.gz
//
// Type names after the flags (aws_instance, data.aws_ami) limit the output to those; with
// none it converts every resource and data source it can and logs the few it skips (those
// whose TypeScript it cannot type: 9 of 2211 for AWS, 3 of 1469 for Google).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"sort"
	"strings"
)

type attribute struct {
	Type     json.RawMessage `json:"type"`
	Required bool            `json:"required,omitempty"`
	Optional bool            `json:"optional,omitempty"`
	Computed bool            `json:"computed,omitempty"`
}

type block struct {
	Attributes map[string]*attribute `json:"attributes,omitempty"`
	BlockTypes map[string]*blockType `json:"block_types,omitempty"`
}

type blockType struct {
	NestingMode string `json:"nesting_mode"`
	Block       *block `json:"block"`
	MinItems    int    `json:"min_items,omitempty"`
	MaxItems    int    `json:"max_items,omitempty"`
}

type schema struct {
	Version int    `json:"version"`
	Block   *block `json:"block"`
}

type providerSchema struct {
	Provider          *schema            `json:"provider"`
	ResourceSchemas   map[string]*schema `json:"resource_schemas"`
	DataSourceSchemas map[string]*schema `json:"data_source_schemas"`
}

type output struct {
	FormatVersion   string                     `json:"format_version"`
	ProviderSchemas map[string]*providerSchema `json:"provider_schemas"`
}

func main() {
	pkg := flag.String("pkg", "", "the npm package tarball (npm pack @cdktf/provider-aws@21.22.1)")
	provider := flag.String("provider", "aws", "provider name (aws, google)")
	out := flag.String("out", "", "output file (default stdout)")
	flag.Parse()
	sources, err := readSources(*pkg)
	if err != nil {
		log.Fatal(err)
	}
	want := map[string]bool{}
	for _, a := range flag.Args() {
		want[a] = true
	}
	ps := &providerSchema{ResourceSchemas: map[string]*schema{}, DataSourceSchemas: map[string]*schema{}}
	var failed []string
	for dir, ts := range sources {
		f := parseFile(ts)
		if f.kind == "" {
			continue
		}
		name := f.typeName
		if f.kind == "data" {
			name = "data." + name
		}
		if len(want) > 0 && !want[name] && f.kind != "provider" {
			continue
		}
		b, err := f.block(f.topClass, f.topSynth)
		if err == nil {
			err = checkBlock(b, false)
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%s): %v", name, dir, err))
			continue
		}
		switch f.kind {
		case "provider":
			ps.Provider = &schema{Block: b}
		case "data":
			ps.DataSourceSchemas[f.typeName] = &schema{Block: b}
		default:
			ps.ResourceSchemas[f.typeName] = &schema{Block: b}
		}
		delete(want, name)
	}
	sort.Strings(failed)
	for _, f := range failed {
		log.Printf("skipped %s", f)
	}
	if len(want) > 0 {
		log.Fatalf("not found or failed: %v", keys(want))
	}
	o := output{FormatVersion: "1.0", ProviderSchemas: map[string]*providerSchema{
		"registry.opentofu.org/hashicorp/" + *provider: ps}}
	data, _ := json.MarshalIndent(o, "", " ")
	if *out == "" {
		os.Stdout.Write(data)
		return
	}
	data = append(data, '\n')
	if strings.HasSuffix(*out, ".gz") {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(data)
		zw.Close()
		data = buf.Bytes()
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("%s: %d resources, %d data sources, %d skipped", *out, len(ps.ResourceSchemas), len(ps.DataSourceSchemas), len(failed))
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var sourceMapRE = regexp.MustCompile(`sourceMappingURL=data:application/json;base64,(\S+)`)

// readSources returns the TypeScript source of each package/lib/*/index.js, by directory.
func readSources(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		parts := strings.Split(h.Name, "/")
		if len(parts) != 4 || parts[1] != "lib" || parts[3] != "index.js" {
			continue
		}
		js, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		m := sourceMapRE.FindSubmatch(js)
		if m == nil {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(string(m[1]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
		var sm struct {
			SourcesContent []string `json:"sourcesContent"`
		}
		if err := json.Unmarshal(raw, &sm); err != nil || len(sm.SourcesContent) == 0 {
			return nil, fmt.Errorf("%s: bad source map: %v", h.Name, err)
		}
		out[parts[2]] = sm.SourcesContent[0]
	}
}

// checkBlock refuses what Terraform refuses in a provider schema, so that one resource the
// conversion got wrong is skipped rather than making the whole provider invalid.
func checkBlock(b *block, inSet bool) error {
	for n, a := range b.Attributes {
		if inSet && strings.Contains(string(a.Type), "dynamic") {
			return fmt.Errorf("%s: a dynamic attribute inside a set block", n)
		}
	}
	for n, bt := range b.BlockTypes {
		if err := checkBlock(bt.Block, inSet || bt.NestingMode == "set"); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}
