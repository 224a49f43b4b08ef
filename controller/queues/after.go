package queues

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Dependencies (job meta nomad_gpu_after, Slurm's afterok): a job is
// held until each job it names has completed its latest run
// successfully. A dependency that failed, or that does not exist, holds
// it too, with that reason, never silently (Slurm's
// DependencyNeverSatisfied); running the dependency again, or changing
// the meta, lets it go.

// Dep is a job another waits for.
type Dep struct{ Namespace, Job string }

func (d Dep) String() string { return d.Namespace + "/" + d.Job }

// ParseAfter reads nomad_gpu_after of job self in namespace: job IDs,
// comma-separated, each in namespace unless written "<namespace>/<job>".
// Its error names the key and what is allowed.
func ParseAfter(namespace, self, value string) ([]Dep, error) {
	var out []Dep
	for _, part := range strings.Split(value, ",") {
		name := strings.TrimSpace(part)
		d := Dep{Namespace: namespace, Job: name}
		if ns, job, ok := strings.Cut(name, "/"); ok {
			d = Dep{Namespace: ns, Job: job}
		}
		switch {
		case d.Namespace == "" || d.Job == "" || strings.Contains(d.Job, "/"):
			return nil, fmt.Errorf("meta %s: %q; allowed: job IDs, comma-separated, each <job> or <namespace>/<job>", contract.MetaAfter, value)
		case d == Dep{Namespace: namespace, Job: self}:
			return nil, fmt.Errorf("meta %s: %q names the job itself; allowed: other jobs", contract.MetaAfter, value)
		case slices.Contains(out, d):
			return nil, fmt.Errorf("meta %s: %q names %s twice; allowed: each job once", contract.MetaAfter, value, d)
		}
		out = append(out, d)
	}
	return out, nil
}

// DepRun is what a dependency's latest run is.
type DepRun int

// Dependency states.
const (
	// DepMissing: no such job (never submitted, or garbage-collected).
	DepMissing DepRun = iota
	// DepUnfinished: its latest run has not ended (waiting or running).
	DepUnfinished
	// DepComplete: its latest run completed successfully.
	DepComplete
	// DepFailed: its latest run ended, some of it failed or was stopped.
	DepFailed
)

// HeldBy is why deps hold a job, "" when every one completed: the first
// that did not, in the order written, with what it is.
func HeldBy(deps []Dep, run func(Dep) DepRun) string {
	for _, d := range deps {
		switch run(d) {
		case DepComplete:
			continue
		case DepMissing:
			return fmt.Sprintf("dependency: after %s, which does not exist (never submitted, or garbage-collected); run it, or change meta %s", d, contract.MetaAfter)
		case DepFailed:
			return fmt.Sprintf("dependency: after %s, whose latest run failed; it waits until %s runs again and completes", d, d)
		default:
			return fmt.Sprintf("dependency: after %s, which has not completed yet", d)
		}
	}
	return ""
}
