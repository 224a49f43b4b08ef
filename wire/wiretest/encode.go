// Package wiretest helps tests speak to built plugin binaries as the Nomad
// agent does.
package wiretest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	hclspecpb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/hclspec"
)

// EncodeConfig encodes an operator's config the way the agent does after
// hcldec: every key of the spec present,
// keys sorted, absent attributes nil (or their default), absent block lists
// empty, integers in their smallest msgpack form, numbers that are not exact
// float64s as decimal strings. Unknown keys are an error, as in the agent.
func EncodeConfig(spec *hclspecpb.Spec, cfg map[string]any) ([]byte, error) {
	v, err := encodeObject(spec.GetObject(), cfg, "")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// orderedMap marshals with sorted keys, as go-cty does.
type orderedMap map[string]any

func (m orderedMap) EncodeMsgpack(enc *msgpack.Encoder) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := enc.EncodeMapLen(len(keys)); err != nil {
		return err
	}
	for _, k := range keys {
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.Encode(m[k]); err != nil {
			return err
		}
	}
	return nil
}

func encodeObject(obj *hclspecpb.Object, in map[string]any, path string) (orderedMap, error) {
	out := orderedMap{}
	for k := range in {
		if _, ok := obj.GetAttributes()[k]; !ok {
			return nil, fmt.Errorf("%s%s: Extraneous JSON object property", path, k)
		}
	}
	for key, s := range obj.GetAttributes() {
		v, err := encodeSpec(s, in[key], in[key] != nil, path+key)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
	return out, nil
}

func encodeSpec(s *hclspecpb.Spec, val any, present bool, path string) (any, error) {
	switch b := s.GetBlock().(type) {
	case *hclspecpb.Spec_Attr:
		if !present {
			if b.Attr.GetRequired() {
				return nil, fmt.Errorf("%s: Missing required argument", path)
			}
			return nil, nil
		}
		return encodeValue(val, b.Attr.GetType(), path)
	case *hclspecpb.Spec_Default:
		if present {
			return encodeSpec(b.Default.GetPrimary(), val, true, path)
		}
		lit := b.Default.GetDefault().GetLiteral().GetValue()
		var dv any
		dec := json.NewDecoder(strings.NewReader(lit))
		dec.UseNumber()
		if err := dec.Decode(&dv); err != nil {
			return nil, fmt.Errorf("%s: default %q: %v", path, lit, err)
		}
		return encodeSpec(b.Default.GetPrimary(), dv, true, path)
	case *hclspecpb.Spec_BlockValue:
		if !present {
			return nil, nil
		}
		m, ok := val.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: a block must be a map", path)
		}
		return encodeObject(b.BlockValue.GetNested().GetObject(), m, path+".")
	case *hclspecpb.Spec_BlockList:
		items, _ := val.([]map[string]any)
		out := make([]any, 0, len(items))
		for i, it := range items {
			v, err := encodeObject(b.BlockList.GetNested().GetObject(), it, fmt.Sprintf("%s[%d].", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: spec kind %T not supported by this encoder", path, s.GetBlock())
}

func encodeValue(val any, typ, path string) (any, error) {
	switch {
	case typ == "string":
		switch v := val.(type) {
		case string:
			return v, nil
		case json.Number:
			return v.String(), nil
		case int, int64, float64, bool:
			return fmt.Sprint(v), nil
		}
		return nil, fmt.Errorf("%s: Incorrect attribute value type; string required", path)
	case typ == "bool":
		if b, ok := val.(bool); ok {
			return b, nil
		}
		return nil, fmt.Errorf("%s: bool required", path)
	case typ == "number":
		return encodeNumber(val, path)
	case strings.HasPrefix(typ, "list(") || strings.HasPrefix(typ, "set("):
		elem := typ[strings.Index(typ, "(")+1 : len(typ)-1]
		var items []any
		switch v := val.(type) {
		case []any:
			items = v
		case []string:
			for _, s := range v {
				items = append(items, s)
			}
		case []int:
			for _, n := range v {
				items = append(items, n)
			}
		default:
			return nil, fmt.Errorf("%s: list required", path)
		}
		out := make([]any, len(items))
		for i, it := range items {
			e, err := encodeValue(it, elem, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case strings.HasPrefix(typ, "map("):
		elem := typ[4 : len(typ)-1]
		m, ok := val.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: map required", path)
		}
		out := orderedMap{}
		for k, v := range m {
			e, err := encodeValue(v, elem, path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = e
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: type %q not supported by this encoder", path, typ)
}

func encodeNumber(val any, path string) (any, error) {
	r := new(big.Rat)
	switch v := val.(type) {
	case int:
		r.SetInt64(int64(v))
	case int64:
		r.SetInt64(v)
	case float64:
		r.SetFloat64(v)
	case json.Number:
		if _, ok := r.SetString(v.String()); !ok {
			return nil, fmt.Errorf("%s: number required", path)
		}
	case string:
		if _, ok := r.SetString(v); !ok {
			return nil, fmt.Errorf("%s: a number is required", path)
		}
	default:
		return nil, fmt.Errorf("%s: number required", path)
	}
	if r.IsInt() && r.Num().IsInt64() {
		n := r.Num().Int64()
		if n >= 0 {
			return uint64(n), nil // msgpack picks the smallest unsigned code, like cty
		}
		return n, nil
	}
	if f, exact := r.Float64(); exact && !math.IsInf(f, 0) {
		return f, nil
	}
	if s, ok := val.(string); ok {
		return s, nil
	}
	if n, ok := val.(json.Number); ok {
		return n.String(), nil
	}
	return r.FloatString(20), nil
}
