// Package gang holds the controller's rules for gangs: jobs whose members
// run on several nodes all at once or not at all (docs/design/gangs.md).
// Nomad places a job's allocations one at a time and keeps the rest
// blocked, so a gang half placed holds GPUs idle while it waits; the
// controller decides when a gang may be placed. The rules here are pure
// (a jobspec, a plan, what is placed), so validate and tests run them too.
package gang

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Spec is what a gang's jobspec says of it.
type Spec struct {
	// Groups are the groups the gang admits, in job order: Groups[0]
	// holds rank 0.
	Groups []Group
	// Locality is meta nomad_gpu_gang_locality, "" when none.
	Locality string
}

// Group is one group of a gang and its count once admitted.
type Group struct {
	Name    string
	Members int
}

// Members is the gang's world size.
func (s Spec) Members() int {
	n := 0
	for _, g := range s.Groups {
		n += g.Members
	}
	return n
}

// FieldError is one rule a gang's jobspec breaks: the group ("" for the
// job), the field's path and what is wrong and allowed.
type FieldError struct {
	Group, Path, Problem string
}

func (e *FieldError) Error() string {
	if e.Group == "" {
		return fmt.Sprintf("%s: %s", e.Path, e.Problem)
	}
	return fmt.Sprintf("group %q: %s: %s", e.Group, e.Path, e.Problem)
}

// ParseSpec reads job's gang conventions. ok is false when job is not a
// gang (meta nomad_gpu_gang absent or "false"); err then names any gang
// meta set on it anyway. For a gang, err joins a *FieldError for every
// rule broken (Spec is filled as far as the job allows): job type batch;
// every group with GPUs declares its members; a member group's count is 0
// (the controller scales it); restart and reschedule attempts are 0 (a
// member's failure is the gang's); the group of rank 0 has a port
// labelled rendezvous when there is more than one member; the locality
// is a ${meta.*}, ${attr.*} or ${node.*} interpolation. The count rule is
// the submitted job's: once admitted, the groups are at their members.
func ParseSpec(job *api.Job) (Spec, bool, error) {
	var errs problems
	switch v := job.Meta[contract.MetaGang]; v {
	case "true":
	case "", "false":
		return Spec{}, false, notGang(job)
	default:
		return Spec{}, false, &FieldError{Path: "meta." + contract.MetaGang, Problem: fmt.Sprintf("%q; allowed: \"true\", \"false\" or none", v)}
	}
	if t := deref(job.Type, api.JobTypeService); t != api.JobTypeBatch {
		errs.add("", "type", "%q; allowed: \"batch\" (a gang runs to completion)", t)
	}
	var s Spec
	if loc, ok := job.Meta[contract.MetaGangLocality]; ok {
		s.Locality = loc
		if !localityRe.MatchString(loc) {
			errs.add("", "meta."+contract.MetaGangLocality, "%q; allowed: ${meta.<key>}, ${attr.<name>} or ${node.<%s>}", loc, nodeFields)
		}
	}
	checkpoints := true
	switch v := job.Meta[contract.MetaGangCheckpoint]; v {
	case "", "required":
	case "none":
		checkpoints = false
	default:
		errs.add("", "meta."+contract.MetaGangCheckpoint, "%q; allowed: \"required\" (the default) or \"none\"", v)
	}
	var rank0 *api.TaskGroup
	for _, g := range job.TaskGroups {
		name := deref(g.Name, "")
		n, declared := members(g, &errs)
		if !declared {
			if hasGPUs(g) {
				errs.add(name, "meta."+contract.MetaGangMembers, "not set on a group with GPUs; allowed: 1 or more")
			}
			continue
		}
		if rank0 == nil {
			rank0 = g
		}
		s.Groups = append(s.Groups, Group{name, n})
		memberRules(job, g, &errs)
		if checkpoints {
			checkpointRule(g, &errs)
		}
	}
	switch {
	case rank0 == nil:
		errs.add("", "group", "none declares meta.%s; allowed: one or more groups that do", contract.MetaGangMembers)
	case s.Members() > 1 && !hasPort(rank0, contract.GangRendezvousPort):
		errs.add(deref(rank0.Name, ""), "network.port", "no port labelled %q; allowed: the group of rank 0 (the gang's first) declares it, the members' master port",
			contract.GangRendezvousPort)
	}
	return s, true, errors.Join(errs...)
}

// problems collects FieldErrors.
type problems []error

func (p *problems) add(group, path, format string, a ...any) {
	*p = append(*p, &FieldError{group, path, fmt.Sprintf(format, a...)})
}

// notGang names the gang meta set on a job that is not a gang.
func notGang(job *api.Job) error {
	var errs problems
	const why = "set, but the job is no gang; allowed: only with the job's meta.%s = \"true\""
	for _, key := range []string{contract.MetaGangLocality, contract.MetaGangCheckpoint} {
		if _, ok := job.Meta[key]; ok {
			errs.add("", "meta."+key, why, contract.MetaGang)
		}
	}
	for _, g := range job.TaskGroups {
		if _, ok := g.Meta[contract.MetaGangMembers]; ok {
			errs.add(deref(g.Name, ""), "meta."+contract.MetaGangMembers, why, contract.MetaGang)
		}
	}
	return errors.Join(errs...)
}

