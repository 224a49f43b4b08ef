// Package sizing right-sizes GPU tasks from their history: it
// reads a task's sizing policy from its Nomad meta, and from the history of
// its utilisation, memory and run outcomes (package sizing/history) it
// recommends the slice it should have: an MPS share count, a MIG profile or
// a whole-GPU count, with the evidence, within the policy's bounds and what
// the job's pool offers.
//
// # Job meta
//
// Meta is read as Nomad merges it for a task: the task's over its group's
// over its job's.
//
//	nomad_gpu_sizing          off (default), recommend or auto
//	nomad_gpu_sizing_min      the least slice: a count (shares, GPUs) or a MIG profile
//	nomad_gpu_sizing_max      the most slice, likewise
//	nomad_gpu_sizing_interval the least time between two resizes (default 30m)
//	nomad_gpu_deadline        RFC 3339 time by which the job should be done
//
// Under recommend the sizer only says what it would do. Under auto it
// resizes tasks that checkpoint (a checkpoint block in the gpu driver's
// config), because only they resume with nothing lost; a task without
// checkpointing is recommended, never restarted.
package sizing

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Meta keys of the sizing policy.
const (
	MetaMode       = "nomad_gpu_sizing"
	MetaMin        = "nomad_gpu_sizing_min"
	MetaMax        = "nomad_gpu_sizing_max"
	MetaInterval   = "nomad_gpu_sizing_interval"
	MetaDeadline   = "nomad_gpu_deadline"
	MetaLastResize = "nomad_gpu_sizing_last" // written by the sizer on a task it resized
)

// Mode is what the sizer may do with a task.
type Mode string

const (
	ModeOff       Mode = "off"
	ModeRecommend Mode = "recommend"
	ModeAuto      Mode = "auto"
)

// DefaultInterval is the least time between two resizes of one task.
const DefaultInterval = 30 * time.Minute

// Bound is one end of a policy's range: a count, or a MIG profile.
type Bound struct {
	Count   int
	Profile string
}

// Policy is a task's sizing policy.
type Policy struct {
	Mode     Mode
	Min, Max Bound
	Interval time.Duration
	Deadline time.Time // zero: none
}

// MergeMeta is a task's meta as Nomad merges it: task over group over job.
func MergeMeta(job, group, task map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{job, group, task} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// ParsePolicy reads the sizing policy from merged meta. An error names the
// meta key and what it allows.
func ParsePolicy(meta map[string]string) (Policy, error) {
	p := Policy{Mode: ModeOff, Interval: DefaultInterval}
	if v, ok := meta[MetaMode]; ok {
		switch m := Mode(strings.TrimSpace(v)); m {
		case ModeOff, ModeRecommend, ModeAuto:
			p.Mode = m
		default:
			return p, fmt.Errorf("meta %s: %q is not a sizing mode; want off, recommend or auto", MetaMode, v)
		}
	}
	var err error
	if p.Min, err = parseBound(meta, MetaMin); err != nil {
		return p, err
	}
	if p.Max, err = parseBound(meta, MetaMax); err != nil {
		return p, err
	}
	if p.Min.Count > 0 && p.Max.Count > 0 && p.Min.Count > p.Max.Count {
		return p, fmt.Errorf("meta %s: %d is more than %s %d", MetaMin, p.Min.Count, MetaMax, p.Max.Count)
	}
	if v, ok := meta[MetaInterval]; ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return p, fmt.Errorf("meta %s: %q is not a duration of 0 or more (e.g. 30m, 2h)", MetaInterval, v)
		}
		p.Interval = d
	}
	if v, ok := meta[MetaDeadline]; ok {
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
		if err != nil {
			return p, fmt.Errorf("meta %s: %q is not an RFC 3339 time (e.g. 2026-12-24T18:00:00Z)", MetaDeadline, v)
		}
		p.Deadline = t
	}
	return p, nil
}

func parseBound(meta map[string]string, key string) (Bound, error) {
	v, ok := meta[key]
	if !ok {
		return Bound{}, nil
	}
	v = strings.TrimSpace(v)
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 {
			return Bound{}, fmt.Errorf("meta %s: %d is not a count of 1 or more", key, n)
		}
		return Bound{Count: n}, nil
	}
	if _, _, err := migSlices(v); err != nil {
		return Bound{}, fmt.Errorf("meta %s: %q is neither a count (shares, GPUs) nor a MIG profile such as 1g.10gb", key, v)
	}
	return Bound{Profile: v}, nil
}

// migSlices reads a MIG profile name "<n>g.<m>gb" (with optional
// suffixes such as "+me"): its compute slices and memory in GB.
func migSlices(profile string) (slices, memGB int, err error) {
	base, _, _ := strings.Cut(profile, "+")
	g, mem, ok := strings.Cut(base, "g.")
	if !ok || !strings.HasSuffix(mem, "gb") {
		return 0, 0, fmt.Errorf("%q is not a MIG profile", profile)
	}
	if slices, err = strconv.Atoi(g); err != nil || slices < 1 {
		return 0, 0, fmt.Errorf("%q is not a MIG profile", profile)
	}
	if memGB, err = strconv.Atoi(strings.TrimSuffix(mem, "gb")); err != nil || memGB < 1 {
		return 0, 0, fmt.Errorf("%q is not a MIG profile", profile)
	}
	return slices, memGB, nil
}
