package clusterview

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// buildQueue lists the GPU work that waits: unplaced allocations of blocked
// evaluations and pending allocations holding GPUs, longest wait first.
func buildQueue(in *Input) []QueueEntry {
	out := []QueueEntry{}
	type groupKey struct{ ns, job, group string }
	seen := map[groupKey]int{} // → index in out
	for _, e := range in.Blocked {
		if e == nil || e.Status != api.EvalStatusBlocked {
			continue
		}
		k := JobKey{e.Namespace, e.JobID}
		job := in.Jobs[k]
		if job == nil || (job.Stop != nil && *job.Stop) {
			continue
		}
		since := time.Unix(0, e.CreateTime)
		for _, tg := range sortedKeys(e.FailedTGAllocs) {
			m := e.FailedTGAllocs[tg]
			asks, gpu := groupAsks(job, tg)
			if !gpu {
				continue
			}
			pool := jobPool(job, m)
			if !in.Filter.matchPool(pool) {
				continue
			}
			count := 0
			if s := in.Summaries[k]; s != nil {
				count = s.Summary[tg].Queued
			}
			if count <= 0 && m != nil {
				// No summary yet (the scheduler records the queued
				// counts just after it writes the blocked eval).
				count = m.CoalescedFailures + 1
			}
			if count <= 0 {
				count = 1
			}
			q := QueueEntry{
				Job: e.JobID, Namespace: e.Namespace, Group: tg, Pool: pool, State: StateBlocked,
				Devices: asks, Count: count, Since: since.UTC(), WaitingSeconds: waitSeconds(in.Now, since),
				Reason: FailureReason(m, e.QuotaLimitReached),
			}
			gk := groupKey{e.Namespace, e.JobID, tg}
			if i, dup := seen[gk]; dup {
				if q.Since.Before(out[i].Since) {
					out[i] = q
				}
				continue
			}
			seen[gk] = len(out)
			out = append(out, q)
		}
	}

	nodes := map[string]*api.NodeListStub{}
	for _, n := range in.Nodes {
		if n != nil {
			nodes[n.ID] = n
		}
	}
	for _, a := range in.Allocs {
		if a == nil || a.ClientStatus != api.AllocClientStatusPending || a.AllocatedResources == nil {
			continue
		}
		asks := heldAsks(a)
		if len(asks) == 0 {
			continue
		}
		name, pool := a.NodeName, ""
		if n := nodes[a.NodeID]; n != nil {
			name, pool = n.Name, n.NodePool
			if len(in.Filter.Nodes) > 0 && !in.Filter.matchNode(n) {
				continue
			}
		} else if len(in.Filter.Nodes) > 0 {
			continue
		}
		if !in.Filter.matchPool(pool) {
			continue
		}
		if name == "" {
			name = shortID(a.NodeID)
		}
		reason := "placed on " + name + ", not running yet"
		if a.ClientDescription != "" {
			reason += ": " + a.ClientDescription
		}
		since := time.Unix(0, a.CreateTime)
		out = append(out, QueueEntry{
			Job: a.JobID, Namespace: a.Namespace, Group: a.TaskGroup, Pool: pool, State: StatePending,
			Devices: asks, Count: 1, Since: since.UTC(), WaitingSeconds: waitSeconds(in.Now, since),
			Reason: reason, Node: name,
		})
	}
	slices.SortStableFunc(out, func(a, b QueueEntry) int {
		return cmp.Or(-cmp.Compare(a.WaitingSeconds, b.WaitingSeconds),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Job, b.Job), cmp.Compare(a.Group, b.Group),
			cmp.Compare(a.State, b.State))
	})
	return out
}

func waitSeconds(now, since time.Time) int64 {
	if since.IsZero() || since.Unix() <= 0 || now.Before(since) {
		return 0
	}
	return int64(now.Sub(since) / time.Second)
}

