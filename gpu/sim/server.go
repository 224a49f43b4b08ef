// Package sim is the simulated NVML of nomad-gpu: go-nvml's own mock DGX
// servers (dgxa100, dgxh100, dgxh200, dgxb200) completed with what they lack
// (stable UUIDs, PCI bus ids, MIG device handles, MIG instances made and
// destroyed through NVML calls and shared by the node's processes (see
// mig.go and ChangeMIG), telemetry, process lists, XID events) and driven from outside through a control file (ControlState)
// and a load directory next to it, where processes such as `nomad-gpu
// sim-load` put simulated work on devices (see "Simulated work" below).
//
// New returns an nvml.Interface. The inventory (package gpu) runs the same
// code on it as on the real library; nothing here knows about the inventory.
// Whatever the inventory calls must be implemented here: an unimplemented
// method of the underlying mock panics.
//
// # Simulated work
//
// A sim node with a control file also has a load directory, LoadDir(control
// file) = "<control_file>.load". It is where processes, normally tasks
// running `nomad-gpu sim-load`, say what work they put on which device; the
// node adds it to what the control file says, so utilisation, memory, power,
// temperature, clocks and process lists follow the work placed on each GPU,
// MIG instance or MPS share, through the same NVML calls as on real
// hardware.
//
// The directory is mode 1777, like /tmp: tasks of any user may add their
// own records and only remove their own. The device plugin makes it
// (PrepareLoadDir) when it reserves devices for a task and gives the task
// its path in EnvLoadDir; the task driver lets tasks holding GPUs write
// there under Landlock; outside Nomad `nomad-gpu sim-load --load-dir` makes
// it. Nodes only read it (every process that opens the node with that
// control file: device plugin, task driver). It is a simulation aid, not a
// security boundary: anyone who can write to it can load any device of the
// node.
//
// A writer (StartLoad) keeps two files, named by a random id:
//
//   - load-<id>.json, a LoadRecord, replaced whole and atomically (written
//     to a temporary file in the directory, then renamed) at start and then
//     every heartbeat;
//   - load-<id>.lock, which the writer holds a POSIX record lock (fcntl
//     F_SETLK) on for as long as it runs. Readers ask the kernel who holds it
//     (F_GETLK): the lock vanishes with its process, however it dies, and
//     the kernel reports the holder's pid in the reader's PID namespace. So
//     a task in a PID namespace of its own is listed by its host pid, as
//     real NVML lists it, and the driver's per-task memory accounting meets
//     it without translation.
//
// Every time a node polls its control file (250ms by default) it also reads
// the directory. A record counts while all of these hold:
//
//   - now is before its until time (a zero until: no end);
//   - its heartbeat is at most 3 heartbeat intervals old (a writer that
//     stopped refreshing, e.g. frozen, or one whose lock cannot be checked,
//     drops out after that);
//   - its lock file is held, or cannot be checked (missing, or no record
//     locks on this platform). A lock file that exists and is free means
//     the writer is gone.
//
// Records that do not parse or validate are ignored (and logged once per
// version of the file). Dead records, orphaned lock files and temporary
// files are removed once they are a minute old.
//
// # Load model
//
// A device entry's utilisation u and memory-controller utilisation m are
// scaled by the record's ramp, r = min(1, (now-start)/ramp) (1 without a
// ramp); memory is held in full from the start. Then, per device, with
// base(d) the control file's utilisation (0 when absent) and L(d) the sum
// of r×u over the live entries naming d (likewise for m):
//
//   - a whole GPU not in MIG mode, or an MPS-shared GPU (whose clients name
//     the GPU- UUID, sim-load having scaled each client's u to its share
//     of the SMs): util = min(100, base + L);
//   - a MIG instance I: util(I) = min(100, base(I) + L(I));
//   - a MIG-mode GPU G: util = min(100, base(G) + L(G) + Σ_I (util(I) −
//     base(I)) × slices(I)/7), i.e. what landed on each instance, weighted
//     by its share of the GPU's 7 compute slices. Without a control file
//     entry of its own, base(G) = Σ_I base(I) × slices(I)/7.
//
// Results are rounded to whole percent. Memory used is the control file's
// processes plus each live entry's memory (memory_bytes, or memory_percent
// of the device's total), an instance's also on its parent GPU, capped at
// the device's total. A live record whose writer's pid is known is listed
// by GetComputeRunningProcesses on each device it names (a MIG instance's
// also on its parent, with the instance's GPU and compute instance ids),
// using that device's share of its memory, and by GetProcessUtilization
// with r×u (and r×m) of its entry for that device, capped at 100 % and
// rounded (an instance's entry also on its parent, × slices(I)/7): the
// utilisation, of the device named, that the process puts there. Samples
// are stamped with the time of the node's last poll; only those newer than
// the caller's lastSeenTimestamp are returned (ERROR_NOT_FOUND when none,
// as in NVML). The control file's utilisation belongs to no process.
//
// Power, temperature and SM clock are the physical GPU's, from its
// utilisation u: power = idle + (TDP − idle) × u/100 (e.g. dgxh100 70 W to
// 700 W), temperature = idle temperature + 45 °C × u/100 (33 °C to 78 °C on
// dgxh100), with no thermal lag, and the SM clock is the idle clock at 0 %
// and the boost clock above (345 and 1980 MHz on dgxh100). MIG instances
// report none of them, as on real hardware.
package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/internal/dirs"
)

