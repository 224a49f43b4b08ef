package sizing

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

func TestSampleTasks(t *testing.T) {
	f := func(v float64) *api.StatValue { return &api.StatValue{FloatNumeratorVal: &v} }
	mib := func(used, total int64) *api.StatValue {
		return &api.StatValue{IntNumeratorVal: &used, IntDenominatorVal: &total}
	}
	stats := map[string][]*api.DeviceGroupStats{
		"n1": {
			{Vendor: "nvidia", Type: "mps", Name: "GPU-a", InstanceStats: map[string]*api.DeviceStats{
				"s0": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{contract.StatShareUtil: f(100), contract.StatGPUUtil: f(50), contract.StatShareUsed: mib(1024, 10240)}}},
				"s1": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{contract.StatShareUtil: f(90), contract.StatGPUUtil: f(50), contract.StatShareUsed: mib(512, 10240)}}},
			}},
			{Vendor: "nvidia", Type: "gpu", Name: "H100", InstanceStats: map[string]*api.DeviceStats{
				"GPU-x": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{contract.StatGPUUtil: f(30), contract.StatMemUsed: mib(2048, 81920)}}},
				"GPU-y": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{contract.StatMemUsed: mib(0, 81920)}}},
			}},
		},
	}
	allocs := []*api.AllocationListStub{
		{ID: "a1", Namespace: "default", JobID: "train", TaskGroup: "g", NodeID: "n1", AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"mps":   {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "mps", Name: "GPU-a", DeviceIDs: []string{"s0", "s1"}}}},
			"gpu":   {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H100", DeviceIDs: []string{"GPU-x"}}}},
			"blind": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H100", DeviceIDs: []string{"GPU-y"}}}},
			"cpu":   {},
		}}},
	}
	now := time.Unix(1000, 0)
	got := map[string]history.Sample{}
	for _, s := range SampleTasks(GPUTasks(allocs), stats, now) {
		got[s.Key.Task] = s
	}
	want := map[string]history.Sample{
		"mps": {Key: history.Key{Namespace: "default", Job: "train", Group: "g", Task: "mps"}, AllocID: "a1", Time: now,
			Slice: history.Slice{Kind: "mps", Count: 2}, UtilPct: 95, MemBytes: 1536 << 20, MemLimitBytes: 20480 << 20},
		"gpu": {Key: history.Key{Namespace: "default", Job: "train", Group: "g", Task: "gpu"}, AllocID: "a1", Time: now,
			Slice: history.Slice{Kind: "gpu", Count: 1}, UtilPct: 30, MemBytes: 2048 << 20, MemLimitBytes: 81920 << 20},
	}
	if len(got) != len(want) {
		t.Fatalf("samples for %v, want mps and gpu only (blind has no utilisation, cpu no GPU)", got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %+v\nwant %+v", k, got[k], w)
		}
	}
}

// TestRunOfSubmitted: a run's submission is its job's when the job was
// submitted no later than the allocation was created; a later version
// runs in later allocations, so it says nothing of this one.
func TestRunOfSubmitted(t *testing.T) {
	td := TaskDevices{Key: history.Key{Task: "t"}, Devices: &api.AllocatedDeviceResource{Type: "gpu", Name: "H100", DeviceIDs: []string{"GPU-1"}}}
	created := time.Unix(1000, 0)
	cases := []struct {
		name string
		job  *api.JobListStub
		want time.Time
	}{
		{"submitted before", &api.JobListStub{SubmitTime: created.Add(-time.Minute).UnixNano()}, created.Add(-time.Minute)},
		{"submitted as created", &api.JobListStub{SubmitTime: created.UnixNano()}, created},
		{"a later version", &api.JobListStub{SubmitTime: created.Add(time.Second).UnixNano()}, time.Time{}},
		{"no submit time", &api.JobListStub{}, time.Time{}},
		{"no job", nil, time.Time{}},
	}
	for _, c := range cases {
		a := api.AllocationListStub{ID: "a", Name: "train.g[2]", CreateTime: created.UnixNano(), ClientStatus: "running"}
		r := RunOf(&a, td, "gpu", c.job)
		if !r.Submitted.Equal(c.want) || r.Name != "train.g[2]" {
			t.Errorf("%s: submitted %v, name %q; want %v, train.g[2]", c.name, r.Submitted, r.Name, c.want)
		}
	}
}

