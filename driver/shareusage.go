package driver

import (
	"os"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// publishShareUsage hands the device plugin, every watchdog interval, what
// each MPS share's task uses of the GPU (see gpu.ShareUsage).
func (d *Driver) publishShareUsage() {
	t := time.NewTicker(d.config().WatchdogInterval)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
			d.writeShareUsage(time.Now())
		}
	}
}

func (d *Driver) writeShareUsage(now time.Time) {
	perGPU := map[string]map[string]uint64{}
	for gpuUUID := range d.mps.Status() {
		perGPU[gpuUUID] = map[string]uint64{}
	}
	d.mu.Lock()
	tasks := make([]*task, 0, len(d.tasks))
	for _, t := range d.tasks {
		tasks = append(tasks, t)
	}
	d.mu.Unlock()
	for _, t := range tasks {
		if t.state.DeviceEnv[gpuwatch.EnvSliceType] != gpuwatch.SliceMPS {
			continue
		}
		usage := d.watch.Usage(t.id)
		for _, gpuUUID := range t.state.MPSGPUs {
			var shares []string
			for _, id := range strings.Split(t.state.DeviceEnv["NOMAD_GPU_DEVICE_IDS"], ",") {
				if strings.HasPrefix(id, gpuUUID+"-mps-") {
					shares = append(shares, id)
				}
			}
			if perGPU[gpuUUID] == nil {
				perGPU[gpuUUID] = map[string]uint64{}
			}
			for _, id := range shares {
				perGPU[gpuUUID][id] = usage[gpuUUID] / uint64(len(shares))
			}
		}
	}
	root := d.config().MPS.PipeRoot
	for gpuUUID, shares := range perGPU {
		path := gpu.ShareUsagePath(root, gpuUUID)
		if _, err := os.Stat(path[:len(path)-len(gpu.ShareUsageFile)]); err != nil {
			continue // no daemon directory: nothing to report against
		}
		if err := gpu.WriteShareUsage(path, gpu.ShareUsage{UpdatedAt: now, Shares: shares}); err != nil {
			d.logger.Debug("publishing MPS share usage", "gpu", gpuUUID, "error", err)
		}
	}
}
