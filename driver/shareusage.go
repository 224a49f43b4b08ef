package driver

import (
	"os"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// publishShareUsage hands the device plugin, every watchdog interval, what
// each MPS share's task uses of the GPU and of its slice's SMs (see
// gpu.ShareUsage).
func (d *Driver) publishShareUsage(rt *runtimeState) {
	t := time.NewTicker(d.config().WatchdogInterval)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
			d.writeShareUsage(rt, time.Now())
		}
	}
}

func (d *Driver) writeShareUsage(rt *runtimeState, now time.Time) {
	perGPU := map[string]map[string]uint64{}
	utilGPU := map[string]map[string]float64{}
	for gpuUUID := range rt.mps.Status() {
		perGPU[gpuUUID] = map[string]uint64{}
		utilGPU[gpuUUID] = map[string]float64{}
	}
	for _, t := range d.store.all() {
		if t.cfg.DeviceEnv[contract.EnvSliceType] != contract.SliceMPS {
			continue
		}
		usage, util := rt.watch.Usage(t.id), rt.watch.Utilization(t.id)
		for _, gpuUUID := range t.mpsGPUs {
			var shares []string
			for _, id := range contract.SplitList(t.cfg.DeviceEnv[contract.EnvDeviceIDs]) {
				if g, _, ok := contract.ParseShareID(id); ok && g == gpuUUID {
					shares = append(shares, id)
				}
			}
			if perGPU[gpuUUID] == nil {
				perGPU[gpuUUID] = map[string]uint64{}
				utilGPU[gpuUUID] = map[string]float64{}
			}
			u, measured := util[gpuUUID]
			for _, id := range shares {
				perGPU[gpuUUID][id] = usage[gpuUUID] / uint64(len(shares))
				if measured {
					// Of the task's slice: the same for each of its shares.
					utilGPU[gpuUUID][id] = u
				}
			}
		}
	}
	root := d.config().MPS.PipeRoot
	for gpuUUID, shares := range perGPU {
		path := gpu.ShareUsagePath(root, gpuUUID)
		if _, err := os.Stat(contract.MPSPipeDir(root, gpuUUID)); err != nil {
			continue // no daemon directory: nothing to report against
		}
		if err := gpu.WriteShareUsage(path, gpu.ShareUsage{UpdatedAt: now, Shares: shares, Util: utilGPU[gpuUUID]}); err != nil {
			d.logger.Debug("publishing MPS share usage", "gpu", gpuUUID, "error", err)
		}
	}
}