// jobPool is the node pool the scheduler placed the group in.
func jobPool(job *api.Job, m *api.AllocationMetric) string {
	switch {
	case m != nil && m.NodePool != "":
		return m.NodePool
	case job.NodePool != nil && *job.NodePool != "":
		return *job.NodePool
	}
	return "default"
}

// groupAsks are the devices one allocation of the job's group asks for
// (summed over its tasks, in first-seen order), and whether any is a GPU,
// MIG instance or MPS share.
func groupAsks(job *api.Job, group string) ([]DeviceAsk, bool) {
	var asks []DeviceAsk
	gpu := false
	for _, tg := range job.TaskGroups {
		if tg == nil || tg.Name == nil || *tg.Name != group {
			continue
		}
		for _, t := range tg.Tasks {
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
				asks = addAsk(asks, d.Name, n)
				if isGPURequest(d.Name) {
					gpu = true
				}
			}
		}
	}
	return asks, gpu
}

func addAsk(asks []DeviceAsk, name string, n int) []DeviceAsk {
	for i := range asks {
		if asks[i].Name == name {
			asks[i].Count += n
			return asks
		}
	}
	return append(asks, DeviceAsk{Name: name, Count: n})
}

// isGPURequest parses a jobspec device name as Nomad does ("type",
// "vendor/type" or "vendor/type/name") and reports whether it can ask for
// our devices.
func isGPURequest(name string) bool {
	parts := strings.SplitN(name, "/", 3)
	if len(parts) == 1 {
		return isGPUDevice("", parts[0])
	}
	return isGPUDevice(parts[0], parts[1])
}

// heldAsks are the GPU devices a placed allocation was given, as asks.
func heldAsks(a *api.AllocationListStub) []DeviceAsk {
	var asks []DeviceAsk
	for _, task := range sortedKeys(a.AllocatedResources.Tasks) {
		tr := a.AllocatedResources.Tasks[task]
		if tr == nil {
			continue
		}
		for _, d := range tr.Devices {
			if d == nil || len(d.DeviceIDs) == 0 || !isGPUDevice(d.Vendor, d.Type) {
				continue
			}
			name := d.Vendor + "/" + d.Type
			if d.Name != "" {
				name += "/" + d.Name
			}
			asks = addAsk(asks, name, len(d.DeviceIDs))
		}
	}
	return asks
}

// FailureReason sums up why the scheduler could not place a task group, in
// the words of `nomad job status`: quotas, nodes filtered by constraint or
// class, resources exhausted.
func FailureReason(m *api.AllocationMetric, quotaReached string) string {
	var parts []string
	if quotaReached != "" {
		parts = append(parts, fmt.Sprintf("quota %q reached", quotaReached))
	}
	if m == nil {
		if len(parts) == 0 {
			return "blocked"
		}
		return strings.Join(parts, "; ")
	}
	if m.NodesEvaluated == 0 {
		s := "no nodes were eligible for evaluation"
		if m.NodePool != "" {
			s += " in node pool " + m.NodePool
		}
		parts = append(parts, s)
	}
	for _, k := range sortedKeys(m.ClassFiltered) {
		parts = append(parts, fmt.Sprintf("class %q filtered %s", k, nodes(m.ClassFiltered[k])))
	}
	for _, k := range sortedKeys(m.ConstraintFiltered) {
		parts = append(parts, fmt.Sprintf("constraint %q filtered %s", k, nodes(m.ConstraintFiltered[k])))
	}
	if m.NodesExhausted > 0 {
		if len(m.DimensionExhausted) == 0 {
			parts = append(parts, "resources exhausted on "+nodes(m.NodesExhausted))
		}
		for _, k := range sortedKeys(m.DimensionExhausted) {
			parts = append(parts, fmt.Sprintf("%s exhausted on %s", k, nodes(m.DimensionExhausted[k])))
		}
	}
	if len(m.QuotaExhausted) > 0 {
		parts = append(parts, "quota exhausted: "+strings.Join(m.QuotaExhausted, ", "))
	}
	if len(parts) == 0 {
		return "blocked"
	}
	return strings.Join(parts, "; ")
}

func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
