package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// file is one resource's TypeScript source, cut into classes and synthesis functions.
type file struct {
	kind, typeName string
	topClass       string                      // the resource class's body
	topSynth       map[string]synth            // its synthesizeHclAttributes
	classes        map[string]string           // class name -> body
	synths         map[string]map[string]synth // struct name -> its ...ToHclTerraform entries
}

// synth is how cdktf writes one configurable attribute or block.
type synth struct {
	isBlock      bool
	typ, storage string // "simple"/"list"/"set"/"map"/"struct", "string"/"stringList"/"FooList"...
}

// field is one "// name - computed: ..., optional: ..., required: ..." entry of a class.
type field struct {
	name                         string
	computed, optional, required bool
	code                         string // the lines after the comment
}

var (
	classRE   = regexp.MustCompile(`(?m)^export class (\w+) extends ([\w.]+)`)
	funcRE    = regexp.MustCompile(`(?m)^export function (\w+)ToHclTerraform\(`)
	typeRE    = regexp.MustCompile(`tfResourceType = "(\w+)"`)
	synthRE   = regexp.MustCompile(`(?m)^\s+(\w+): \{\n\s+value: [^\n]*\n\s+isBlock: (true|false),\n\s+type: "(\w+)",\n\s+storageClassType: "(\w+)",`)
	fieldRE   = regexp.MustCompile(`// (\w+) - computed: (true|false), optional: (true|false), required: (true|false)\n((?:[^\n]*\n){1,3})`)
	newRefRE  = regexp.MustCompile(`new (cdktf\.)?(\w+)\(this, "\w+"(?:, (true|false))?\)`)
	getAttrRE = regexp.MustCompile(`(cdktf\.Fn\.tolist\()?this\.get(\w*)Attribute\('`)
)

func parseFile(ts string) *file {
	f := &file{classes: map[string]string{}, synths: map[string]map[string]synth{}}
	starts := classRE.FindAllStringSubmatchIndex(ts, -1)
	fstarts := funcRE.FindAllStringSubmatchIndex(ts, -1)
	end := func(from int) int {
		if i := strings.Index(ts[from+1:], "\nexport "); i >= 0 {
			return from + 1 + i
		}
		return len(ts)
	}
	for _, s := range starts {
		name, base := ts[s[2]:s[3]], ts[s[4]:s[5]]
		body := ts[s[0]:end(s[0])]
		f.classes[name] = body
		kind := map[string]string{"cdktf.TerraformResource": "resource", "cdktf.TerraformDataSource": "data", "cdktf.TerraformProvider": "provider"}[base]
		if kind == "" {
			continue
		}
		m := typeRE.FindStringSubmatch(body)
		if m == nil {
			continue
		}
		f.kind, f.typeName, f.topClass = kind, m[1], name
		i := strings.Index(body, "synthesizeHclAttributes()")
		if i < 0 {
			f.kind = ""
			continue
		}
		f.topSynth = parseSynth(body[i:])
	}
	for _, s := range fstarts {
		name := ts[s[2]:s[3]]
		f.synths[strings.ToUpper(name[:1])+name[1:]] = parseSynth(ts[s[0]:end(s[0])])
	}
	return f
}

func parseSynth(body string) map[string]synth {
	out := map[string]synth{}
	for _, m := range synthRE.FindAllStringSubmatch(body, -1) {
		out[m[1]] = synth{isBlock: m[2] == "true", typ: m[3], storage: m[4]}
	}
	return out
}

func parseFields(body string) []field {
	var out []field
	for _, m := range fieldRE.FindAllStringSubmatch(body, -1) {
		out = append(out, field{name: m[1], computed: m[2] == "true", optional: m[3] == "true", required: m[4] == "true", code: m[5]})
	}
	return out
}

// block builds the schema block of a class (the resource, or a struct's OutputReference)
// whose configurable members are synths.
func (f *file) block(class string, synths map[string]synth) (*block, error) {
	body, ok := f.classes[class]
	if !ok {
		return nil, fmt.Errorf("no class %s", class)
	}
	b := &block{Attributes: map[string]*attribute{}, BlockTypes: map[string]*blockType{}}
	fields := parseFields(body)
	seen := map[string]bool{}
	for _, fd := range fields {
		seen[fd.name] = true
		if err := f.member(b, fd, synths); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", class, fd.name, err)
		}
	}
	// Members synthesized but without a comment (provider blocks): optional.
	for name := range synths {
		if !seen[name] {
			if err := f.member(b, field{name: name, optional: true}, synths); err != nil {
				return nil, fmt.Errorf("%s.%s: %w", class, name, err)
			}
		}
	}
	return b, nil
}

func (f *file) member(b *block, fd field, synths map[string]synth) error {
	s, configurable := synths[fd.name]
	if configurable && s.isBlock {
		structName := strings.TrimSuffix(s.storage, "List")
		inner, err := f.structBlock(structName)
		if err != nil {
			return err
		}
		bt := &blockType{Block: inner}
		switch {
		case s.typ == "struct":
			bt.NestingMode = "single"
		case s.typ == "set":
			bt.NestingMode = "set"
		default:
			bt.NestingMode = "list"
			if strings.Contains(fd.code, "OutputReference(") {
				bt.MaxItems = 1
			}
		}
		if fd.required {
			bt.MinItems = 1
		}
		b.BlockTypes[fd.name] = bt
		return nil
	}
	var typ any
	var err error
	if configurable {
		typ, err = f.synthType(s)
	} else {
		typ, err = f.getterType(fd.code)
	}
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(typ)
	a := &attribute{Type: raw, Required: fd.required, Optional: fd.optional, Computed: fd.computed}
	if !a.Required && !a.Optional && !a.Computed {
		a.Optional = true
	}
	if fd.name == "id" && !a.Required {
		a.Optional, a.Computed = true, true
	}
	b.Attributes[fd.name] = a
	return nil
}

