package wiretest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

var durationType = reflect.TypeOf(time.Duration(0))

// ConfigValues turns a decoded config struct (or a pointer to one) back into
// the operator's config as EncodeConfig takes it, following the struct's
// `hcl` tags: a nil slice or map is left out, a block is a map, a block list
// a []map[string]any, a duration its String form, a uint64 beyond int64 a
// json.Number. EncodeConfig(spec, ConfigValues(cfg)) decodes back to cfg;
// fuzz tests use that to check that an accepted config survives a round trip.
func ConfigValues(cfg any) map[string]any {
	v := reflect.ValueOf(cfg)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	return structValues(v)
}

func structValues(v reflect.Value) map[string]any {
	out := map[string]any{}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, ok := t.Field(i).Tag.Lookup("hcl")
		if !ok || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		switch {
		case strings.Contains(","+opts+",", ",block,"):
			out[name] = structValues(fv)
		case strings.Contains(","+opts+",", ",blocks,"):
			items := make([]map[string]any, fv.Len())
			for j := range items {
				items[j] = structValues(fv.Index(j))
			}
			out[name] = items
		default:
			if (fv.Kind() == reflect.Slice || fv.Kind() == reflect.Map) && fv.IsNil() {
				continue
			}
			out[name] = attrValue(fv)
		}
	}
	return out
}

func attrValue(v reflect.Value) any {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return json.Number(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = attrValue(v.Index(i))
		}
		return out
	case reflect.Map:
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			out[it.Key().String()] = attrValue(it.Value())
		}
		return out
	}
	panic(fmt.Sprintf("wiretest.ConfigValues: unsupported type %s", v.Type()))
}