func TestRunOf(t *testing.T) {
	td := TaskDevices{Key: history.Key{Task: "t"}, Devices: &api.AllocatedDeviceResource{Type: "mig", Name: "1g.10gb", DeviceIDs: []string{"MIG-1"}}}
	start, end := time.Unix(100, 0), time.Unix(200, 0)
	// The driver's events (driver/lifecycle.go): the sizer reads their
	// details; the messages, whatever they say, decide nothing.
	watchdog := func(action, msg string) *api.TaskEvent {
		return &api.TaskEvent{Type: api.TaskDriverMessage, DriverMessage: msg, Details: map[string]string{
			contract.EventDetailGPU: "MIG-1", contract.EventDetailUsedMiB: "11000", contract.EventDetailLimitMiB: "10240", contract.EventDetailAction: action}}
	}
	killed := watchdog(contract.EventActionKill, "over its limit")
	warned := watchdog(contract.EventActionWarn, "GPU memory limit exceeded on MIG-1: using 11000 MiB, limit 10240 MiB; killing the task")
	cases := []struct {
		name  string
		alloc api.AllocationListStub
		want  history.Outcome
	}{
		{"running", api.AllocationListStub{ClientStatus: "running"}, history.OutcomeRunning},
		{"complete", api.AllocationListStub{ClientStatus: "complete"}, history.OutcomeComplete},
		{"failed", api.AllocationListStub{ClientStatus: "failed", TaskStates: map[string]*api.TaskState{"t": {Events: []*api.TaskEvent{nil, warned}}}}, history.OutcomeFailed},
		{"killed for memory", api.AllocationListStub{ClientStatus: "failed", TaskStates: map[string]*api.TaskState{"t": {Events: []*api.TaskEvent{killed}}}}, history.OutcomeKilled},
		{"preempted", api.AllocationListStub{ClientStatus: "complete", PreemptedByAllocation: "other"}, history.OutcomePreempted},
		{"stopped (moved)", api.AllocationListStub{ClientStatus: "complete", TaskStates: map[string]*api.TaskState{"t": {StartedAt: start, FinishedAt: end,
			Events: []*api.TaskEvent{{Type: api.TaskStarted}, {Type: api.TaskKilling}, {Type: api.TaskTerminated}, {Type: api.TaskKilled}}}}}, history.OutcomeStopped},
		{"ended by itself", api.AllocationListStub{ClientStatus: "complete", TaskStates: map[string]*api.TaskState{"t": {StartedAt: start, FinishedAt: end,
			Events: []*api.TaskEvent{{Type: api.TaskStarted}, {Type: api.TaskTerminated}}}}}, history.OutcomeComplete},
		{"restarted by Nomad, then ended by itself", api.AllocationListStub{ClientStatus: "complete", TaskStates: map[string]*api.TaskState{"t": {StartedAt: start, FinishedAt: end,
			Events: []*api.TaskEvent{{Type: api.TaskStarted}, {Type: api.TaskKilling}, {Type: api.TaskRestarting}, {Type: api.TaskStarted}, {Type: api.TaskTerminated}}}}}, history.OutcomeComplete},
		{"lost", api.AllocationListStub{ClientStatus: "lost"}, history.OutcomeLost},
	}
	for _, c := range cases {
		c.alloc.ID = "a"
		if c.alloc.TaskStates == nil {
			c.alloc.TaskStates = map[string]*api.TaskState{"t": {StartedAt: start, FinishedAt: end}}
		}
		r := RunOf(&c.alloc, td, "gpu", &api.JobListStub{Priority: 50})
		if r.Outcome != c.want || r.Slice != (history.Slice{Kind: "mig", Count: 1, Profile: "1g.10gb"}) || r.Pool != "gpu" || r.Priority != 50 {
			t.Errorf("%s: got %+v, want outcome %s", c.name, r, c.want)
		}
	}
}
