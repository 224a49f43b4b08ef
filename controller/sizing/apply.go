package sizing

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// Decision says whether a recommendation is applied now, and if not why.
type Decision struct {
	Apply bool
	Hold  string // why it is not applied; "" when applied or nothing to do
	// Rule names the rule that holds it: "mode", "checkpoint", "interval".
	Rule string
}

// Decide applies the policy to a recommendation: only auto resizes, only a
// task that checkpoints (it resumes with nothing lost), and never twice
// within the policy's interval.
func Decide(p Policy, r Recommendation, checkpoints bool, lastResize, now time.Time) Decision {
	switch {
	case r.Change == Keep:
		return Decision{}
	case p.Mode != ModeAuto:
		return Decision{Rule: "mode", Hold: fmt.Sprintf("%s is %s: recommended only", MetaMode, p.Mode)}
	case !checkpoints:
		return Decision{Rule: "checkpoint", Hold: "the task does not checkpoint (no checkpoint block in its gpu driver config): recommended only, never restarted"}
	case !lastResize.IsZero() && now.Sub(lastResize) < p.Interval:
		return Decision{Rule: "interval", Hold: fmt.Sprintf("last resized %s ago; %s is %s", now.Sub(lastResize).Round(time.Second), MetaInterval, p.Interval)}
	}
	return Decision{Apply: true}
}

// Checkpoints reports whether a task uses the gpu driver with a checkpoint
// block, so a restart resumes from its last checkpoint.
func Checkpoints(t *api.Task) bool {
	if t == nil || t.Driver != "gpu" {
		return false
	}
	_, ok := t.Config["checkpoint"]
	return ok
}

// RequestSlice finds the task's one GPU device request (nvidia/gpu, gpu,
// nvidia/mig/<profile>, nvidia/mps) and the slice it asks for. A task with
// none, or with several, cannot be sized.
func RequestSlice(t *api.Task) (int, history.Slice, error) {
	idx, found := -1, history.Slice{}
	if t.Resources == nil {
		return -1, found, fmt.Errorf("task %q asks for no GPU device", t.Name)
	}
	for i, d := range t.Resources.Devices {
		s, ok := sliceOf(d)
		if !ok {
			continue
		}
		if idx >= 0 {
			return -1, found, fmt.Errorf("task %q asks for more than one GPU device (%s and %s): the sizer sizes one", t.Name, t.Resources.Devices[idx].Name, d.Name)
		}
		idx, found = i, s
	}
	if idx < 0 {
		return -1, found, fmt.Errorf("task %q asks for no GPU device", t.Name)
	}
	return idx, found, nil
}

func sliceOf(d *api.RequestedDevice) (history.Slice, bool) {
	parts := strings.SplitN(d.Name, "/", 3)
	if len(parts) > 1 && parts[0] != "nvidia" {
		return history.Slice{}, false
	}
	typ := parts[len(parts)-1]
	if len(parts) == 3 {
		typ = parts[1]
	}
	count := 1
	if d.Count != nil {
		count = int(*d.Count)
	}
	switch typ {
	case history.SliceGPU, history.SliceMPS:
		return history.Slice{Kind: typ, Count: count}, true
	case history.SliceMIG:
		if len(parts) < 3 {
			return history.Slice{}, false // any MIG profile: no one profile to size
		}
		return history.Slice{Kind: typ, Count: count, Profile: parts[2]}, true
	}
	return history.Slice{}, false
}

// Resize changes the task's GPU device request to the slice to and records
// the change in the task's meta (MetaLastResize), so the interval holds
// across sizer restarts and `nomad job history` shows why. The job is
// changed in place; the caller registers it.
func Resize(job *api.Job, group, task string, to history.Slice, reason string, now time.Time) error {
	t := findTask(job, group, task)
	if t == nil {
		return fmt.Errorf("job %q has no task %s/%s", deref(job.ID), group, task)
	}
	idx, cur, err := RequestSlice(t)
	if err != nil {
		return err
	}
	if cur.Kind != to.Kind {
		return fmt.Errorf("task %s/%s asks for %s, not %s: a resize keeps the kind", group, task, cur.Kind, to.Kind)
	}
	d := t.Resources.Devices[idx]
	n := uint64(max(1, to.Count))
	d.Count = &n
	if to.Kind == history.SliceMIG {
		d.Name = "nvidia/mig/" + to.Profile
	}
	// Whole seconds, rounded up: read back, the interval never ends early.
	at := now.Add(time.Second - 1).Truncate(time.Second)
	t.SetMeta(MetaLastResize, fmt.Sprintf("%s %s → %s: %s", at.UTC().Format(time.RFC3339), describe(cur), describe(to), reason))
	return nil
}

// LastResize reads the time of the task's last resize from its meta.
func LastResize(meta map[string]string) time.Time {
	v := meta[MetaLastResize]
	ts, _, _ := strings.Cut(v, " ")
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return time.Time{}
	}
	return t
}

func findTask(job *api.Job, group, task string) *api.Task {
	for _, g := range job.TaskGroups {
		if g.Name == nil || *g.Name != group {
			continue
		}
		for _, t := range g.Tasks {
			if t.Name == task {
				return t
			}
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
