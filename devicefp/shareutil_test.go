package devicefp

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

// An MPS share's utilisation is its task's utilisation of the share, as the
// driver publishes it next to the GPU's MPS pipes: the stats "GPU
// utilization" and "MPS utilization" and nomad_gpu_device_utilization_percent
// (0 without a task; none where the driver does not measure the share's
// task), never the GPU's, which the share reports as "Physical GPU
// utilization" alone. Likewise its "Memory used" is its task's, the GPU's
// "Physical GPU memory used", and its only memory bandwidth figure is the
// GPU's "Physical GPU memory utilization" (no metric series).
func TestMPSShareUtilization(t *testing.T) {
	const absent = -1.0
	now := func() string { return time.Now().Format(time.RFC3339Nano) }
	cases := []struct {
		name string
		file func(n *simNode) string // nil writes none
		// per share 0 and 1: its own utilisation (absent: none), in the
		// stats "GPU utilization" and "MPS utilization" and the metric, and
		// its task's memory (MiB), in "Memory used" and "MPS memory used"
		own  [2]float64
		used [2]int64
	}{
		{name: "no driver: no task on either share",
			own: [2]float64{0, 0}},
		{name: "an older driver publishes memory only: the task is not measured",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:1000}}`, now(), n.share(1))
			},
			own: [2]float64{0, absent}, used: [2]int64{0, 1000}},
		{name: "the task's utilisation of its share; 0 without a task",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:1000},"util":{%q:87.5}}`, now(), n.share(1), n.share(1))
			},
			own: [2]float64{0, 87.5}, used: [2]int64{0, 1000}},
		{name: "tasks on both shares, each its own",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:300,%q:1000},"util":{%q:20,%q:80}}`, now(), n.share(0), n.share(1), n.share(0), n.share(1))
			},
			own: [2]float64{20, 80}, used: [2]int64{300, 1000}},
		{name: "a task the driver cannot measure: none, not the GPU's",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:1000},"util":{}}`, now(), n.share(1))
			},
			own: [2]float64{0, absent}, used: [2]int64{0, 1000}},
		{name: "a stale file is no driver",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:1000},"util":{%q:87.5}}`, time.Now().Add(-time.Hour).Format(time.RFC3339Nano), n.share(1), n.share(1))
			},
			own: [2]float64{0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newSimNode(t, nil)
			n.ctl.SetUtilization(n.gpuUUID(0), 40, 10)
			n.ctl.SetUtilization(n.gpuUUID(2), 80, 30)
			n.ctl.SetProcessMemory(4243, n.gpuUUID(0), 5000)
			if c.file != nil {
				path := gpu.ShareUsagePath(n.cfg.MPSPipeRoot, n.gpuUUID(0))
				if err := gpu.WriteShareUsage(path, gpu.ShareUsage{}); err != nil { // makes the directory
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(c.file(n)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			eventuallyTrue(t, "sim control read", func() bool {
				s, _ := n.p.newSampler(time.Now())
				g0, g2 := s.telemetry(n.gpuUUID(0)), s.telemetry(n.gpuUUID(2))
				return g0 != nil && g0.MemoryUsedMiB == 5000 && g2 != nil && g2.GPUUtilPercent != nil && *g2.GPUUtilPercent == 80
			})

			st := n.p.collectStats(time.Now())
			for k := range 2 {
				ds := findInstance(st, n.share(k))
				if ds == nil {
					t.Fatalf("share %d: no stats", k)
				}
				attrs := ds.Stats.Attributes
				for _, name := range []string{contract.StatGPUUtil, contract.StatShareUtil} {
					if c.own[k] == absent {
						if v := attrs[name]; v != nil {
							t.Errorf("share %d: %s = %s, want none", k, name, statText(v))
						}
						continue
					}
					wantFloat(t, fmt.Sprintf("share %d: %s", k, name), attrs[name], c.own[k], "%")
				}
				// The GPU's figures, under names of their own.
				wantFloat(t, fmt.Sprintf("share %d: %s", k, contract.StatPhysGPUUtil), attrs[contract.StatPhysGPUUtil], 40, "%")
				wantFloat(t, fmt.Sprintf("share %d: %s", k, contract.StatPhysMemUtil), attrs[contract.StatPhysMemUtil], 10, "%")
				if v := attrs[contract.StatPhysMemUsed]; v == nil || v.IntNumerator == nil || *v.IntNumerator != 5000 || v.IntDenominator == nil || *v.IntDenominator != int64(n.snap.GPUs[0].MemoryMiB) {
					t.Errorf("share %d: %s = %s, want the GPU's 5000 / %d MiB", k, contract.StatPhysMemUsed, statText(v), n.snap.GPUs[0].MemoryMiB)
				}
				if v := attrs[contract.StatMemUtil]; v != nil {
					t.Errorf("share %d: %s = %s, want none (not measured per share)", k, contract.StatMemUtil, statText(v))
				}
				limit := int64(n.snap.GPUs[0].MemoryMiB / 2)
				for _, name := range []string{contract.StatMemUsed, contract.StatShareUsed} {
					if v := attrs[name]; v == nil || v.IntNumerator == nil || *v.IntNumerator != c.used[k] || v.IntDenominator == nil || *v.IntDenominator != limit || v.Unit != "MiB" {
						t.Errorf("share %d: %s = %s, want %d / %d MiB", k, name, statText(v), c.used[k], limit)
					}
				}
				if s := ds.Summary; s == nil || s.IntNumerator == nil || *s.IntNumerator != c.used[k] {
					t.Errorf("share %d: summary %s, want its task's %d MiB", k, statText(s), c.used[k])
				}
			}
			// A whole GPU and a MIG instance keep their own figures under the
			// plain names.
			for _, id := range []string{n.gpuUUID(2), n.migUUID(0)} {
				ds := findInstance(st, id)
				if ds == nil {
					t.Fatalf("%s: no stats", id)
				}
				for _, name := range []string{contract.StatShareUtil, contract.StatPhysGPUUtil, contract.StatPhysMemUtil, contract.StatPhysMemUsed} {
					if ds.Stats.Attributes[name] != nil {
						t.Errorf("%s has %s", id, name)
					}
				}
			}
			wantFloat(t, "whole GPU: "+contract.StatGPUUtil, findInstance(st, n.gpuUUID(2)).Stats.Attributes[contract.StatGPUUtil], 80, "%")
			wantFloat(t, "whole GPU: "+contract.StatMemUtil, findInstance(st, n.gpuUUID(2)).Stats.Attributes[contract.StatMemUtil], 30, "%")

			var shareRows []string
			for k := range 2 {
				if c.own[k] != absent {
					shareRows = append(shareRows, row(contract.MetricDeviceUtilization, n.share(k), "mps", "0", c.own[k]))
				}
			}
			want := expect(contract.MetricDeviceUtilization, append(shareRows,
				row(contract.MetricDeviceUtilization, n.migUUID(0), "mig", "1", 0),
				row(contract.MetricDeviceUtilization, n.migUUID(1), "mig", "1", 0),
				row(contract.MetricDeviceUtilization, n.gpuUUID(2), "gpu", "2", 80),
			)...) + expect(contract.MetricDeviceMemUtilization, // no share series
				row(contract.MetricDeviceMemUtilization, n.migUUID(0), "mig", "1", 0),
				row(contract.MetricDeviceMemUtilization, n.migUUID(1), "mig", "1", 0),
				row(contract.MetricDeviceMemUtilization, n.gpuUUID(2), "gpu", "2", 30),
			)
			if err := testutil.CollectAndCompare(n.p.metrics, strings.NewReader(want), contract.MetricDeviceUtilization, contract.MetricDeviceMemUtilization); err != nil {
				t.Error(err)
			}
		})
	}
}

func wantFloat(t *testing.T, what string, v *structs.StatValue, want float64, unit string) {
	t.Helper()
	if v == nil || v.FloatNumerator == nil || *v.FloatNumerator != want || v.Unit != unit {
		t.Errorf("%s = %s, want %v %s", what, statText(v), want, unit)
	}
}

// statText is a stat as `nomad alloc status -stats` shows it, for messages.
func statText(v *structs.StatValue) string {
	switch {
	case v == nil:
		return "none"
	case v.FloatNumerator != nil:
		return fmt.Sprintf("%v %s", *v.FloatNumerator, v.Unit)
	case v.IntNumerator != nil && v.IntDenominator != nil:
		return fmt.Sprintf("%d / %d %s", *v.IntNumerator, *v.IntDenominator, v.Unit)
	case v.IntNumerator != nil:
		return fmt.Sprintf("%d %s", *v.IntNumerator, v.Unit)
	}
	return fmt.Sprintf("%+v", *v)
}

func findInstance(st *device.Stats, id string) *device.DeviceStats {
	for _, g := range st.Groups {
		if ds, ok := g.Instances[id]; ok {
			return ds
		}
	}
	return nil
}

// Every device's stats name its physical GPU, which its group's attributes
// cannot: whole GPUs share a group per product, MIG instances per profile.
func TestStatsNameThePhysicalGPU(t *testing.T) {
	n := newSimNode(t, nil)
	st := n.p.collectStats(time.Now())
	for _, d := range n.devices() {
		t.Run(d[1]+" "+d[0], func(t *testing.T) {
			ds := findInstance(st, d[0])
			if ds == nil {
				t.Fatal("no stats")
			}
			gpuIdx, _ := strconv.Atoi(d[2])
			idx, uuid := ds.Stats.Attributes[contract.StatGPUIndex], ds.Stats.Attributes[contract.StatGPUUUID]
			if idx == nil || idx.IntNumerator == nil || *idx.IntNumerator != int64(gpuIdx) {
				t.Errorf("%s = %+v, want %d", contract.StatGPUIndex, idx, gpuIdx)
			}
			if uuid == nil || uuid.String == nil || *uuid.String != n.gpuUUID(gpuIdx) {
				t.Errorf("%s = %+v, want %s", contract.StatGPUUUID, uuid, n.gpuUUID(gpuIdx))
			}
		})
	}
}
