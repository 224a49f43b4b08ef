package apm

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Metric names a query can ask for.
const (
	MetricGPUsQueued   = "gpus_queued"
	MetricAllocsQueued = "allocs_queued"
	MetricWaitMax      = "wait_max_seconds"
	MetricWaitMean     = "wait_mean_seconds"
	MetricAllocPct     = "gpu_alloc_pct"
	MetricUtilPct      = "gpu_util_pct"
	MetricNodesNeeded  = "nodes_needed"
	MetricNodesReady   = "nodes_ready"
	// MetricNodesRemovable: nodes the controller emptied for removal.
	MetricNodesRemovable = "nodes_removable"
)

var metricNames = []string{
	MetricGPUsQueued, MetricAllocsQueued, MetricWaitMax, MetricWaitMean,
	MetricAllocPct, MetricUtilPct, MetricNodesNeeded, MetricNodesReady, MetricNodesRemovable,
}

// isQueueMetric reports whether a metric reads the queue (and so takes state=).
func isQueueMetric(m string) bool {
	switch m {
	case MetricGPUsQueued, MetricAllocsQueued, MetricWaitMax, MetricWaitMean:
		return true
	}
	return false
}

// State selects which queued work a queue metric counts.
type State int

const (
	// StateAll counts unplaced allocations of blocked evaluations and
	// placed allocations still pending on their node.
	StateAll State = iota
	// StateBlocked counts only unplaced allocations (blocked evaluations).
	StateBlocked
	// StatePending counts only placed allocations whose client status is
	// still pending.
	StatePending
)

func (s State) String() string {
	switch s {
	case StateBlocked:
		return "blocked"
	case StatePending:
		return "pending"
	}
	return "all"
}

// DeviceSpec is a device name as Nomad parses a job's device request
// (nomadview's, where its rules live).
type DeviceSpec = nomadview.DeviceSpec

// DefaultDevice is the device a query means when it names none.
var DefaultDevice = DeviceSpec{Vendor: "nvidia", Type: "gpu"}

// AnyDevice is the query device "any": every kind of GPU ask and device
// group of ours (nomadview.IsGPUAsk: whole GPUs, MIG instances, MPS
// shares), counted in GPU-equivalents. No device has the type "any", so
// it never means a device of its own.
var AnyDevice = DeviceSpec{Type: "any"}

// anyName is the device value that stands for AnyDevice.
const anyName = "any"

const deviceForms = "any, type, vendor/type or vendor/type/name (e.g. any, nvidia/gpu, nvidia/mig/1g.10gb)"

// ParseDeviceSpec parses a device name the way Nomad parses a device
// request's name: one part is the type, two are vendor/type, three are
// vendor/type/name (the name may itself hold no further "/"). "any" alone
// is AnyDevice; "any" as a part of a longer name is an error.
func ParseDeviceSpec(s string) (DeviceSpec, error) {
	if s == anyName {
		return AnyDevice, nil
	}
	parts := strings.Split(s, "/")
	for _, p := range parts {
		if p == "" {
			return DeviceSpec{}, fmt.Errorf("device %q has an empty part; want %s", s, deviceForms)
		}
	}
	for _, p := range parts {
		if p == anyName {
			return DeviceSpec{}, fmt.Errorf("device %q: \"any\" stands alone (every GPU, MIG instance and MPS share, in GPU-equivalents); want %s", s, deviceForms)
		}
	}
	switch len(parts) {
	case 1:
		return DeviceSpec{Type: parts[0]}, nil
	case 2:
		return DeviceSpec{Vendor: parts[0], Type: parts[1]}, nil
	case 3:
		return DeviceSpec{Vendor: parts[0], Type: parts[1], Name: parts[2]}, nil
	}
	return DeviceSpec{}, fmt.Errorf("device %q has %d parts; want %s", s, len(parts), deviceForms)
}

// Filter selects nodes and work. Empty fields match everything.
type Filter struct {
	NodePool   string
	Datacenter string
	NodeClass  string
	// Device is the device asked for and offered, as the jobspec names
	// it, or AnyDevice.
	Device DeviceSpec
}

