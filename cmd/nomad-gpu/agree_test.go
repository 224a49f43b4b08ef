package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/apm"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
	"github.com/nomad-gpu/nomad-gpu/topview"
)

// The acceptance test of the one read model: `nomad-gpu top -json` and the
// APM answer the same queue and the same free slices for one snapshot.

var agreeT0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

const agreeMPSGPU = "GPU-cccccccc-0000-0000-0000-000000000000"

// agreeDevice is a device group of instances ids ("!" first: unhealthy):
// a whole GPU at a PCI bus of its own, slices at their group's.
func agreeDevice(typ, name string, attrs map[string]*api.Attribute, ids ...string) *api.NodeDeviceResource {
	d := &api.NodeDeviceResource{Vendor: contract.Vendor, Type: typ, Name: name, Attributes: attrs}
	for _, id := range ids {
		healthy := id[0] != '!'
		if !healthy {
			id = id[1:]
		}
		bus := "bus-" + name
		if typ == contract.SliceGPU {
			bus = "bus-" + id
		}
		d.Instances = append(d.Instances, &api.NodeDevice{ID: id, Healthy: healthy, Locality: &api.NodeDeviceLocality{PciBusID: bus}})
	}
	return d
}

func agreeNode(id, pool string, drain bool, devs ...*api.NodeDeviceResource) *api.NodeListStub {
	return &api.NodeListStub{ID: id, Name: id, NodePool: pool, Datacenter: "dc1", Status: api.NodeStatusReady,
		SchedulingEligibility: api.NodeSchedulingEligible, Drain: drain,
		NodeResources: &api.NodeResources{Devices: devs}}
}

func agreeAlloc(id, job, node, status string, d *api.NodeDeviceResource, dev string) *api.AllocationListStub {
	return &api.AllocationListStub{ID: id, Namespace: "default", JobID: job, TaskGroup: "g", NodeID: node,
		ClientStatus: status, CreateTime: agreeT0.Add(-time.Minute).UnixNano(),
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: d.Vendor, Type: d.Type, Name: d.Name, DeviceIDs: []string{dev}}}},
		}}}
}

// agreeBlocked is a blocked evaluation of job id (group g asking for count
// of device) with failed placements failed, and the job's summary saying
// queued at summaryIndex.
func agreeBlocked(s *nomadview.Snapshot, id, pool, device string, count uint64, failed int, evalIndex, summaryIndex uint64, queued int) {
	k := nomadview.JobKey{Namespace: "default", ID: id}
	s.Blocked = append(s.Blocked, &api.Evaluation{ID: "eval-" + id, Namespace: "default", JobID: id, Status: api.EvalStatusBlocked,
		Priority: 50, ModifyIndex: evalIndex, CreateTime: agreeT0.Add(-10 * time.Minute).UnixNano(),
		FailedTGAllocs: map[string]*api.AllocationMetric{"g": {NodePool: pool, CoalescedFailures: failed - 1}}})
	s.Specs[k] = &api.Job{ID: &id, Namespace: ptrTo("default"), NodePool: &pool, TaskGroups: []*api.TaskGroup{{Name: ptrTo("g"),
		Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: device, Count: &count}}}}}}}}
	s.Jobs[k] = &api.JobListStub{ID: id, Namespace: "default", Priority: 50,
		JobSummary: &api.JobSummary{ModifyIndex: summaryIndex, Summary: map[string]api.TaskGroupSummary{"g": {Queued: queued}}}}
}