func (f *file) structBlock(name string) (*block, error) {
	if _, ok := f.classes[name+"OutputReference"]; ok {
		return f.block(name+"OutputReference", f.synths[name])
	}
	if s, ok := f.synths[name]; ok { // provider blocks: plain interfaces, no output classes
		b := &block{Attributes: map[string]*attribute{}, BlockTypes: map[string]*blockType{}}
		for n := range s {
			if err := f.member(b, field{name: n, optional: true}, s); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("no struct %s", name)
}

var scalar = map[string]any{"string": "string", "number": "number", "boolean": "bool"}

// synthType is the type of a configurable, non-block member.
func (f *file) synthType(s synth) (any, error) {
	if s.typ == "simple" {
		if t, ok := scalar[s.storage]; ok {
			return t, nil
		}
		return "dynamic", nil
	}
	var elem any
	for _, suffix := range []string{"List", "Map"} {
		if base, ok := strings.CutSuffix(s.storage, suffix); ok {
			if t, ok := scalar[base]; ok {
				elem = t
			} else if base == "stringList" || base == "numberList" {
				elem = []any{"list", scalar[strings.TrimSuffix(base, "List")]}
			} else if base == "any" {
				elem = "dynamic"
			} else if obj, err := f.objectType(base); err == nil {
				elem = obj
			} else if obj, err := f.objectType(s.storage); err == nil && s.typ == "map" {
				elem = obj
			} else {
				return nil, err
			}
			break
		}
	}
	if elem == nil {
		if obj, err := f.objectType(s.storage); err == nil {
			if s.typ == "struct" {
				return obj, nil
			}
			elem = obj
		} else {
			return nil, fmt.Errorf("storage %s: %v", s.storage, err)
		}
	}
	switch s.typ {
	case "list", "set", "map":
		return []any{s.typ, elem}, nil
	case "struct":
		return elem, nil
	}
	return nil, fmt.Errorf("unknown type %s/%s", s.typ, s.storage)
}

// getterType is the type of a computed-only member, from how its getter reads it.
func (f *file) getterType(code string) (any, error) {
	if m := newRefRE.FindStringSubmatch(code); m != nil {
		if m[1] != "" { // cdktf.StringMap, cdktf.BooleanMap, ...
			switch m[2] {
			case "StringMap":
				return []any{"map", "string"}, nil
			case "NumberMap":
				return []any{"map", "number"}, nil
			case "BooleanMap":
				return []any{"map", "bool"}, nil
			case "AnyMap":
				return []any{"map", "dynamic"}, nil
			case "StringMapList":
				return []any{"list", []any{"map", "string"}}, nil
			}
			return nil, fmt.Errorf("unknown cdktf type %s", m[2])
		}
		if base, ok := strings.CutSuffix(m[2], "OutputReference"); ok {
			obj, err := f.objectType(base)
			if err != nil {
				return nil, err
			}
			return []any{"list", obj}, nil // SDK computed blocks of one element
		}
		if base, ok := strings.CutSuffix(m[2], "List"); ok {
			obj, err := f.objectType(base)
			if err != nil {
				return nil, err
			}
			if m[3] == "true" {
				return []any{"set", obj}, nil
			}
			return []any{"list", obj}, nil
		}
	}
	if m := getAttrRE.FindStringSubmatch(code); m != nil {
		coll := "list"
		if m[1] != "" {
			coll = "set"
		}
		switch m[2] {
		case "String":
			return "string", nil
		case "Number":
			return "number", nil
		case "Boolean":
			return "bool", nil
		case "List":
			return []any{coll, "string"}, nil
		case "NumberList":
			return []any{coll, "number"}, nil
		case "StringMap":
			return []any{"map", "string"}, nil
		case "NumberMap":
			return []any{"map", "number"}, nil
		case "BooleanMap":
			return []any{"map", "bool"}, nil
		case "Any":
			return "dynamic", nil
		}
		return nil, fmt.Errorf("unknown getter get%sAttribute", m[2])
	}
	if strings.Contains(code, "interpolationForAttribute(") {
		return "dynamic", nil
	}
	return nil, fmt.Errorf("cannot type %q", strings.TrimSpace(code))
}

// objectType is the cty object type of a struct, all of whose attributes are optional.
func (f *file) objectType(name string) (any, error) {
	b, err := f.structBlock(name)
	if err != nil {
		return nil, err
	}
	attrs := map[string]json.RawMessage{}
	var optional []string
	for n, a := range b.Attributes {
		attrs[n] = a.Type
		if !a.Required {
			optional = append(optional, n)
		}
	}
	for n, bt := range b.BlockTypes {
		obj, err := f.objectType(name + camel(n))
		if err != nil {
			return nil, err
		}
		raw, _ := json.Marshal(obj)
		if bt.NestingMode == "single" {
			attrs[n] = raw
		} else {
			raw, _ = json.Marshal([]any{bt.NestingMode, json.RawMessage(raw)})
			attrs[n] = raw
		}
		optional = append(optional, n)
	}
	if len(optional) > 0 {
		sort.Strings(optional)
		return []any{"object", attrs, optional}, nil
	}
	return []any{"object", attrs}, nil
}

func camel(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(s, "_") {
		if p != "" {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	return b.String()
}