// Any reports whether the filter is device=any.
func (f Filter) Any() bool { return f.Device == AnyDevice }

// matchDevice reports whether a device request or group d is one the
// filter selects: for device=any, any GPU ask of ours
// (nomadview.IsGPUAsk), else one Compatible with the filter's device.
// Layout groups (contract.SliceLayout) are never selected: they are no
// capacity.
func (f Filter) matchDevice(d DeviceSpec) bool {
	if d.Type == contract.SliceLayout {
		return false
	}
	if f.Any() {
		return nomadview.IsGPUAsk(d)
	}
	return f.Device.Compatible(d)
}

// Query is a parsed query string.
type Query struct {
	Metric string
	Filter Filter
	// State applies to the queue metrics only.
	State State
	// GPUsPerNode is the node shape nodes_needed packs into; 0 means take
	// it from the pool's nodes (or the plugin's default_gpus_per_node).
	GPUsPerNode int
	// Beyond, for nodes_needed: only queued groups predicted to wait
	// longer than this on the pool's capacity (runtime forecasts) need
	// new nodes; 0: every queued group does.
	Beyond time.Duration
}

func (q Query) String() string {
	var params []string
	add := func(k, v string) {
		if v != "" {
			params = append(params, k+"="+v)
		}
	}
	add(keyNodePool, q.Filter.NodePool)
	add(keyDatacenter, q.Filter.Datacenter)
	add(keyNodeClass, q.Filter.NodeClass)
	add(keyDevice, q.Filter.Device.String())
	if isQueueMetric(q.Metric) {
		add(keyState, q.State.String())
	}
	if q.GPUsPerNode > 0 {
		add(keyGPUsPerNode, strconv.Itoa(q.GPUsPerNode))
	}
	if q.Beyond > 0 {
		add(keyBeyond, q.Beyond.String())
	}
	return q.Metric + "{" + strings.Join(params, ",") + "}"
}

// Query parameter keys; aliases map to these.
const (
	keyNodePool    = "node_pool"
	keyDatacenter  = "datacenter"
	keyNodeClass   = "node_class"
	keyDevice      = "device"
	keyState       = "state"
	keyGPUsPerNode = "gpus_per_node"
	keyBeyond      = "beyond"
)

var keyAliases = map[string]string{
	keyNodePool:    keyNodePool,
	"pool":         keyNodePool,
	keyDatacenter:  keyDatacenter,
	keyNodeClass:   keyNodeClass,
	"class":        keyNodeClass,
	keyDevice:      keyDevice,
	keyState:       keyState,
	keyGPUsPerNode: keyGPUsPerNode,
	keyBeyond:      keyBeyond,
}

const allowedKeys = "node_pool (or pool), datacenter, node_class (or class), device, state (queue metrics), gpus_per_node and beyond (nodes_needed)"

func validValueChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		strings.ContainsRune("-_./:", r)
}

// ParseQuery parses a query string:
//
//	metric
//	metric{}
//	metric{key=value,key=value,...}
//
// metric is one of gpus_queued, allocs_queued, wait_max_seconds,
// wait_mean_seconds, gpu_alloc_pct, gpu_util_pct, nodes_needed,
// nodes_ready, nodes_removable. Keys are
// node_pool (alias pool), datacenter, node_class (alias class), device
// (a device name, or any: every GPU kind, in GPU-equivalents),
// state (queue metrics only: blocked, pending or all), gpus_per_node
// (nodes_needed only: a positive integer) and beyond (nodes_needed only: a
// duration, such as 10m). Each key at most once. Values
// are made of letters, digits and - _ . / : (no quoting). Blanks around
// the metric, the braces, commas and "=" are allowed; nothing else is.
func ParseQuery(s string) (Query, error) {
	q, err := parseQuery(s)
	if err != nil {
		return Query{}, fmt.Errorf("query %q: %w", s, err)
	}
	return q, nil
}

