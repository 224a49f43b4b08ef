package gpuqueue

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
)

// Signal is what a check's metric measures; the `signal` key names it.
type Signal string

// The signals a check can carry.
const (
	// SignalNodesNeeded: nodes to add to place the queued work (the APM's
	// nodes_needed). The amount of every scale-out.
	SignalNodesNeeded Signal = "nodes_needed"
	// SignalQueued: queued work in any unit (allocs_queued, gpus_queued).
	// Compared with activation; zero means the queue is empty.
	SignalQueued Signal = "queued"
	// SignalWait: seconds the oldest queued work has waited
	// (wait_max_seconds). Compared with max_wait.
	SignalWait Signal = "wait"
	// SignalUtil: a percentage 0-100 (gpu_alloc_pct, gpu_util_pct).
	// Compared with floor for scale-in.
	SignalUtil Signal = "util"
	// SignalNodes: the target's nodes that have joined Nomad and can take
	// work (nodes_ready). With it, capacity in flight is the count minus
	// these, not a guess from nodes_needed.
	SignalNodes Signal = "nodes"
	// SignalRemovable: the target's nodes that the controller emptied for
	// removal and that run nothing (the APM's nodes_removable). Above 0,
	// the pool scales in by them at once unless it scales out.
	SignalRemovable Signal = "removable"
)

var signals = []Signal{SignalNodesNeeded, SignalQueued, SignalWait, SignalUtil, SignalNodes, SignalRemovable}

// Config keys. signal and pool describe the check; the others are the
// pool's rules (see the package documentation).
const (
	keySignal       = "signal"
	keyPool         = "pool"
	keyActivation   = "activation"
	keyMaxWait      = "max_wait"
	keyMaxScaleUp   = "max_scale_up"
	keyMaxScaleDown = "max_scale_down"
	keyFloor        = "floor"
	keyScaleInAfter = "scale_in_after"
	keyBootTime     = "boot_time"
	keyLookahead    = "lookahead"
	// keyMetricsAddress is the plugin config's only key of its own: where
	// the check run counts are served (host:port; unset: off).
	keyMetricsAddress = "metrics_address"
)

// ruleKeys are the keys that may appear in the plugin config (as defaults)
// and in any check of a pool, in the order they are documented.
var ruleKeys = []string{
	keyActivation, keyMaxWait, keyMaxScaleUp, keyMaxScaleDown,
	keyFloor, keyScaleInAfter, keyBootTime, keyLookahead,
}

// rules are a pool's settings.
type rules struct {
	Activation   float64
	MaxWait      time.Duration // 0: off
	MaxScaleUp   int64
	MaxScaleDown int64
	Floor        float64 // percent; 0: never scale in
	ScaleInAfter time.Duration
	BootTime     time.Duration // 0: no in-flight accounting, no look-ahead
	Lookahead    bool
}

// defaultRules are the documented defaults.
var defaultRules = rules{
	Activation:   1,
	MaxWait:      30 * time.Minute,
	MaxScaleUp:   10,
	MaxScaleDown: 1,
	Floor:        30,
	ScaleInAfter: 10 * time.Minute,
	BootTime:     10 * time.Minute,
	Lookahead:    false,
}

// checkConfig is one check's strategy block, parsed.
type checkConfig struct {
	Signal Signal
	Pool   string
	// Explicit are the rule keys the block sets, each value in canonical
	// form (so "30m" and "1800s" compare equal).
	Explicit map[string]string
}

// configErr is a refused config: a check's strategy block, its pool's
// merged rules or the plugin config. Its text names the keys and what is
// allowed.
type configErr struct {
	keys []string
	msg  string
}

func (e *configErr) Error() string { return e.msg }

func configError(key, format string, args ...any) error {
	return &configErr{keys: []string{key}, msg: fmt.Sprintf("%s: %s: %s", PluginName, key, fmt.Sprintf(format, args...))}
}

// refusedKeys are the config keys err refuses, sorted, and whether err
// is (or joins) a config refusal at all.
func refusedKeys(err error) ([]string, bool) {
	var keys []string
	found := false
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *configErr:
			found = true
			keys = append(keys, e.keys...)
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	sort.Strings(keys)
	return slices.Compact(keys), found
}

// injected reports whether the agent, not the operator, put key in a
// config map: the Nomad connection keys every plugin inherits.
func injected(key string) bool {
	return strings.HasPrefix(key, "nomad_")
}

