package topview

import (
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Fixture API objects: a node with two whole GPUs, a GPU in MIG mode
// (two instances), a GPU shared as 4 MPS shares and a non-nvidia device;
// allocations holding a whole GPU, a MIG instance and an MPS share.

const (
	gpuA    = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	gpuB    = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
	gpuM    = "GPU-cccccccc-0000-0000-0000-000000000000" // MPS
	gpuMIG  = "GPU-eeeeeeee-0000-0000-0000-000000000000" // in MIG mode
	migA    = "MIG-11111111-0000-0000-0000-000000000000"
	migB    = "MIG-22222222-0000-0000-0000-000000000000"
	h100    = "NVIDIA H100 80GB HBM3"
	node1ID = "11111111-aaaa-bbbb-cccc-000000000001"
	node2ID = "22222222-aaaa-bbbb-cccc-000000000002"
	node3ID = "33333333-aaaa-bbbb-cccc-000000000003"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func strAttr(s string) *api.Attribute { return &api.Attribute{StringVal: ptr(s)} }
func intAttr(n int64, unit string) *api.Attribute {
	return &api.Attribute{IntVal: ptr(n), Unit: unit}
}

func inst(id, bus string, healthy bool, desc string) *api.NodeDevice {
	return &api.NodeDevice{ID: id, Healthy: healthy, HealthDescription: desc, Locality: &api.NodeDeviceLocality{PciBusID: bus}}
}

func shareID(gpu string, n int) string { return gpu + "-mps-" + string(rune('0'+n)) }

func gpuNode() *api.NodeListStub {
	return &api.NodeListStub{
		ID: node1ID, Name: "gpu-1", Datacenter: "dc1", NodePool: "gpu", NodeClass: "h100",
		Status: "ready", SchedulingEligibility: api.NodeSchedulingEligible,
		Drivers: map[string]*api.DriverInfo{"gpu": {Detected: true, Healthy: true}},
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
			{Vendor: "nvidia", Type: "gpu", Name: h100,
				Attributes: map[string]*api.Attribute{"memory": intAttr(81920, "MiB")},
				Instances: []*api.NodeDevice{
					inst(gpuB, "0000:2a:00.0", false, "XID 79 (GPU has fallen off the bus)"),
					inst(gpuA, "0000:18:00.0", true, ""),
				}},
			{Vendor: "nvidia", Type: "mig", Name: "1g.10gb",
				Attributes: map[string]*api.Attribute{
					"memory": intAttr(10240, "MiB"), "mig_profile": strAttr("1g.10gb"),
					"parent_product": strAttr(h100), "parent_memory": intAttr(81920, "MiB"),
				},
				Instances: []*api.NodeDevice{inst(migB, "0000:db:00.0", true, ""), inst(migA, "0000:db:00.0", true, "")}},
			{Vendor: "nvidia", Type: "mps", Name: gpuM,
				Attributes: map[string]*api.Attribute{
					"memory": intAttr(20480, "MiB"), "mps_shares": intAttr(4, ""), "mps_memory_limit": intAttr(20480, "MiB"),
					"parent_product": strAttr(h100), "parent_memory": intAttr(81920, "MiB"), "parent_index": intAttr(4, ""),
				},
				Instances: []*api.NodeDevice{
					inst(shareID(gpuM, 3), "0000:9a:00.0", true, ""), inst(shareID(gpuM, 0), "0000:9a:00.0", true, ""),
					inst(shareID(gpuM, 1), "0000:9a:00.0", true, ""), inst(shareID(gpuM, 2), "0000:9a:00.0", true, ""),
				}},
			{Vendor: "xilinx", Type: "fpga", Name: "u250", Instances: []*api.NodeDevice{inst("fpga-0", "0000:01:00.0", true, "")}},
		}},
	}
}

