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
)

// An MPS share's utilisation is its task's utilisation of the share, as the
// driver publishes it next to the GPU's MPS pipes: the stat "MPS
// utilization" (0 without a task) and nomad_gpu_device_utilization_percent
// (the GPU's where the driver publishes none for the share).
func TestMPSShareUtilization(t *testing.T) {
	const absent = -1.0
	cases := []struct {
		name string
		file func(n *simNode) string // "" writes none
		// per share 0 and 1: the stat (absent: none) and the metric
		stat, metric [2]float64
	}{
		{name: "no driver: no task on either share",
			stat: [2]float64{0, 0}, metric: [2]float64{40, 40}},
		{name: "an older driver publishes memory only",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:1000}}`, time.Now().Format(time.RFC3339Nano), n.share(1))
			},
			stat: [2]float64{0, absent}, metric: [2]float64{40, 40}},
		{name: "the task's utilisation of its share; 0 without a task",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:1000},"util":{%q:87.5}}`, time.Now().Format(time.RFC3339Nano), n.share(1), n.share(1))
			},
			stat: [2]float64{0, 87.5}, metric: [2]float64{0, 87.5}},
		{name: "a task the driver cannot measure: the GPU's",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:1000},"util":{}}`, time.Now().Format(time.RFC3339Nano), n.share(1))
			},
			stat: [2]float64{0, absent}, metric: [2]float64{0, 40}},
		{name: "a stale file is no driver",
			file: func(n *simNode) string {
				return fmt.Sprintf(`{"updated_at":%q,"shares":{%q:1000},"util":{%q:87.5}}`, time.Now().Add(-time.Hour).Format(time.RFC3339Nano), n.share(1), n.share(1))
			},
			stat: [2]float64{0, 0}, metric: [2]float64{40, 40}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newSimNode(t, nil)
			n.ctl.SetUtilization(n.gpuUUID(0), 40, 10)
			n.ctl.SetUtilization(n.gpuUUID(2), 80, 30)
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
				tm := s.telemetry(n.gpuUUID(2))
				return tm != nil && tm.GPUUtilPercent != nil && *tm.GPUUtilPercent == 80
			})

			st := n.p.collectStats(time.Now())
			for k := range 2 {
				ds := findInstance(st, n.share(k))
				if ds == nil {
					t.Fatalf("share %d: no stats", k)
				}
				v := ds.Stats.Attributes[statShareUtil]
				switch {
				case c.stat[k] == absent && v != nil:
					t.Errorf("share %d: %s = %v, want none", k, statShareUtil, *v.FloatNumerator)
				case c.stat[k] != absent && (v == nil || v.FloatNumerator == nil || *v.FloatNumerator != c.stat[k] || v.Unit != "%"):
					t.Errorf("share %d: %s = %+v, want %v %%", k, statShareUtil, v, c.stat[k])
				}
			}
			if ds := findInstance(st, n.gpuUUID(2)); ds == nil || ds.Stats.Attributes[statShareUtil] != nil {
				t.Errorf("a whole GPU has no %s", statShareUtil)
			}

			want := expect(contract.MetricDeviceUtilization,
				row(contract.MetricDeviceUtilization, n.share(0), "mps", "0", c.metric[0]),
				row(contract.MetricDeviceUtilization, n.share(1), "mps", "0", c.metric[1]),
				row(contract.MetricDeviceUtilization, n.migUUID(0), "mig", "1", 0),
				row(contract.MetricDeviceUtilization, n.migUUID(1), "mig", "1", 0),
				row(contract.MetricDeviceUtilization, n.gpuUUID(2), "gpu", "2", 80),
			)
			if err := testutil.CollectAndCompare(n.p.metrics, strings.NewReader(want), contract.MetricDeviceUtilization); err != nil {
				t.Error(err)
			}
		})
	}
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
			idx, uuid := ds.Stats.Attributes[statGPUIndex], ds.Stats.Attributes[statGPUUUID]
			if idx == nil || idx.IntNumerator == nil || *idx.IntNumerator != int64(gpuIdx) {
				t.Errorf("%s = %+v, want %d", statGPUIndex, idx, gpuIdx)
			}
			if uuid == nil || uuid.String == nil || *uuid.String != n.gpuUUID(gpuIdx) {
				t.Errorf("%s = %+v, want %s", statGPUUUID, uuid, n.gpuUUID(gpuIdx))
			}
		})
	}
}