// agreeSnapshot: pool train has a node of four whole GPUs (one held, one
// unhealthy) and a draining one; pool infer a GPU in MIG mode (three
// 1g.10gb, one held by a pending allocation; one 3g.40gb) and a GPU of
// four MPS shares (one held). Queued: "done" (its summary, newer than its
// blocked evaluation, says Queued=0: nothing), "fresh" (its summary is
// older than its evaluation and says 0: the evaluation's 3 failures
// count) and "wide" (summary newer, 2 queued).
func agreeSnapshot() *nomadview.Snapshot {
	mib := func(n int64) *api.Attribute { return &api.Attribute{IntVal: &n, Unit: "MiB"} }
	str := func(s string) *api.Attribute { return &api.Attribute{StringVal: &s} }
	whole := agreeDevice(contract.SliceGPU, "H100", map[string]*api.Attribute{contract.AttrMemory: mib(81920)}, "g0", "g1", "!g2", "g3")
	spare := agreeDevice(contract.SliceGPU, "H100", nil, "d0", "d1")
	mig1 := agreeDevice(contract.SliceMIG, "1g.10gb", map[string]*api.Attribute{contract.AttrMIGProfile: str("1g.10gb")}, "m0", "m1", "m2")
	mig3 := agreeDevice(contract.SliceMIG, "3g.40gb", map[string]*api.Attribute{contract.AttrMIGProfile: str("3g.40gb")}, "m3")
	mig3.Instances[0].Locality.PciBusID = "bus-1g.10gb" // the same GPU as the 1g.10gb instances
	var shares []string
	for i := range 4 {
		shares = append(shares, contract.ShareID(agreeMPSGPU, i))
	}
	mps := agreeDevice(contract.SliceMPS, agreeMPSGPU, map[string]*api.Attribute{contract.AttrMPSShares: &api.Attribute{IntVal: ptrTo(int64(4))}}, shares...)
	s := &nomadview.Snapshot{
		Taken: agreeT0,
		Nodes: []*api.NodeListStub{
			agreeNode("whole", "train", false, whole), agreeNode("drained", "train", true, spare),
			agreeNode("mig", "infer", false, mig1, mig3), agreeNode("mps", "infer", false, mps),
		},
		Allocs: []*api.AllocationListStub{
			agreeAlloc("a-train", "train", "whole", api.AllocClientStatusRunning, whole, "g1"),
			agreeAlloc("a-pend", "pend", "mig", api.AllocClientStatusPending, mig1, "m0"),
			agreeAlloc("a-share", "serve", "mps", api.AllocClientStatusRunning, mps, shares[0]),
		},
		Jobs:  map[nomadview.JobKey]*api.JobListStub{},
		Specs: map[nomadview.JobKey]*api.Job{},
	}
	agreeBlocked(s, "done", "train", "nvidia/gpu", 2, 4, 10, 20, 0)
	agreeBlocked(s, "fresh", "train", "nvidia/gpu", 2, 3, 30, 25, 0)
	agreeBlocked(s, "wide", "infer", "nvidia/mig/3g.40gb", 1, 5, 40, 41, 2)
	for _, id := range []string{"train", "pend", "serve"} {
		s.Jobs[nomadview.JobKey{Namespace: "default", ID: id}] = &api.JobListStub{ID: id, Namespace: "default", Priority: 50}
	}
	return s
}

func TestTopAndAPMAgree(t *testing.T) {
	snap := agreeSnapshot()

	var out bytes.Buffer
	if err := writeTopJSON(&out, topview.Build(&topview.Input{Snapshot: snap, Now: agreeT0})); err != nil {
		t.Fatal(err)
	}
	var top topview.View
	if err := json.Unmarshal(out.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	fig := apm.SnapshotOf(snap, false)
	fig.Now = agreeT0
	figures := apm.ComputeFigures(fig, apm.FigureOptions{})

	wantQueue := map[string]int{
		"train blocked nvidia/gpu allocs": 3, "train blocked nvidia/gpu devices": 6,
		"infer blocked nvidia/mig/3g.40gb allocs": 2, "infer blocked nvidia/mig/3g.40gb devices": 2,
		"infer pending nvidia/mig/1g.10gb allocs": 1, "infer pending nvidia/mig/1g.10gb devices": 1,
	}
	wantFree := map[string]float64{
		"train gpu": 2, "train GPUs": 2,
		"infer mig/1g.10gb": 2, "infer mig/3g.40gb": 1, "infer mps": 3, "infer GPUs": 2.0/7 + 3.0/7 + 3.0/4,
	}
	cases := []struct {
		name           string
		top, apm, want map[string]float64
	}{
		{"queue", toFloat(topQueue(top)), toFloat(apmQueue(figures)), toFloat(wantQueue)},
		{"free", topFree(top), apmFree(figures), wantFree},
		// The free instances are nomadview's FreeSlices (it weighs none).
		{"free slices rule", viewFree(snap), withoutGPUs(apmFree(figures)), withoutGPUs(wantFree)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := roundAll(c.top); !maps.Equal(got, roundAll(c.apm)) || !maps.Equal(got, roundAll(c.want)) {
				t.Errorf("\ntop  %v\napm  %v\nwant %v", sorted(c.top), sorted(c.apm), sorted(c.want))
			}
		})
	}

	// The autoscaler's queries count that queue too.
	for query, want := range map[string]float64{
		"gpus_queued{pool=train}": 6, "gpus_queued{pool=infer,device=nvidia/mig}": 3,
		"allocs_queued{pool=infer,device=nvidia/mig,state=pending}": 1, "allocs_queued{pool=train,state=blocked}": 3,
	} {
		q, err := apm.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := apm.Evaluate(q, fig)
		if err != nil || got != want {
			t.Errorf("%s = %v (%v), want %v", query, got, err, want)
		}
	}
}