func parseQuery(s string) (Query, error) {
	q := Query{Filter: Filter{Device: DefaultDevice}}
	body := strings.TrimSpace(s)
	if body == "" {
		return q, fmt.Errorf("empty query; want metric{key=value,...} with metric one of %s", strings.Join(metricNames, ", "))
	}
	name, rest, hasBraces := strings.Cut(body, "{")
	name = strings.TrimSpace(name)
	if !hasBraces && strings.ContainsAny(name, "}=, \t") {
		return q, fmt.Errorf("%q is not a metric name; parameters go in braces: metric{key=value,...}", name)
	}
	known := false
	for _, m := range metricNames {
		if name == m {
			known = true
		}
	}
	if !known {
		return q, fmt.Errorf("unknown metric %q; allowed: %s", name, strings.Join(metricNames, ", "))
	}
	q.Metric = name
	if !hasBraces {
		return q, nil
	}
	inner, ok := strings.CutSuffix(rest, "}")
	if !ok {
		return q, fmt.Errorf("missing closing \"}\" at the end")
	}
	if strings.ContainsAny(inner, "{}") {
		return q, fmt.Errorf("unexpected brace inside {%s}", inner)
	}
	if strings.TrimSpace(inner) == "" {
		return q, nil
	}
	seen := map[string]string{}
	for i, param := range strings.Split(inner, ",") {
		param = strings.TrimSpace(param)
		if param == "" {
			return q, fmt.Errorf("empty parameter #%d (stray comma?)", i+1)
		}
		k, v, ok := strings.Cut(param, "=")
		if !ok {
			return q, fmt.Errorf("parameter %q has no \"=\"; want key=value with key one of %s", param, allowedKeys)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		key, ok := keyAliases[k]
		if !ok {
			return q, fmt.Errorf("unknown parameter %q; allowed: %s", k, allowedKeys)
		}
		if prev, dup := seen[key]; dup {
			return q, fmt.Errorf("parameter %q given twice (as %q and %q)", key, prev, k)
		}
		seen[key] = k
		if v == "" {
			return q, fmt.Errorf("parameter %q has an empty value", k)
		}
		for _, r := range v {
			if !validValueChar(r) {
				return q, fmt.Errorf("parameter %q: value %q has the character %q; values are letters, digits and the characters -_./: only", k, v, r)
			}
		}
		switch key {
		case keyNodePool:
			q.Filter.NodePool = v
		case keyDatacenter:
			q.Filter.Datacenter = v
		case keyNodeClass:
			q.Filter.NodeClass = v
		case keyDevice:
			d, err := ParseDeviceSpec(v)
			if err != nil {
				return q, fmt.Errorf("parameter device: %w", err)
			}
			q.Filter.Device = d
		case keyState:
			if !isQueueMetric(q.Metric) {
				return q, fmt.Errorf("parameter state applies only to %s, not %s", strings.Join(queueMetrics(), ", "), q.Metric)
			}
			switch v {
			case "all":
				q.State = StateAll
			case "blocked":
				q.State = StateBlocked
			case "pending":
				q.State = StatePending
			default:
				return q, fmt.Errorf("parameter state: %q is not one of all, blocked, pending", v)
			}
		case keyGPUsPerNode:
			if q.Metric != MetricNodesNeeded {
				return q, fmt.Errorf("parameter gpus_per_node applies only to %s, not %s", MetricNodesNeeded, q.Metric)
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return q, fmt.Errorf("parameter gpus_per_node: %q is not a positive integer", v)
			}
			q.GPUsPerNode = n
		case keyBeyond:
			if q.Metric != MetricNodesNeeded {
				return q, fmt.Errorf("parameter beyond applies only to %s, not %s", MetricNodesNeeded, q.Metric)
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second {
				return q, fmt.Errorf("parameter beyond: %q is not a duration of 1s or more, such as 10m", v)
			}
			q.Beyond = d
		}
	}
	return q, nil
}

func queueMetrics() []string {
	var out []string
	for _, m := range metricNames {
		if isQueueMetric(m) {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}
