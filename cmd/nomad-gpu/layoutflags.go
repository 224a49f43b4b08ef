package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/controller/layoutplan"
)

// layoutFlags are the controller's layout module flags. Per-pool values
// are "pool=value,…"; the pool "*" is every pool not named.
type layoutFlags struct {
	on          bool
	minInterval time.Duration
	kinds       string
	minWhole    string
	shares      string
	never       string
}

func (l *layoutFlags) add(fs *flag.FlagSet) {
	fs.BoolVar(&l.on, "layouts", true, "relay free GPUs as the queue needs (whole, MPS shares, MIG geometries) through node metadata nomad_gpu.layout.<GPU-UUID>; device plugins with layout { enabled = true } apply them")
	fs.DurationVar(&l.minInterval, "layout-min-interval", 5*time.Minute, "least time between two changes of one GPU's layout, unless a queue no other GPU can serve waits")
	fs.StringVar(&l.kinds, "layout-kinds", "", `layouts the planner may make, by node pool: "*=whole+mps,inference=whole+mps+mig" (all where unset)`)
	fs.StringVar(&l.minWhole, "layout-min-whole", "", `fewest GPUs per node left whole, by node pool: "training=4"`)
	fs.StringVar(&l.shares, "layout-shares", "", fmt.Sprintf(`MPS shares of a GPU the planner splits, by node pool: "*=8" (2 to %d; default %d)`, gpulayout.MaxShares, gpulayout.DefaultShares))
	fs.StringVar(&l.never, "layout-never", "", "GPU- UUIDs, comma-separated, the planner never relays")
}

// bounds checks the flags; nil when -layouts=false.
func (l *layoutFlags) bounds() (*layoutplan.Bounds, error) {
	if !l.on {
		return nil, nil
	}
	if l.minInterval < 0 {
		return nil, fmt.Errorf("-layout-min-interval: %s; allowed: 0 or more", l.minInterval)
	}
	kinds, err := poolValues("-layout-kinds", l.kinds, "whole+mps", parseKinds)
	if err != nil {
		return nil, err
	}
	minWhole, err := poolValues("-layout-min-whole", l.minWhole, "4", countParser(0, 1<<16, "a GPU count of 0 or more"))
	if err != nil {
		return nil, err
	}
	shares, err := poolValues("-layout-shares", l.shares, "8", countParser(2, gpulayout.MaxShares, fmt.Sprintf("a share count of 2 to %d", gpulayout.MaxShares)))
	if err != nil {
		return nil, err
	}
	never, err := neverUUIDs(l.never)
	if err != nil {
		return nil, err
	}
	// A named pool starts from the "*" bounds and overrides what it names.
	of := func(pool string, base layoutplan.PoolBounds) layoutplan.PoolBounds {
		if k, ok := kinds[pool]; ok {
			base.Allowed = k
		}
		if n, ok := minWhole[pool]; ok {
			base.MinWhole = n
		}
		if n, ok := shares[pool]; ok {
			base.Shares = n
		}
		return base
	}
	b := &layoutplan.Bounds{MinInterval: l.minInterval, Default: of("*", layoutplan.PoolBounds{Never: never}), Pools: map[string]layoutplan.PoolBounds{}}
	named := slices.Concat(slices.Collect(maps.Keys(kinds)), slices.Collect(maps.Keys(minWhole)), slices.Collect(maps.Keys(shares)))
	for _, pool := range named {
		if pool != "*" {
			b.Pools[pool] = of(pool, b.Default)
		}
	}
	return b, nil
}

func parseKinds(v string) ([]gpulayout.Kind, error) {
	var kinds []gpulayout.Kind
	for _, k := range strings.Split(v, "+") {
		switch kind := gpulayout.Kind(strings.TrimSpace(k)); kind {
		case gpulayout.Whole, gpulayout.MPS, gpulayout.MIG:
			kinds = append(kinds, kind)
		default:
			return nil, fmt.Errorf("%q is not a layout kind; allowed: whole, mps, mig joined by +", k)
		}
	}
	return kinds, nil
}

func countParser(lo, hi int, what string) func(string) (int, error) {
	return func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("%q is not %s", v, what)
		}
		return n, nil
	}
}

// poolValues reads a flag's "pool=value,…" into values by pool; errors
// name the flag and show an example.
func poolValues[V any](flagName, s, example string, parse func(string) (V, error)) (map[string]V, error) {
	out := map[string]V{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		name, v, ok := strings.Cut(part, "=")
		name, v = strings.TrimSpace(name), strings.TrimSpace(v)
		if !ok || name == "" {
			return nil, fmt.Errorf("%s: %q; allowed: pool=value, comma-separated, such as *=%s (* is every other pool)", flagName, part, example)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: pool %q given twice", flagName, name)
		}
		val, err := parse(v)
		if err != nil {
			return nil, fmt.Errorf("%s: pool %q: %v", flagName, name, err)
		}
		out[name] = val
	}
	return out, nil
}

func neverUUIDs(s string) ([]string, error) {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if !strings.HasPrefix(u, "GPU-") || len(u) == len("GPU-") {
			return nil, fmt.Errorf("-layout-never: %q is not a GPU- UUID", u)
		}
		out = append(out, u)
	}
	return out, nil
}