// otherNodes: a GPU node in another pool whose stats fail, and a node
// without GPUs.
func otherNodes() []*api.NodeListStub {
	n2 := &api.NodeListStub{
		ID: node2ID, Name: "gpu-2", Datacenter: "dc1", NodePool: "batch", Status: "ready",
		SchedulingEligibility: api.NodeSchedulingIneligible, Drain: true,
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
			{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-40GB", Instances: []*api.NodeDevice{{ID: "GPU-dddddddd-0000", Healthy: true}}},
		}},
	}
	n3 := &api.NodeListStub{ID: node3ID, Name: "cpu-1", NodePool: "default", Status: "ready", SchedulingEligibility: api.NodeSchedulingEligible}
	return []*api.NodeListStub{n2, n3}
}

func allocStub(id, job, node, status string, devs ...*api.AllocatedDeviceResource) *api.AllocationListStub {
	return &api.AllocationListStub{
		ID: id, Namespace: "default", JobID: job, JobType: "batch", TaskGroup: "g", NodeID: node, ClientStatus: status,
		CreateTime: t0.Add(-30 * time.Second).UnixNano(),
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: devs},
		}},
	}
}

func fixtureAllocs() []*api.AllocationListStub {
	return []*api.AllocationListStub{
		allocStub("a0000001-0000", "train", node1ID, "running",
			&api.AllocatedDeviceResource{Vendor: "nvidia", Type: "gpu", Name: h100, DeviceIDs: []string{gpuA}}),
		allocStub("a0000002-0000", "infer", node1ID, "running",
			&api.AllocatedDeviceResource{Vendor: "nvidia", Type: "mig", Name: "1g.10gb", DeviceIDs: []string{migA}}),
		allocStub("a0000003-0000", "notebook", node1ID, "pending",
			&api.AllocatedDeviceResource{Vendor: "nvidia", Type: "mps", Name: gpuM, DeviceIDs: []string{shareID(gpuM, 1), shareID(gpuM, 2)}}),
		// Terminal: holds nothing.
		allocStub("a0000004-0000", "old", node1ID, "complete",
			&api.AllocatedDeviceResource{Vendor: "nvidia", Type: "gpu", Name: h100, DeviceIDs: []string{gpuB}}),
		// Not a GPU.
		allocStub("a0000005-0000", "fpga", node1ID, "running",
			&api.AllocatedDeviceResource{Vendor: "xilinx", Type: "fpga", Name: "u250", DeviceIDs: []string{"fpga-0"}}),
	}
}

func fstat(f float64, unit string) *api.StatValue {
	return &api.StatValue{FloatNumeratorVal: ptr(f), Unit: unit}
}
func istat(n, d int64, unit string) *api.StatValue {
	v := &api.StatValue{IntNumeratorVal: ptr(n), Unit: unit}
	if d > 0 {
		v.IntDenominatorVal = ptr(d)
	}
	return v
}

func devStats(attrs map[string]*api.StatValue) *api.DeviceStats {
	return &api.DeviceStats{Stats: &api.StatObject{Attributes: attrs}}
}

// onGPU adds what every device's stats say of its physical GPU: its index
// and UUID, temperature (C) and power (W).
func onGPU(index int64, uuid string, temp, power float64, attrs map[string]*api.StatValue) *api.DeviceStats {
	attrs["GPU index"] = istat(index, 0, "")
	attrs["GPU UUID"] = &api.StatValue{StringVal: ptr(uuid)}
	attrs["Temperature"] = istat(int64(temp), 0, "C")
	attrs["Power"] = fstat(power, "W")
	return devStats(attrs)
}

