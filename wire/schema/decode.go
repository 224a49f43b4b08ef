package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Decode fills the config struct that out points to from the msgpack the
// agent sends. The agent encodes the config as hcldec leaves it: every key
// of the spec present, absent attributes nil, absent block lists empty,
// integers in their smallest msgpack code and numbers that are no exact
// float64 as decimal strings. Decode tolerates all of that plus an empty
// payload (all defaults) and blocks as a map or a one-element list of maps
// (HCL1's form). Absent values take their `default` tag. Errors name the
// key path, e.g. `sim.mig[1].gpus[0]`.
//
// The payload is untrusted: CheckMsgpack vets it before the msgpack library
// sees it, so no length in it can make Decode allocate more than a small
// multiple of its size, and no nesting can exhaust the stack.
func Decode(data []byte, out any) error { return DecodeAt(data, out, "") }

// DecodeAt is Decode for a config that sits at path in what the user
// wrote, so its errors name the key from there: a task driver's config is
// the jobspec's `config` block, and an error reads
// `config.checkpoint[0].commit_timeout: …`.
func DecodeAt(data []byte, out any, path string) error {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("schema: Decode needs a pointer to a struct, got %T", out)
	}
	var raw any
	if len(data) > 0 {
		if err := CheckMsgpack(data); err != nil {
			return fmt.Errorf("%s is not valid msgpack: %w", orRoot(path), err)
		}
		if err := msgpack.Unmarshal(data, &raw); err != nil {
			return fmt.Errorf("%s is not valid msgpack: %w", orRoot(path), err)
		}
	}
	return fromValueAt(raw, out, path)
}

func fromValueAt(raw any, out any, path string) error {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("schema: FromValue needs a pointer to a struct, got %T", out)
	}
	info, err := inspect(rv.Elem().Type())
	if err != nil {
		return err
	}
	return decodeStruct(info, raw, rv.Elem(), path)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func decodeStruct(info *structInfo, raw any, dst reflect.Value, path string) error {
	raw = unwrapSingleton(raw)
	var m map[string]any
	switch v := raw.(type) {
	case nil:
	case map[string]any:
		m = v
	default:
		return fmt.Errorf("%s: expected a block, got %s", orRoot(path), describe(raw))
	}
	for _, f := range info.fields {
		p := join(path, f.name)
		val := m[f.name]
		fv := dst.Field(f.index)
		switch f.kind {
		case kindBlock:
			if err := decodeStruct(f.elem, val, fv, p); err != nil {
				return err
			}
			continue
		case kindBlocks:
			items, err := asList(val, p)
			if err != nil {
				return err
			}
			out := reflect.MakeSlice(fv.Type(), len(items), len(items))
			for i, item := range items {
				if err := decodeStruct(f.elem, item, out.Index(i), fmt.Sprintf("%s[%d]", p, i)); err != nil {
					return err
				}
			}
			fv.Set(out)
			continue
		}
		if val == nil {
			if f.required {
				return fmt.Errorf("%s: required, but not set", p)
			}
			if f.hasDef {
				dv, err := defaultValue(fv.Type(), f.def)
				if err != nil {
					return fmt.Errorf("%s: bad default: %w", p, err)
				}
				fv.Set(dv)
			}
			continue
		}
		if err := assign(fv, val, p); err != nil {
			return err
		}
	}
	return nil
}

