package controller

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// The leader's own variables (the gangs' status, the move history, the
// queues' use) are each one Nomad variable in the controller's namespace
// whose items hold JSON, written whole by the one leader and read back by
// the next leader or by people: readItems and writeItems are how.

// readItems reads variable path in namespace and decodes each item named
// in into from its JSON into the pointer given; found is false when the
// variable is missing. An item absent or empty leaves its pointer as it
// is.
func readItems(ctx context.Context, c *api.Client, namespace, path string, into map[string]any) (found bool, err error) {
	v, _, err := c.Variables().Read(path, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
	if nomadview.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	for item, ptr := range into {
		if raw := v.Items[item]; raw != "" {
			if err := json.Unmarshal([]byte(raw), ptr); err != nil {
				return true, fmt.Errorf("%s: item %q: %v", path, item, err)
			}
		}
	}
	return true, nil
}

// writeItems writes variable path in namespace whole: each item the JSON
// of its value.
func writeItems(ctx context.Context, c *api.Client, namespace, path string, values map[string]any) error {
	items := api.VariableItems{}
	for item, value := range values {
		b, err := json.Marshal(value)
		if err != nil {
			return err
		}
		items[item] = string(b)
	}
	v := &api.Variable{Namespace: namespace, Path: path, Items: items}
	if _, _, err := c.Variables().Update(v, (&api.WriteOptions{Namespace: namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
