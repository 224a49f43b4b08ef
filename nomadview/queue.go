package nomadview

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// QueuedGroup is a task group's allocations that the scheduler could not
// place and that ask for GPUs: the blocked part of the GPU queue.
type QueuedGroup struct {
	Namespace, JobID, Group string
	// Count is how many allocations wait (queuedCount's rule); never
	// below 1.
	Count int
	// Asks are one allocation's device requests, summed by name over the
	// group's tasks in jobspec order; at least one is a GPU ask.
	Asks []DeviceAsk
	// GPUTask is the group's first task, by name, asking for a GPU, MIG
	// instance or MPS share.
	GPUTask string
	// Pool is the node pool the scheduler tried (the evaluation's metric
	// says, else the job's pool, else "default"); Datacenters the job's
	// (["*"] when it names none).
	Pool        string
	Datacenters []string
	// Since is the create time of the oldest blocked evaluation of the
	// group; EvalID that evaluation's ID, Priority its job priority.
	Since    time.Time
	EvalID   string
	Priority int
	// QuotaLimitReached names the quota that held the group back ("" when
	// none: more nodes would help).
	QuotaLimitReached string
	// Metric is the scheduler's account of the failed placement (nil when
	// the evaluation has none); Job and TaskGroup the spec asked for.
	Metric    *api.AllocationMetric
	Job       *api.Job
	TaskGroup *api.TaskGroup
	// Gang: the group's members wait for the controller to admit their
	// gang (all at once); there is no evaluation, and Since is the gang's
	// last submission or scale.
	Gang bool
}

// QueuedGroups lists the GPU groups that blocked evaluations could not
// place, and the member groups of waiting gangs (waitingGangs), one entry
// per (namespace, job, group), in namespace, job, group order. Groups of
// stopped or gone jobs, groups asking for no GPU, groups the summary says
// have nothing queued, and the controller's reservation placeholders
// (their gang is counted) are left out.
func (s *Snapshot) QueuedGroups() []QueuedGroup {
	var out []QueuedGroup
	index := map[[3]string]int{}
	for _, e := range s.Blocked {
		if e == nil || e.Status != api.EvalStatusBlocked {
			continue
		}
		k := JobKey{Namespace: e.Namespace, ID: e.JobID}
		job := s.Specs[k]
		if job == nil || job.Stop != nil && *job.Stop || job.Meta[contract.MetaReservationFor] != "" {
			continue
		}
		for _, tg := range slices.Sorted(maps.Keys(e.FailedTGAllocs)) {
			q, ok := queuedGroup(e, job, tg, s.Summary(k))
			if !ok {
				continue
			}
			key := [3]string{e.Namespace, e.JobID, tg}
			if i, dup := index[key]; dup {
				if q.Since.Before(out[i].Since) {
					out[i] = q
				}
				continue
			}
			index[key] = len(out)
			out = append(out, q)
		}
	}
	for _, q := range s.waitingGangs() {
		if _, dup := index[[3]string{q.Namespace, q.JobID, q.Group}]; !dup {
			out = append(out, q)
		}
	}
	slices.SortFunc(out, func(a, b QueuedGroup) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Group, b.Group))
	})
	return out
}

// waitingGangs are the member groups of the listed gangs still at count 0
// (docs/design/gangs.md): each waits with all its members for the
// controller's admission, and Nomad has no evaluation of it, so without
// them a gang would be work no autoscaler, top or layout sees. A gang
// admitted (its groups at their members) is counted by its evaluations.
func (s *Snapshot) waitingGangs() []QueuedGroup {
	var out []QueuedGroup
	for k, job := range s.Gangs {
		stub := s.Jobs[k]
		if !IsGang(stub) {
			continue
		}
		for _, tg := range job.TaskGroups {
			n, err := contract.GangMembers(tg.Meta[contract.MetaGangMembers])
			if err != nil || tg.Name == nil || tg.Count == nil || *tg.Count != 0 {
				continue
			}
			asks, gpuTask := groupAsks(tg)
			if gpuTask == "" {
				continue
			}
			q := QueuedGroup{
				Namespace: k.Namespace, JobID: k.ID, Group: *tg.Name, Count: n, Asks: asks, GPUTask: gpuTask,
				Pool: jobPool(job, nil), Datacenters: job.Datacenters, Since: time.Unix(0, stub.SubmitTime),
				Priority: stub.Priority, Job: job, TaskGroup: tg, Gang: true,
			}
			if len(q.Datacenters) == 0 {
				q.Datacenters = []string{"*"}
			}
			out = append(out, q)
		}
	}
	return out
}

// queuedGroup is group tg of blocked evaluation e, false when it asks for
// no GPU or nothing of it waits.
func queuedGroup(e *api.Evaluation, job *api.Job, tg string, sum *api.JobSummary) (QueuedGroup, bool) {
	group := taskGroup(job, tg)
	if group == nil {
		return QueuedGroup{}, false
	}
	asks, gpuTask := groupAsks(group)
	if gpuTask == "" {
		return QueuedGroup{}, false
	}
	m := e.FailedTGAllocs[tg]
	n := queuedCount(e, sum, tg)
	if n <= 0 {
		return QueuedGroup{}, false
	}
	q := QueuedGroup{
		Namespace: e.Namespace, JobID: e.JobID, Group: tg, Count: n, Asks: asks, GPUTask: gpuTask,
		Pool: jobPool(job, m), Datacenters: job.Datacenters, Since: time.Unix(0, e.CreateTime),
		EvalID: e.ID, Priority: e.Priority, QuotaLimitReached: e.QuotaLimitReached,
		Metric: m, Job: job, TaskGroup: group,
	}
	if len(q.Datacenters) == 0 {
		q.Datacenters = []string{"*"}
	}
	return q, true
}