// DefaultControlPoll is how often a sim node looks at its control file.
const DefaultControlPoll = 250 * time.Millisecond

// Server is a simulated NVML library. Methods the inventory does not use
// fall through to the go-nvml mock server.
//
// Locking: view is swapped whole (atomically) and read without a lock.
// migMu guards the MIG device handles of every Device (migs) and byUUID,
// which change with the GPUs' MIG instances (see mig.go); it is taken
// before a mock device's or GPU instance's own lock, never after. geoMu
// makes a MIG geometry change (ChangeMIG) and the application of one read
// from the control file (poll) one step each, so neither sees the other's
// half-made instances.
type Server struct {
	*server.Server
	sys     *system
	seed    string
	logger  hclog.Logger
	devices []*Device // fixed at New

	migMu  sync.RWMutex
	byUUID map[string]nvml.Device // GPU- and MIG- UUIDs

	geoMu sync.Mutex

	view atomic.Pointer[view]

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) whenever the view changes

	ctlPath  string
	ctlPoll  time.Duration
	ctlLast  []byte
	ctlStamp fileStamp
	ctlState ControlState
	loads    *loadScanner // nil without a control file
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

var _ nvml.Interface = (*Server)(nil)

// New builds a simulated node from a valid config (see Config.Validate).
// logger may be nil.
func New(cfg Config, logger hclog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Seed == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("sim: seed is empty and the host name is unknown: %w", err)
		}
		cfg.Seed = h
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	sys := systems[cfg.System]
	mockSrv := sys.newServer()
	s := &Server{
		Server:  mockSrv,
		sys:     sys,
		seed:    cfg.Seed,
		logger:  logger,
		byUUID:  map[string]nvml.Device{},
		changed: make(chan struct{}),
		ctlPath: cfg.ControlFile,
		ctlPoll: cfg.ControlPoll,
	}
	if s.ctlPoll <= 0 {
		s.ctlPoll = DefaultControlPoll
	}
	for i, md := range mockSrv.Devices {
		d := newDevice(s, md.(*server.Device), i, cfg.Seed)
		s.devices = append(s.devices, d)
		s.byUUID[d.uuid] = d
	}
	s.view.Store(s.derive(ControlState{}, nil, time.Now()))
	for _, l := range cfg.MIG {
		for _, g := range l.GPUs {
			if err := s.devices[g].createMIG(l.Profiles); err != nil {
				return nil, fmt.Errorf("sim: GPU %d: %w", g, err)
			}
		}
	}
	if s.ctlPath != "" {
		s.recordDevices()
		s.loads = newLoadScanner(LoadDir(s.ctlPath), logger)
		s.poll()
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.watch()
	}
	return s, nil
}

// recordDevices puts the node's devices in its control file, creating the
// file, so that a writer can tell a UUID of this node from a typo. The MIG
// geometries the file holds are applied first, under its lock, so the
// record names the instances the node has. A node that cannot write there
// still runs: the file is only read by it.
func (s *Server) recordDevices() {
	// The node makes the file's directory, as it makes the file: a sim
	// node's config may name one that does not exist yet (client-sim.hcl's
	// /var/lib/nomad-gpu on a fresh machine). 0755: tasks read the load
	// directory beside the file.
	err := dirs.MkdirAll(filepath.Dir(s.ctlPath), 0o755)
	if err == nil {
		s.geoMu.Lock()
		err = OpenControl(s.ctlPath).update(func(st *ControlState) error {
			s.applyGeometry(st.MIGGeometry)
			s.recordNode(st, time.Now().UTC())
			return nil
		})
		s.geoMu.Unlock()
	}
	if err != nil {
		s.logger.Warn("cannot record the node's devices in its control file; `nomad-device-gpu sim` will refuse them", "control_file", s.ctlPath, "error", err)
	}
}

