package driver

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

// fingerprintPeriod matches Nomad's own drivers: the client also treats a
// periodic resend as a liveness signal.
const fingerprintPeriod = 30 * time.Second

func (d *Driver) Fingerprint(ctx context.Context) (<-chan *drivers.Fingerprint, error) {
	ch := make(chan *drivers.Fingerprint, 1)
	go func() {
		defer close(ch)
		t := time.NewTicker(fingerprintPeriod)
		defer t.Stop()
		for {
			select {
			case ch <- d.fingerprint():
			case <-ctx.Done():
				return
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// fingerprint says what this host can do, so a missing capability shows on
// the node instead of failing later at task start.
func (d *Driver) fingerprint() *drivers.Fingerprint {
	cfg := d.config()
	attrs := map[string]structs.Attribute{
		"driver.gpu.version":             structs.NewString(Version),
		"driver.gpu.gpu_memory_watchdog": structs.NewString(cfg.GPUMemoryWatchdog),
	}
	var notes []string

	cgv, cgDesc := cgroups.Describe()
	attrs["driver.gpu.cgroups"] = structs.NewString(cgv.String())
	fenced := cgv != cgroups.None && cgroups.CanFenceDevices()
	attrs["driver.gpu.device_fence"] = structs.NewBool(fenced)
	if !fenced {
		notes = append(notes, "GPU device nodes are not fenced per task (needs the cgroups v1 devices controller); confinement is by visibility")
	}

	nvml := "unavailable"
	if inv, err := d.inventory(); err != nil {
		notes = append(notes, "NVML unavailable, GPU memory is not watched: "+err.Error())
	} else if snap, err := inv.Snapshot(); err != nil {
		notes = append(notes, "NVML query failed: "+err.Error())
	} else {
		nvml = cfg.GPU.Backend
		if snap.DriverVersion != "" {
			attrs["driver.gpu.nvidia_driver_version"] = structs.NewString(snap.DriverVersion)
		}
	}
	attrs["driver.gpu.nvml"] = structs.NewString(nvml)

	mpsOK := false
	if err := d.runtime(); err != nil {
		return &drivers.Fingerprint{Attributes: attrs, Health: drivers.HealthUnhealthy, HealthDescription: err.Error()}
	}
	if ok, why := d.mps.Available(); ok {
		mpsOK = true
	} else {
		notes = append(notes, "tasks holding MPS shares cannot start: "+why)
	}
	attrs["driver.gpu.mps"] = structs.NewBool(mpsOK)

	fp := &drivers.Fingerprint{Attributes: attrs, Health: drivers.HealthHealthy, HealthDescription: "Healthy"}
	switch {
	case os.Geteuid() != 0:
		fp.Health, fp.HealthDescription = drivers.HealthUnhealthy, "nomad-driver-gpu must run as root to run tasks as their users and manage cgroups"
	case cgv == cgroups.None:
		fp.Health, fp.HealthDescription = drivers.HealthUnhealthy, fmt.Sprintf("CPU and memory limits cannot be enforced: %s", cgDesc)
	case len(notes) > 0:
		fp.HealthDescription = "Healthy; " + strings.Join(notes, "; ")
	}
	return fp
}
