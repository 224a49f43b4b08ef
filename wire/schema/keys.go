package schema

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// CheckKeys reports the first key of raw, a config as a user wrote it
// (maps, lists of maps for blocks), that the struct out points to does not
// declare, naming its path under path and the keys allowed there. Nomad's
// agent refuses such a key only when it decodes the config with the
// plugin's spec, on the node, once a task is placed; Decode ignores it.
// Keys are checked in sorted order, so the report is stable.
func CheckKeys(raw any, out any, path string) error {
	t := reflect.TypeOf(out)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("schema: CheckKeys needs a pointer to a struct, got %T", out)
	}
	info, err := inspect(t.Elem())
	if err != nil {
		return err
	}
	return checkKeys(info, raw, path)
}

func checkKeys(info *structInfo, raw any, path string) error {
	m, ok := unwrapSingleton(raw).(map[string]any)
	if !ok {
		return nil // not a block: FromValue says what it expected
	}
	byName := map[string]field{}
	allowed := make([]string, 0, len(info.fields))
	for _, f := range info.fields {
		byName[f.name] = f
		allowed = append(allowed, f.name)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := byName[k]
		p := join(path, k)
		if !ok {
			return fmt.Errorf("%s: no such key; allowed in %s: %s", p, orRoot(path), strings.Join(allowed, ", "))
		}
		switch f.kind {
		case kindBlock:
			if err := checkKeys(f.elem, m[k], p); err != nil {
				return err
			}
		case kindBlocks:
			items, err := asList(m[k], p)
			if err != nil {
				return nil // FromValue says what it expected
			}
			for i, item := range items {
				if err := checkKeys(f.elem, item, fmt.Sprintf("%s[%d]", p, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// FromValueAt is FromValue for a config that sits at path in what the
// user wrote, as DecodeAt is for Decode.
func FromValueAt(raw any, out any, path string) error { return fromValueAt(raw, out, path) }