// topQueue sums top's queue entries by pool, state and device label.
func topQueue(v topview.View) map[string]int {
	out := map[string]int{}
	for _, q := range v.Queue {
		for _, d := range q.Devices {
			k := fmt.Sprint(q.Pool, " ", q.State, " ", apm.DeviceLabel(nomadview.ParseRequest(d.Name)))
			out[k+" allocs"] += q.Count
			out[k+" devices"] += q.Count * d.Count
		}
	}
	return out
}

// apmQueue sums the APM's queue figures over priority tiers.
func apmQueue(f *apm.Figures) map[string]int {
	out := map[string]int{}
	for k, v := range f.Queue {
		key := fmt.Sprint(k.Pool, " ", k.State, " ", k.Device)
		out[key+" allocs"] += v.Allocs
		out[key+" devices"] += v.Devices
	}
	return out
}

// topFree counts the free instances by pool and kind (gpu, mig/<profile>,
// mps) that top's JSON shows: healthy and held by none, on nodes that
// take new work; and their GPU-equivalents ("<pool> GPUs").
func topFree(v topview.View) map[string]float64 {
	out := map[string]float64{}
	for _, n := range v.Nodes {
		if n.Status != api.NodeStatusReady || !n.Eligible || n.Drain {
			continue
		}
		for _, g := range n.GPUs {
			if g.Mode == topview.ModeWhole {
				if g.Healthy && len(g.Allocations) == 0 {
					out[n.Pool+" gpu"]++
					out[n.Pool+" GPUs"]++
				}
				continue
			}
			for _, s := range g.Slices {
				if !s.Healthy || s.Alloc != nil {
					continue
				}
				kind, weight := "mps", 1/float64(len(g.Slices))
				if s.Type == contract.SliceMIG {
					kind, weight = "mig/"+s.Profile, nomadview.GPUWeight(nomadview.DeviceSpec{Type: contract.SliceMIG, Name: s.Profile})
				}
				out[n.Pool+" "+kind]++
				out[n.Pool+" GPUs"] += weight
			}
		}
	}
	return out
}

// apmFree is the APM's free devices by pool and kind, and its free
// GPU-equivalents.
func apmFree(f *apm.Figures) map[string]float64 {
	out := map[string]float64{}
	for k, v := range f.Capacity {
		d := nomadview.ParseRequest(k.Device)
		kind := d.Type
		if d.Type == contract.SliceMIG {
			kind += "/" + d.Name
		}
		if v.Free > 0 {
			out[k.Pool+" "+kind] += float64(v.Free)
		}
	}
	for k, v := range f.GPUs {
		out[k.Pool+" GPUs"] += v.Free
	}
	return out
}

// viewFree is nomadview's FreeSlices rule, keyed as apmFree.
func viewFree(s *nomadview.Snapshot) map[string]float64 {
	out := map[string]float64{}
	for pool, f := range s.FreeSlices() {
		if f.GPUs > 0 {
			out[pool+" gpu"] = float64(f.GPUs)
		}
		if f.MPS > 0 {
			out[pool+" mps"] = float64(f.MPS)
		}
		for p, n := range f.MIG {
			out[pool+" mig/"+p] = float64(n)
		}
	}
	return out
}

// withoutGPUs leaves out the GPU-equivalents.
func withoutGPUs(m map[string]float64) map[string]float64 {
	out := maps.Clone(m)
	maps.DeleteFunc(out, func(k string, _ float64) bool { return strings.HasSuffix(k, " GPUs") })
	return out
}

func toFloat(m map[string]int) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}

// roundAll rounds to 1e-9, so sums of fractions in another order agree.
func roundAll(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = math.Round(v*1e9) / 1e9
	}
	return out
}

func sorted(m map[string]float64) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%.4g", k, m[k]))
	}
	return out
}
