// Package schema declares a plugin's configuration once, as a tagged Go
// struct, and derives from it both the hclspec the agent validates against
// and the decoder for the msgpack the agent sends back.
//
// Field tags:
//
//	hcl:"name"            an attribute; its HCL type follows from the Go type
//	hcl:"name,required"   an attribute the operator must set
//	hcl:"name,block"      a struct field: an optional nested block
//	hcl:"name,blocks"     a slice-of-struct field: a repeatable block
//	default:"…"           the value when absent: raw text for string and
//	                      time.Duration fields, HCL/JSON literal otherwise
//
// Go type → HCL type: string, time.Duration → string; bool → bool; ints,
// uints, floats → number; []T → list(T); map[string]T → map(T).
package schema

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	hclspecpb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/hclspec"
)

var durationType = reflect.TypeOf(time.Duration(0))

type fieldKind int

const (
	kindAttr fieldKind = iota
	kindBlock
	kindBlocks
)

type field struct {
	index    int
	name     string
	kind     fieldKind
	required bool
	def      string
	hasDef   bool
	hclType  string
	elem     *structInfo // for blocks
}

type structInfo struct {
	typ    reflect.Type
	fields []field
}

var cache sync.Map // reflect.Type → *structInfo

func inspect(t reflect.Type) (*structInfo, error) {
	if v, ok := cache.Load(t); ok {
		return v.(*structInfo), nil
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("schema: %s is not a struct", t)
	}
	info := &structInfo{typ: t}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("hcl")
		if !ok || tag == "-" {
			continue
		}
		parts := strings.Split(tag, ",")
		f := field{index: i, name: parts[0]}
		for _, opt := range parts[1:] {
			switch opt {
			case "required":
				f.required = true
			case "block":
				f.kind = kindBlock
			case "blocks":
				f.kind = kindBlocks
			default:
				return nil, fmt.Errorf("schema: %s.%s: unknown tag option %q", t, sf.Name, opt)
			}
		}
		f.def, f.hasDef = sf.Tag.Lookup("default")
		var err error
		switch f.kind {
		case kindAttr:
			f.hclType, err = hclType(sf.Type)
		case kindBlock:
			if sf.Type.Kind() != reflect.Struct {
				err = fmt.Errorf("block field must be a struct")
			} else {
				f.elem, err = inspect(sf.Type)
			}
		case kindBlocks:
			if sf.Type.Kind() != reflect.Slice || sf.Type.Elem().Kind() != reflect.Struct {
				err = fmt.Errorf("blocks field must be a slice of structs")
			} else {
				f.elem, err = inspect(sf.Type.Elem())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("schema: %s.%s: %w", t, sf.Name, err)
		}
		if f.hasDef {
			// Validate the default once, at declaration, so a bad tag is a
			// programming error found by tests rather than at an operator's agent.
			if _, err := defaultValue(sf.Type, f.def); err != nil {
				return nil, fmt.Errorf("schema: %s.%s: bad default %q: %w", t, sf.Name, f.def, err)
			}
		}
		info.fields = append(info.fields, f)
	}
	cache.Store(t, info)
	return info, nil
}

func hclType(t reflect.Type) (string, error) {
	if t == durationType {
		return "string", nil
	}
	switch t.Kind() {
	case reflect.String:
		return "string", nil
	case reflect.Bool:
		return "bool", nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number", nil
	case reflect.Slice:
		e, err := hclType(t.Elem())
		if err != nil {
			return "", err
		}
		return "list(" + e + ")", nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return "", fmt.Errorf("map keys must be strings")
		}
		e, err := hclType(t.Elem())
		if err != nil {
			return "", err
		}
		return "map(" + e + ")", nil
	}
	return "", fmt.Errorf("unsupported type %s", t)
}

// Spec returns the hclspec for the config struct that v points to (or is).
func Spec(v any) (*hclspecpb.Spec, error) {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	info, err := inspect(t)
	if err != nil {
		return nil, err
	}
	return objectSpec(info), nil
}

func objectSpec(info *structInfo) *hclspecpb.Spec {
	attrs := make(map[string]*hclspecpb.Spec, len(info.fields))
	for _, f := range info.fields {
		attrs[f.name] = fieldSpec(f)
	}
	return &hclspecpb.Spec{Block: &hclspecpb.Spec_Object{Object: &hclspecpb.Object{Attributes: attrs}}}
}

func fieldSpec(f field) *hclspecpb.Spec {
	switch f.kind {
	case kindBlock:
		return &hclspecpb.Spec{Block: &hclspecpb.Spec_BlockValue{BlockValue: &hclspecpb.Block{
			Name: f.name, Required: f.required, Nested: objectSpec(f.elem)}}}
	case kindBlocks:
		return &hclspecpb.Spec{Block: &hclspecpb.Spec_BlockList{BlockList: &hclspecpb.BlockList{
			Name: f.name, Nested: objectSpec(f.elem)}}}
	}
	// The name is always set explicitly: inside a Default the agent does not
	// derive it from the object key.
	attr := &hclspecpb.Spec{Block: &hclspecpb.Spec_Attr{Attr: &hclspecpb.Attr{
		Name: f.name, Type: f.hclType, Required: f.required}}}
	if !f.hasDef {
		return attr
	}
	lit := f.def
	if f.hclType == "string" {
		lit = hclQuote(f.def)
	}
	return &hclspecpb.Spec{Block: &hclspecpb.Spec_Default{Default: &hclspecpb.Default{
		Primary: attr,
		Default: &hclspecpb.Spec{Block: &hclspecpb.Spec_Literal{Literal: &hclspecpb.Literal{Value: lit}}},
	}}}
}

// hclQuote writes s as an HCL quoted template that evaluates back to s.
func hclQuote(s string) string {
	q := strconv.Quote(s)
	q = strings.ReplaceAll(q, "${", "$${")
	return strings.ReplaceAll(q, "%{", "%%{")
}