// queuedCount is how many allocations of group tg wait behind blocked
// evaluation e: the one rule for a job summary against a blocked eval.
//
// Nomad writes a group's Queued count into the job summary from the
// QueuedAllocations of every evaluation it upserts for the job (the state
// store's nestedUpsertEval), in the same write, and moves the summary's
// ModifyIndex when the count changes. So a summary at least as new as the
// blocked evaluation (Summary.ModifyIndex >= e.ModifyIndex) holds the
// scheduler's latest word on the group, and wins, even when it says 0: a
// blocked evaluation stays in the state store (status blocked) after a
// later evaluation placed everything, the job was scaled down or
// re-registered (the blocked-evals tracker untracks it; the record is
// cancelled later), and counting its failures would show a queue that no
// longer exists.
//
// A summary older than the evaluation has not caught up: the scheduler
// writes the blocked evaluation before it submits the plan and records the
// queued counts on the evaluation it was processing, and this package's
// watches list jobs and evaluations apart. Then, as when the job has no
// summary or the summary no such group, the evaluation's own record
// counts: the placements that failed, CoalescedFailures+1.
//
// The APM, `top` and the controller all count by this rule, decided by
// the indexes rather than by a clock (a settling time would only guess).
func queuedCount(e *api.Evaluation, sum *api.JobSummary, tg string) int {
	failed := 1
	if m := e.FailedTGAllocs[tg]; m != nil {
		failed = m.CoalescedFailures + 1
	}
	if sum == nil || sum.ModifyIndex < e.ModifyIndex {
		return failed
	}
	ts, ok := sum.Summary[tg]
	if !ok {
		return failed
	}
	return ts.Queued
}

func taskGroup(job *api.Job, name string) *api.TaskGroup {
	for _, tg := range job.TaskGroups {
		if tg != nil && tg.Name != nil && *tg.Name == name {
			return tg
		}
	}
	return nil
}

// GroupGPUEquivalents is what one allocation of group asks for in
// GPU-equivalents (DeviceAsk.GPUEquivalents: an MPS share weighs 1 over
// sharesPerGPU, which the group alone does not say).
func GroupGPUEquivalents(group *api.TaskGroup, sharesPerGPU int) float64 {
	asks, _ := groupAsks(group)
	sum := 0.0
	for _, a := range asks {
		sum += a.GPUEquivalents(sharesPerGPU)
	}
	return sum
}

// groupAsks are the devices one allocation of group asks for (summed by
// name over its tasks, in first-seen order) and its first task by name
// that asks for a GPU ("" when none does).
func groupAsks(group *api.TaskGroup) (asks []DeviceAsk, gpuTask string) {
	for _, t := range group.Tasks {
		if t == nil || t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d == nil || d.Name == "" {
				continue
			}
			n := 1
			if d.Count != nil {
				n = int(*d.Count)
			}
			if n <= 0 {
				continue
			}
			spec := ParseRequest(d.Name)
			asks = addAsk(asks, spec, n)
			if IsGPUAsk(spec) && (gpuTask == "" || t.Name < gpuTask) {
				gpuTask = t.Name
			}
		}
	}
	return asks, gpuTask
}

// jobPool is the node pool the scheduler placed the group in.
func jobPool(job *api.Job, m *api.AllocationMetric) string {
	switch {
	case m != nil && m.NodePool != "":
		return m.NodePool
	case job.NodePool != nil && *job.NodePool != "":
		return *job.NodePool
	}
	return api.NodePoolDefault
}

// PendingAlloc is an allocation placed on a node and holding GPUs that
// has not started yet: the pending part of the GPU queue.
type PendingAlloc struct {
	Alloc *api.AllocationListStub
	// Node is the allocation's node, nil when it is not listed.
	Node *api.NodeListStub
	// Held are the GPU devices it was given, summed by name over its
	// tasks in task-name order.
	Held []DeviceAsk
}

// PendingAllocs lists the pending allocations holding GPU devices, in the
// order the allocations were listed.
func (s *Snapshot) PendingAllocs() []PendingAlloc {
	nodes := s.nodeIndex()
	var out []PendingAlloc
	for _, a := range s.Allocs {
		if a == nil || a.ClientStatus != api.AllocClientStatusPending {
			continue
		}
		var held []DeviceAsk
		for _, h := range allocDevices(a) {
			if IsGPUAsk(h.Device) {
				held = addAsk(held, h.Device, len(h.IDs))
			}
		}
		if len(held) > 0 {
			out = append(out, PendingAlloc{Alloc: a, Node: nodes[a.NodeID], Held: held})
		}
	}
	return out
}

// GPUTask is the first task, by name, of the job's group that asks for a
// GPU, MIG instance or MPS share: the task whose history predicts the
// group's run time. "" when none does or there is no such group.
func GPUTask(job *api.Job, group string) string {
	tg := taskGroup(job, group)
	if tg == nil {
		return ""
	}
	_, task := groupAsks(tg)
	return task
}

// DatacenterMatch matches a node's datacenter against a job's datacenter
// pattern, where * matches any run of characters (Nomad's rule).
func DatacenterMatch(pattern, dc string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == dc
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(dc, parts[0]) {
		return false
	}
	dc = dc[len(parts[0]):]
	for i := 1; i < len(parts)-1; i++ {
		j := strings.Index(dc, parts[i])
		if j < 0 {
			return false
		}
		dc = dc[j+len(parts[i]):]
	}
	return strings.HasSuffix(dc, parts[len(parts)-1])
}