func orRoot(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

// unwrapSingleton undoes HCL1's habit of turning one nested block into a
// list holding one map.
func unwrapSingleton(raw any) any {
	if l, ok := raw.([]any); ok && len(l) == 1 {
		if _, isMap := l[0].(map[string]any); isMap {
			return l[0]
		}
	}
	return raw
}

func asList(raw any, path string) ([]any, error) {
	switch v := raw.(type) {
	case nil:
		return nil, nil
	case []any:
		return v, nil
	case map[string]any:
		return []any{v}, nil
	}
	return nil, fmt.Errorf("%s: expected a list, got %s", path, describe(raw))
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case map[string]any:
		return "a block/map"
	case []any:
		return "a list"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%v", v)
}

func assign(dst reflect.Value, raw any, path string) error {
	t := dst.Type()
	if t == durationType {
		s, ok := raw.(string)
		if !ok {
			return fmt.Errorf("%s: expected a duration such as \"30s\" or \"5m\", got %s", path, describe(raw))
		}
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration; use a number with a unit such as \"500ms\", \"30s\" or \"5m\"", path, s)
		}
		dst.SetInt(int64(d))
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		switch v := raw.(type) {
		case string:
			dst.SetString(v)
		case bool:
			dst.SetString(strconv.FormatBool(v))
		default:
			// hcl converts numbers to strings for string-typed attributes,
			// but be lenient with a number that arrives unconverted.
			r, ok := toRat(raw)
			if !ok {
				return fmt.Errorf("%s: expected a string, got %s", path, describe(raw))
			}
			dst.SetString(r.RatString())
		}
		return nil
	case reflect.Bool:
		switch v := raw.(type) {
		case bool:
			dst.SetBool(v)
			return nil
		case string:
			b, err := strconv.ParseBool(v)
			if err == nil {
				dst.SetBool(b)
				return nil
			}
		}
		return fmt.Errorf("%s: expected true or false, got %s", path, describe(raw))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		r, ok := toRat(raw)
		if !ok || !r.IsInt() {
			return fmt.Errorf("%s: expected a whole number, got %s", path, describe(raw))
		}
		n := r.Num()
		if !n.IsInt64() || dst.OverflowInt(n.Int64()) {
			return fmt.Errorf("%s: %s is out of range", path, n)
		}
		dst.SetInt(n.Int64())
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		r, ok := toRat(raw)
		if !ok || !r.IsInt() {
			return fmt.Errorf("%s: expected a whole number, got %s", path, describe(raw))
		}
		n := r.Num()
		if n.Sign() < 0 {
			return fmt.Errorf("%s: must not be negative, got %s", path, n)
		}
		if !n.IsUint64() || dst.OverflowUint(n.Uint64()) {
			return fmt.Errorf("%s: %s is out of range", path, n)
		}
		dst.SetUint(n.Uint64())
		return nil
	case reflect.Float32, reflect.Float64:
		if f, ok := raw.(float64); ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
			if dst.OverflowFloat(f) {
				return fmt.Errorf("%s: %v is out of range", path, f)
			}
			dst.SetFloat(f)
			return nil
		}
		r, ok := toRat(raw)
		if !ok {
			return fmt.Errorf("%s: expected a number, got %s", path, describe(raw))
		}
		f, _ := r.Float64()
		if math.IsInf(f, 0) || dst.OverflowFloat(f) {
			return fmt.Errorf("%s: %s is out of range", path, r.FloatString(6))
		}
		dst.SetFloat(f)
		return nil
	case reflect.Slice:
		items, ok := raw.([]any)
		if !ok {
			return fmt.Errorf("%s: expected a list, got %s", path, describe(raw))
		}
		out := reflect.MakeSlice(t, len(items), len(items))
		for i, item := range items {
			if item == nil {
				return fmt.Errorf("%s[%d]: must not be null", path, i)
			}
			if err := assign(out.Index(i), item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		dst.Set(out)
		return nil
	case reflect.Map:
		raw = unwrapSingleton(raw)
		m, ok := raw.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: expected a map, got %s", path, describe(raw))
		}
		out := reflect.MakeMapWithSize(t, len(m))
		for k, item := range m {
			ev := reflect.New(t.Elem()).Elem()
			if err := assign(ev, item, fmt.Sprintf("%s[%q]", path, k)); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
		}
		dst.Set(out)
		return nil
	}
	return fmt.Errorf("%s: cannot decode into %s", path, t)
}

// toRat reads any msgpack number, or a decimal string (how the agent sends
// numbers that are not exact float64s, e.g. "0.1" or "1e30"), exactly.
func toRat(raw any) (*big.Rat, bool) {
	r := new(big.Rat)
	switch v := raw.(type) {
	case int8:
		return r.SetInt64(int64(v)), true
	case int16:
		return r.SetInt64(int64(v)), true
	case int32:
		return r.SetInt64(int64(v)), true
	case int64:
		return r.SetInt64(v), true
	case int:
		return r.SetInt64(int64(v)), true
	case uint8:
		return r.SetUint64(uint64(v)), true
	case uint16:
		return r.SetUint64(uint64(v)), true
	case uint32:
		return r.SetUint64(uint64(v)), true
	case uint64:
		return r.SetUint64(v), true
	case uint:
		return r.SetUint64(uint64(v)), true
	case float32:
		if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			return nil, false
		}
		return r.SetFloat64(float64(v)), true
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, false
		}
		return r.SetFloat64(v), true
	case string:
		if _, ok := r.SetString(strings.TrimSpace(v)); ok {
			return r, true
		}
	}
	return nil, false
}

func defaultValue(t reflect.Type, def string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	if t == durationType || t.Kind() == reflect.String {
		return v, assign(v, def, "default")
	}
	var raw any
	dec := json.NewDecoder(strings.NewReader(def))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return v, err
	}
	return v, assign(v, normalizeJSON(raw), "default")
}

func normalizeJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		return x.String()
	case []any:
		for i := range x {
			x[i] = normalizeJSON(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeJSON(x[k])
		}
	}
	return v
}