// Shutdown stops watching the control file and the load directory. The sim has no library to
// unload, so unlike NVML it keeps answering afterwards.
func (s *Server) Shutdown() nvml.Return {
	if s.stop != nil {
		s.stopOnce.Do(func() { close(s.stop) })
		<-s.done
	}
	return nvml.SUCCESS
}

func (s *Server) DeviceGetCount() (int, nvml.Return) { return len(s.devices), nvml.SUCCESS }

func (s *Server) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(s.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s.devices[i], nvml.SUCCESS
}

// DeviceGetHandleByUUID accepts GPU- and MIG- UUIDs, as NVML does.
func (s *Server) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	s.migMu.RLock()
	defer s.migMu.RUnlock()
	if d, ok := s.byUUID[uuid]; ok {
		return d, nvml.SUCCESS
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (s *Server) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	for _, d := range s.devices {
		if busIDString(d.pci.BusId[:]) == busID || busIDString(d.pci.BusIdLegacy[:]) == busID {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (s *Server) EventSetCreate() (nvml.EventSet, nvml.Return) {
	return newEventSet(s), nvml.SUCCESS
}

// current returns the view and a channel closed when it is replaced.
func (s *Server) current() (*view, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view.Load(), s.changed
}

// fileStamp identifies a version of the control file cheaply.
type fileStamp struct {
	exists bool
	mtime  time.Time
	size   int64
	ino    uint64
}

func (s *Server) watch() {
	defer close(s.done)
	t := time.NewTicker(s.ctlPoll)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.poll()
		}
	}
}

// recentWrite is how long after a write the file is re-read even if its
// stat looks unchanged: file times are only as fine as the kernel's clock
// tick and inode numbers are reused, so two quick same-size writes can look
// identical to stat.
const recentWrite = 2 * time.Second

// poll reads the control file and the load directory and publishes a new
// view when either says something new, or while loads are in force (they
// ramp and expire with time alone).
func (s *Server) poll() {
	now := time.Now()
	s.geoMu.Lock()
	ctlChanged := s.pollControl()
	if ctlChanged {
		s.applyGeometry(s.ctlState.MIGGeometry)
	}
	s.geoMu.Unlock()
	var live []liveLoad
	loadsChanged := false
	if s.loads != nil {
		live = s.loads.scan(now)
		loadsChanged = len(live) > 0 || s.loads.hadLive
		s.loads.hadLive = len(live) > 0
	}
	if !ctlChanged && !loadsChanged {
		return
	}
	v := s.derive(s.ctlState, live, now)
	s.mu.Lock()
	s.view.Store(v)
	if ctlChanged {
		// Only the control file carries events: loads do not wake event sets.
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
}

// pollControl reads the control file if it changed; true when its state did.
func (s *Server) pollControl() bool {
	fi, err := os.Stat(s.ctlPath)
	var st fileStamp
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		s.logger.Warn("cannot stat sim control file", "path", s.ctlPath, "error", err)
		return false
	default:
		st = fileStamp{exists: true, mtime: fi.ModTime(), size: fi.Size(), ino: inode(fi)}
	}
	if st == s.ctlStamp && (!st.exists || time.Since(st.mtime) > recentWrite) {
		return false
	}
	s.ctlStamp = st
	var data []byte
	if st.exists {
		data, err = os.ReadFile(s.ctlPath)
		if errors.Is(err, fs.ErrNotExist) {
			data = nil
		} else if err != nil {
			s.logger.Warn("cannot read sim control file", "path", s.ctlPath, "error", err)
			return false
		}
	}
	if bytes.Equal(data, s.ctlLast) && s.ctlLast != nil {
		return false
	}
	state, err := parseControl(s.ctlPath, data)
	if err != nil {
		s.logger.Warn("ignoring unreadable sim control file; keeping the previous state", "error", err)
		return false
	}
	s.ctlLast = append(s.ctlLast[:0:0], data...)
	if s.ctlLast == nil {
		s.ctlLast = []byte{}
	}
	s.ctlState = state
	return true
}

// view is the control state and the live loads resolved against this
// node's devices; it is immutable once stored so readers need no lock.
type view struct {
	events    []XIDEvent
	util      map[string]nvml.Utilization
	procs     map[string][]nvml.ProcessInfo
	usedBytes map[string]uint64
	lostGPUs  map[string]bool
	// procUtil is each device's per-process utilisation samples, from the
	// live loads whose writer's pid is known.
	procUtil map[string][]nvml.ProcessUtilizationSample
}

// derive applies the model documented in load.go ("Simulated work") to the
// MIG instances the GPUs have now.
func (s *Server) derive(st ControlState, loads []liveLoad, now time.Time) *view {
	s.migMu.RLock()
	defer s.migMu.RUnlock()
	v := &view{
		events:    st.XIDEvents,
		util:      map[string]nvml.Utilization{},
		procs:     map[string][]nvml.ProcessInfo{},
		usedBytes: map[string]uint64{},
		lostGPUs:  map[string]bool{},
		procUtil:  map[string][]nvml.ProcessUtilizationSample{},
	}
	base := map[string]nvml.Utilization{}
	for uuid, u := range st.Utilization {
		if _, ok := s.byUUID[uuid]; ok {
			base[uuid] = nvml.Utilization{Gpu: min(u.GPUPercent, 100), Memory: min(u.MemPercent, 100)}
		}
	}
	sums, loadProcs, loadUtils := s.sumLoads(loads, now)
	for uuid, u := range loadUtils {
		v.procUtil[uuid] = utilSamples(u, now)
	}
	load := func(uuid string) loadSum {
		if a := sums[uuid]; a != nil {
			return *a
		}
		return loadSum{}
	}
	set := func(uuid string, u nvml.Utilization) {
		if u.Gpu > 0 || u.Memory > 0 {
			v.util[uuid] = u
		}
	}
	for _, d := range s.devices {
		// A MIG-mode GPU is as busy as its instances, weighted by their share
		// of the GPU's slices, unless the file says otherwise; what loads put
		// on an instance lands on the GPU the same way.
		gBase, explicit := base[d.uuid]
		var landedGPU, landedMem float64
		for _, mg := range d.migs {
			b := base[mg.uuid]
			if !explicit {
				gBase.Gpu += b.Gpu * mg.giProfile.SliceCount / maxSlices
				gBase.Memory += b.Memory * mg.giProfile.SliceCount / maxSlices
			}
			a := load(mg.uuid)
			u := withLoad(b, a.gpu, a.mem)
			set(mg.uuid, u)
			w := float64(mg.giProfile.SliceCount) / maxSlices
			landedGPU += float64(u.Gpu-b.Gpu) * w
			landedMem += float64(u.Memory-b.Memory) * w
		}
		gBase = nvml.Utilization{Gpu: min(gBase.Gpu, 100), Memory: min(gBase.Memory, 100)}
		a := load(d.uuid)
		set(d.uuid, withLoad(gBase, a.gpu+landedGPU, a.mem+landedMem))
	}
	for _, p := range st.Processes {
		switch d := s.byUUID[p.UUID].(type) {
		case *Device:
			pi := nvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: p.UsedMiB << 20, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
			v.procs[d.uuid] = append(v.procs[d.uuid], pi)
			v.usedBytes[d.uuid] += p.UsedMiB << 20
		case *MigDevice:
			pi := nvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: p.UsedMiB << 20, GpuInstanceId: d.gi, ComputeInstanceId: d.ci}
			v.procs[d.uuid] = append(v.procs[d.uuid], pi)
			v.procs[d.parent.uuid] = append(v.procs[d.parent.uuid], pi)
			v.usedBytes[d.uuid] += p.UsedMiB << 20
			v.usedBytes[d.parent.uuid] += p.UsedMiB << 20
		}
	}
	for uuid, a := range sums {
		v.usedBytes[uuid] += a.bytes
		if m, ok := s.byUUID[uuid].(*MigDevice); ok {
			v.usedBytes[m.parent.uuid] += a.bytes
		}
	}
	for uuid, ps := range loadProcs {
		v.procs[uuid] = append(v.procs[uuid], ps...)
	}
	for _, u := range st.LostGPUs {
		if _, ok := s.byUUID[u].(*Device); ok {
			v.lostGPUs[u] = true
		}
	}
	return v
}

// noInstance is NVML's GPU/compute instance id for "not a MIG instance".
const noInstance = 0xFFFFFFFF

// maxSlices is the number of compute slices of every simulated GPU.
const maxSlices = 7