// members is g's meta nomad_gpu_gang_members and whether it is set; a
// value that is no count ≥ 1 is added to errs and read as 0.
func members(g *api.TaskGroup, errs *problems) (n int, declared bool) {
	v, ok := g.Meta[contract.MetaGangMembers]
	if !ok {
		return 0, false
	}
	n, err := contract.GangMembers(v)
	if err != nil {
		errs.add(deref(g.Name, ""), "meta."+contract.MetaGangMembers, "%s", err)
	}
	return n, true
}

// memberRules adds to errs what is wrong with a member group's count,
// restart and reschedule; an unset field is judged at Nomad's batch
// default (count 1, 3 restarts, 1 reschedule).
func memberRules(job *api.Job, g *api.TaskGroup, errs *problems) {
	name := deref(g.Name, "")
	if c := deref(g.Count, 1); c != 0 {
		errs.add(name, "count", "%d; allowed: 0 (the controller scales the group to its members when it admits the gang)", c)
	}
	const failIsGang = "a member's failure is the gang's: the controller restarts the gang as a unit"
	restarts := 3
	if g.RestartPolicy != nil {
		restarts = deref(g.RestartPolicy.Attempts, restarts)
	}
	if restarts != 0 {
		errs.add(name, "restart.attempts", "%d; allowed: 0 (%s)", restarts, failIsGang)
	}
	for _, t := range g.Tasks {
		if t.RestartPolicy != nil && t.RestartPolicy.Attempts != nil && *t.RestartPolicy.Attempts != 0 {
			errs.add(name, fmt.Sprintf("task %q restart.attempts", t.Name), "%d; allowed: 0 (%s)", *t.RestartPolicy.Attempts, failIsGang)
		}
	}
	resched, unlimited := 1, false
	for _, p := range []*api.ReschedulePolicy{job.Reschedule, g.ReschedulePolicy} {
		if p != nil {
			resched, unlimited = deref(p.Attempts, resched), deref(p.Unlimited, unlimited)
		}
	}
	if unlimited {
		errs.add(name, "reschedule.unlimited", "true; allowed: false (%s)", failIsGang)
	} else if resched != 0 {
		errs.add(name, "reschedule.attempts", "%d; allowed: 0 (%s)", resched, failIsGang)
	}
}

// checkpointRule: every task of member group g that asks for GPUs runs
// on the gpu driver with a checkpoint block, for the gang restarts as
// one and resumes from the step every member committed; a gang that
// accepts restarting from the beginning says so in its meta.
func checkpointRule(g *api.TaskGroup, errs *problems) {
	name := deref(g.Name, "")
	optOut := fmt.Sprintf("or the job's meta.%s = \"none\" (each restart of the gang loses its progress)", contract.MetaGangCheckpoint)
	for _, t := range g.Tasks {
		if !taskHasGPUs(t) {
			continue
		}
		switch _, ok := t.Config["checkpoint"]; {
		case t.Driver != contract.DriverName:
			errs.add(name, fmt.Sprintf("task %q driver", t.Name), "%q cannot checkpoint a member; allowed: %q with a checkpoint block, %s", t.Driver, contract.DriverName, optOut)
		case !ok:
			errs.add(name, fmt.Sprintf("task %q config.checkpoint", t.Name), "none; allowed: a checkpoint block (a gang restarts as one, from the step every member committed), %s", optOut)
		}
	}
}

// localityRe is a node attribute interpolation a constraint can name;
// nodeFields are the ${node.*} ones Nomad has.
var localityRe = regexp.MustCompile(`^\$\{(meta\.[A-Za-z0-9_.-]+|attr\.[A-Za-z0-9_.-]+|node\.(` + strings.ReplaceAll(nodeFields, ".", `\.`) + `))\}$`)

const nodeFields = "unique.id|unique.name|datacenter|region|class|pool"

// hasGPUs says whether a task of g asks for our GPUs, MIG instances or
// MPS shares.
func hasGPUs(g *api.TaskGroup) bool {
	return slices.ContainsFunc(g.Tasks, taskHasGPUs)
}

// taskHasGPUs says whether task t asks for our GPUs, MIG instances or
// MPS shares.
func taskHasGPUs(t *api.Task) bool {
	if t == nil || t.Resources == nil {
		return false
	}
	return slices.ContainsFunc(t.Resources.Devices, func(d *api.RequestedDevice) bool {
		return d != nil && nomadview.IsGPUAsk(nomadview.ParseRequest(d.Name))
	})
}

// hasPort says whether g's network declares a port labelled label.
func hasPort(g *api.TaskGroup, label string) bool {
	for _, n := range g.Networks {
		if n == nil {
			continue
		}
		for _, p := range append(append([]api.Port(nil), n.DynamicPorts...), n.ReservedPorts...) {
			if p.Label == label {
				return true
			}
		}
	}
	return false
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