func fixtureStats() *api.HostStats {
	gpuTelemetry := map[string]*api.StatValue{"GPU utilization": fstat(40, "%"), "Memory used": istat(30000, 81920, "MiB")}
	// A share's plain "GPU utilization" and "Memory used" are its task's,
	// as "MPS utilization" and "MPS memory used"; the GPU's are "Physical
	// GPU ...".
	share := func(used int64, util float64) *api.DeviceStats {
		a := map[string]*api.StatValue{
			"Physical GPU utilization": fstat(55, "%"), "Physical GPU memory used": istat(12000, 81920, "MiB"),
			"GPU utilization": fstat(util, "%"), "Memory used": istat(used, 20480, "MiB"),
			"MPS utilization": fstat(util, "%"), "MPS memory used": istat(used, 20480, "MiB"), "MPS memory limit": istat(20480, 0, "MiB"),
		}
		return onGPU(4, gpuM, 51, 250.5, a)
	}
	return &api.HostStats{DeviceStats: []*api.DeviceGroupStats{
		{Vendor: "nvidia", Type: "gpu", Name: h100, InstanceStats: map[string]*api.DeviceStats{
			gpuA: onGPU(0, gpuA, 45, 300, gpuTelemetry),
			gpuB: onGPU(1, gpuB, 30, 70, map[string]*api.StatValue{"GPU utilization": fstat(0, "%"), "Memory used": istat(0, 81920, "MiB")}),
		}},
		{Vendor: "nvidia", Type: "mig", Name: "1g.10gb", InstanceStats: map[string]*api.DeviceStats{
			migA: onGPU(7, gpuMIG, 38, 120, map[string]*api.StatValue{"Memory used": istat(2048, 10240, "MiB")}),
			migB: onGPU(7, gpuMIG, 38, 120, map[string]*api.StatValue{"Memory used": istat(1, 10240, "GiB")}),
		}},
		{Vendor: "nvidia", Type: "mps", Name: gpuM, InstanceStats: map[string]*api.DeviceStats{
			shareID(gpuM, 0): share(0, 0), shareID(gpuM, 1): share(1000, 100), shareID(gpuM, 2): share(500, 100), shareID(gpuM, 3): share(0, 0),
		}},
	}}
}

func jobWithDevices(id, pool string, devs ...*api.RequestedDevice) *api.Job {
	j := &api.Job{
		ID: ptr(id), Namespace: ptr("default"), Type: ptr("batch"), JobModifyIndex: ptr(uint64(10)),
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Tasks: []*api.Task{
			{Name: "a", Resources: &api.Resources{Devices: devs}},
			{Name: "b", Resources: &api.Resources{Devices: devs}},
		}}},
	}
	if pool != "" {
		j.NodePool = ptr(pool)
	}
	return j
}

func blockedEval(id, job string, created time.Time, m *api.AllocationMetric) *api.Evaluation {
	return &api.Evaluation{
		ID: id, Namespace: "default", JobID: job, Status: api.EvalStatusBlocked, JobModifyIndex: 10, ModifyIndex: 10,
		CreateTime: created.UnixNano(), FailedTGAllocs: map[string]*api.AllocationMetric{"g": m},
	}
}

func missingDevices() *api.AllocationMetric {
	return &api.AllocationMetric{NodesEvaluated: 1, NodesFiltered: 1, NodePool: "gpu", ConstraintFiltered: map[string]int{"missing devices": 1}}
}

func fixtureInput() *Input {
	nodes := append([]*api.NodeListStub{gpuNode()}, otherNodes()...)
	big := jobWithDevices("big", "gpu", &api.RequestedDevice{Name: "nvidia/gpu", Count: ptr(uint64(3))})
	listed := listedJob(big)
	// The summary was written after the blocked evaluation (index 10).
	listed.JobSummary = &api.JobSummary{ModifyIndex: 20, Summary: map[string]api.TaskGroupSummary{"g": {Queued: 2}}}
	return &Input{
		Now: t0,
		Snapshot: &nomadview.Snapshot{
			Nodes:   nodes,
			Allocs:  fixtureAllocs(),
			Blocked: []*api.Evaluation{blockedEval("e1", "big", t0.Add(-95*time.Second), missingDevices())},
			Specs:   map[JobKey]*api.Job{{Namespace: "default", ID: "big"}: big},
			Jobs:    map[JobKey]*api.JobListStub{{Namespace: "default", ID: "big"}: listed},
		},
		Stats: map[string]NodeStats{
			node1ID: {Host: fixtureStats()},
			node2ID: {Err: errorString("Unexpected response code: 500 (rpc error: no path to node)")},
		},
	}
}

// listedJob is job as the jobs list shows it, without a summary.
func listedJob(job *api.Job) *api.JobListStub {
	j := &api.JobListStub{ID: *job.ID, Namespace: "default"}
	if job.Type != nil {
		j.Type = *job.Type
	}
	if job.Priority != nil {
		j.Priority = *job.Priority
	}
	return j
}

type errorString string

func (e errorString) Error() string { return string(e) }
