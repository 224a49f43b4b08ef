package driver

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/internal/periodic"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

// fingerprintPeriod matches Nomad's own drivers: the client also treats a
// periodic resend as a liveness signal.
const fingerprintPeriod = 30 * time.Second

func (d *Driver) Fingerprint(ctx context.Context) (<-chan *drivers.Fingerprint, error) {
	return periodic.Stream(ctx, fingerprintPeriod, d.fingerprint), nil
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
	d.metrics.activate() // only the runtime launch fingerprints; retries a failed bind
	if err := d.metrics.exp.Err(); err != nil {
		notes = append(notes, "metrics not served: "+err.Error())
	}

	cgv, cgDesc := cgroups.Describe()
	attrs["driver.gpu.cgroups"] = structs.NewString(cgv.String())

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

	rt, err := d.runtime()
	if err != nil {
		return &drivers.Fingerprint{Attributes: attrs, Health: drivers.HealthUnhealthy, HealthDescription: err.Error()}
	}
	mpsOK, why := rt.mps.Available()
	if !mpsOK {
		notes = append(notes, "tasks holding MPS shares cannot start: "+why)
	}
	attrs["driver.gpu.mps"] = structs.NewBool(mpsOK)

	problem, landlockOn := d.fingerprintIsolation(attrs, &notes)
	// Either fence keeps a task off the GPU nodes it did not reserve: the
	// devices cgroup (v1) by device number, Landlock by path.
	fenced := landlockOn || cgv != cgroups.None && cgroups.CanFenceDevices()
	attrs["driver.gpu.device_fence"] = structs.NewBool(fenced)
	if !fenced {
		notes = append(notes, "GPU device nodes are not fenced per task (needs Landlock or the cgroups v1 devices controller); confinement is by visibility")
	}
	if dataDir := d.nomadDataDir(); dataDir != "" {
		if st, err := os.Stat(dataDir); err == nil && st.Mode().Perm()&0o001 == 0 {
			notes = append(notes, fmt.Sprintf("the Nomad data_dir %s is mode %04o: tasks with a non-root user cannot reach their task directories; chmod 0755 %s", dataDir, st.Mode().Perm(), dataDir))
		}
	}

	fp := &drivers.Fingerprint{Attributes: attrs, Health: drivers.HealthHealthy, HealthDescription: "Healthy"}
	switch {
	case os.Geteuid() != 0:
		fp.Health, fp.HealthDescription = drivers.HealthUnhealthy, "nomad-driver-gpu must run as root to run tasks as their users and manage cgroups"
	case cgv == cgroups.None:
		fp.Health, fp.HealthDescription = drivers.HealthUnhealthy, fmt.Sprintf("CPU and memory limits cannot be enforced: %s", cgDesc)
	case problem != "":
		fp.Health, fp.HealthDescription = drivers.HealthUnhealthy, problem
	case len(notes) > 0:
		fp.HealthDescription = "Healthy; " + strings.Join(notes, "; ")
	}
	return fp
}

// fingerprintIsolation publishes the isolation in force for a task that
// asks for nothing special, and returns why tasks cannot start as the plugin
// config demands, if they cannot, and whether Landlock confines them.
func (d *Driver) fingerprintIsolation(attrs map[string]structs.Attribute, notes *[]string) (string, bool) {
	icfg, cfg := d.config().Isolation, d.config()
	p := d.isolation()
	var problem string
	pidPrivate := icfg.PIDMode == PIDModePrivate && p.PIDNamespace
	if icfg.PIDMode == PIDModePrivate && !p.PIDNamespace {
		problem = "tasks cannot get a private PID namespace on this node (" + p.PIDNamespaceError + "); set isolation.pid_mode = \"host\" to run them anyway"
	}
	attrs["driver.gpu.pid_namespace"] = structs.NewBool(pidPrivate)
	attrs["driver.gpu.allow_host_pid"] = structs.NewBool(icfg.AllowHostPID || icfg.PIDMode == PIDModeHost)
	landlockOn := icfg.Landlock != LandlockOff && p.LandlockABI > 0
	attrs["driver.gpu.landlock"] = structs.NewBool(landlockOn)
	attrs["driver.gpu.landlock_abi"] = structs.NewInt(int64(p.LandlockABI), "")
	switch {
	case icfg.Landlock == LandlockOff:
		*notes = append(*notes, "Landlock is off: task filesystem access is not confined")
	case p.LandlockABI == 0 && icfg.Landlock == LandlockRequired && problem == "":
		problem = "Landlock is not available (" + p.LandlockError + ") and isolation.landlock = \"required\"; set \"best_effort\" to run tasks unconfined"
	case p.LandlockABI == 0:
		*notes = append(*notes, "Landlock is not available ("+p.LandlockError+"): tasks run without filesystem confinement")
	}
	attrs["driver.gpu.unveil_by_task"] = structs.NewBool(icfg.UnveilByTask)
	attrs["driver.gpu.mps_pipes_masked"] = structs.NewBool(pidPrivate)
	attrs["driver.gpu.denied_host_uids"] = structs.NewString(cfg.DeniedHostUIDs)
	attrs["driver.gpu.denied_host_gids"] = structs.NewString(cfg.DeniedHostGIDs)
	if icfg.PIDMode == PIDModeHost {
		*notes = append(*notes, "pid_mode = \"host\" by default: tasks of the same user can see and signal each other")
	}
	return problem, landlockOn
}

// noteDataDir remembers the Nomad data_dir a task directory lives under,
// so the fingerprint can check it long after that task.
func (d *Driver) noteDataDir(taskDir string) {
	if dir := nomadDataDirOf(taskDir); dir != "" {
		d.dataDirMu.Lock()
		d.dataDir = dir
		d.dataDirMu.Unlock()
	}
}

// nomadDataDir is the Nomad data_dir as seen from the tasks this plugin
// ran, or "" before it has run any.
func (d *Driver) nomadDataDir() string {
	d.dataDirMu.Lock()
	defer d.dataDirMu.Unlock()
	return d.dataDir
}
