package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// LayoutsPrefix is where the layout module keeps its history: one
// variable per node (LayoutsPrefix + node ID) in the controller's
// namespace, one item per GPU UUID holding its last LayoutChange as
// JSON. A leader reads it when it starts to lead, so a new leader keeps
// the hysteresis of the one before; `nomad-gpu top` reads the reasons.
// Per node, because a variable holds at most 64 KiB.
const LayoutsPrefix = "nomad-gpu/layouts/"

// LoadLayoutHistory reads every node's history, by LayoutKey.
func LoadLayoutHistory(ctx context.Context, c *api.Client, namespace string) (map[string]LayoutChange, error) {
	q := (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
	metas, _, err := c.Variables().PrefixList(LayoutsPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("listing %s*: %w", LayoutsPrefix, err)
	}
	out := map[string]LayoutChange{}
	for _, m := range metas {
		v, _, err := c.Variables().Read(m.Path, q)
		if nomadview.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", m.Path, err)
		}
		node := strings.TrimPrefix(m.Path, LayoutsPrefix)
		for uuid, item := range v.Items {
			var lc LayoutChange
			if err := json.Unmarshal([]byte(item), &lc); err != nil {
				return nil, fmt.Errorf("%s: item %q: %v", m.Path, uuid, err)
			}
			out[LayoutKey(node, uuid)] = lc
		}
	}
	return out, nil
}

// putLayoutHistory writes the history of one node's GPUs, whole (the
// leader is the one writer).
func putLayoutHistory(ctx context.Context, c *api.Client, namespace, node string, changes map[string]LayoutChange) error {
	items := api.VariableItems{}
	for _, uuid := range slices.Sorted(maps.Keys(changes)) {
		b, err := json.Marshal(changes[uuid])
		if err != nil {
			return err
		}
		items[uuid] = string(b)
	}
	v := &api.Variable{Namespace: namespace, Path: LayoutsPrefix + node, Items: items}
	if _, _, err := c.Variables().Update(v, (&api.WriteOptions{Namespace: namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("writing %s: %w", v.Path, err)
	}
	return nil
}