// parseRule parses one rule key's value and stores it in r; it returns the
// value in canonical form.
func parseRule(r *rules, key, raw string) (string, error) {
	v := strings.TrimSpace(raw)
	switch key {
	case keyActivation:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			return "", configError(key, "%q must be a positive number (queued work, in the unit of the pool's queue metric)", raw)
		}
		r.Activation = f
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case keyMaxWait:
		d, err := parseDuration(v)
		if err != nil || d < 0 || (d > 0 && d < time.Second) {
			return "", configError(key, "%q must be a duration of at least 1s such as \"30m\", or \"0\" to turn it off", raw)
		}
		r.MaxWait = d
		return d.String(), nil
	case keyMaxScaleUp, keyMaxScaleDown:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return "", configError(key, "%q must be a positive integer", raw)
		}
		if key == keyMaxScaleUp {
			r.MaxScaleUp = n
		} else {
			r.MaxScaleDown = n
		}
		return strconv.FormatInt(n, 10), nil
	case keyFloor:
		f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 100 {
			return "", configError(key, "%q must be a percentage from 0 to 100 (0 turns scale-in off)", raw)
		}
		r.Floor = f
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case keyScaleInAfter:
		d, err := parseDuration(v)
		if err != nil || d < time.Second {
			return "", configError(key, "%q must be a duration of at least 1s such as \"10m\"", raw)
		}
		r.ScaleInAfter = d
		return d.String(), nil
	case keyBootTime:
		d, err := parseDuration(v)
		if err != nil || d < 0 || (d > 0 && d < time.Second) {
			return "", configError(key, "%q must be a duration of at least 1s such as \"5m\", or \"0\" to turn in-flight accounting off", raw)
		}
		r.BootTime = d
		return d.String(), nil
	case keyLookahead:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return "", configError(key, "%q must be true or false", raw)
		}
		r.Lookahead = b
		return strconv.FormatBool(b), nil
	}
	return "", &configErr{keys: []string{key}, msg: fmt.Sprintf("%s: unknown key %q", PluginName, key)}
}

// parseDuration is time.ParseDuration, also taking a bare "0".
func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

// validate checks rules that span keys.
func (r rules) validate() error {
	if r.Lookahead && r.BootTime == 0 {
		return configError(keyLookahead, "needs boot_time above 0: boot_time is how far ahead it looks")
	}
	return nil
}

func isRuleKey(k string) bool {
	for _, r := range ruleKeys {
		if r == k {
			return true
		}
	}
	return false
}

func unknownKeysError(unknown []string, allowed []string) error {
	sort.Strings(unknown)
	quoted := make([]string, len(unknown))
	for i, k := range unknown {
		quoted[i] = strconv.Quote(k)
	}
	noun := "key"
	if len(unknown) > 1 {
		noun = "keys"
	}
	return &configErr{keys: slices.Clone(unknown),
		msg: fmt.Sprintf("%s: unknown %s %s; allowed: %s", PluginName, noun, strings.Join(quoted, ", "), strings.Join(allowed, ", "))}
}

// pluginConfig is the plugin block's config, parsed.
type pluginConfig struct {
	// Defaults are the rule keys' values for every check.
	Defaults rules
	// MetricsAddress is where the metrics are served; "" for none.
	MetricsAddress string
}

// parsePluginConfig parses the plugin block's config map: rule keys, as
// defaults for every check, and metrics_address. Agent-injected keys are
// ignored.
func parsePluginConfig(m map[string]string) (pluginConfig, error) {
	c := pluginConfig{Defaults: defaultRules}
	var unknown []string
	var errs []error
	for _, k := range sortedKeys(m) {
		switch {
		case injected(k):
		case k == keySignal || k == keyPool:
			errs = append(errs, configError(k, "belongs in each check's strategy block, not in the plugin config"))
		case k == keyMetricsAddress:
			v := strings.TrimSpace(m[k])
			if v != "" && metrics.CheckListenAddress(v) != nil {
				errs = append(errs, configError(k, "%q must be host:port to serve Prometheus metrics on, such as \"127.0.0.1:9404\" or \":9404\" (every interface); unset for none", m[k]))
				continue
			}
			c.MetricsAddress = v
		case isRuleKey(k):
			if _, err := parseRule(&c.Defaults, k, m[k]); err != nil {
				errs = append(errs, err)
			}
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		errs = append([]error{unknownKeysError(unknown, append(slices.Clone(ruleKeys), keyMetricsAddress))}, errs...)
	}
	if len(errs) == 0 {
		if err := c.Defaults.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// parseCheckConfig parses a check's strategy block.
func parseCheckConfig(m map[string]string) (checkConfig, error) {
	c := checkConfig{Signal: SignalNodesNeeded, Explicit: map[string]string{}}
	var unknown []string
	var errs []error
	scratch := defaultRules
	for _, k := range sortedKeys(m) {
		v := m[k]
		switch {
		case injected(k):
		case k == keySignal:
			s := Signal(strings.TrimSpace(v))
			ok := false
			for _, x := range signals {
				ok = ok || s == x
			}
			if !ok {
				errs = append(errs, configError(k, "%q must be one of %s", v, quotedSignals()))
				continue
			}
			c.Signal = s
		case k == keyPool:
			p := strings.TrimSpace(v)
			if len(p) > 200 {
				errs = append(errs, configError(k, "%q is too long; use at most 200 characters", v))
				continue
			}
			c.Pool = p
		case isRuleKey(k):
			canon, err := parseRule(&scratch, k, v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.Explicit[k] = canon
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		errs = append([]error{unknownKeysError(unknown, append([]string{keySignal, keyPool}, ruleKeys...))}, errs...)
	}
	// A block that sets both lookahead and boot_time must agree with
	// itself; a lookahead that relies on another check's boot_time is
	// checked on the pool's merged rules.
	if _, hasB := c.Explicit[keyBootTime]; hasB && len(errs) == 0 {
		if _, hasL := c.Explicit[keyLookahead]; hasL {
			if err := scratch.validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return c, errors.Join(errs...)
}

func quotedSignals() string {
	q := make([]string, len(signals))
	for i, s := range signals {
		q[i] = strconv.Quote(string(s))
	}
	return strings.Join(q, ", ")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
