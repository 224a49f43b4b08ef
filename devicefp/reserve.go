package devicefp

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
)

// devRoot and procCapsFile are variables so tests can point them elsewhere.
var (
	devRoot      = "/dev"
	procCapsFile = "/proc/driver/nvidia-caps/mig-minors"
)

// reserveFor is reserve plus what the backend adds: on a sim node with a
// control file, the task learns its load directory (gpu.EnvSimLoadDir),
// where `nomad-gpu sim-load` puts simulated work on the task's devices, and
// the directory is made if need be (mode 1777). The gpu task driver derives
// the same path from its own sim config to let the task write there. A
// directory that cannot be made is logged, not fatal: sim-load says so too.
func (m *model) reserveFor(ids []string, cfg *Config, logger hclog.Logger) (*device.Reservation, error) {
	res, err := m.reserve(ids, cfg.MPSPipeRoot)
	if err != nil {
		return nil, err
	}
	if cfg.Backend == gpu.BackendSim {
		if dir := cfg.Sim.LoadDir(); dir != "" {
			if err := gpu.PrepareSimLoadDir(dir); err != nil {
				logger.Warn("tasks cannot put simulated work on this node's GPUs (nomad-gpu sim-load)", "error", err)
			}
			res.Envs[gpu.EnvSimLoadDir] = dir
		}
	}
	return res, nil
}

// reserve builds the container reservation for a set of device IDs of one
// group (the client reserves per device request).
func (m *model) reserve(ids []string, mpsPipeRoot string) (*device.Reservation, error) {
	var slices []*slice
	seen := map[string]bool{}
	for _, id := range ids {
		s, ok := m.byID[id]
		if !ok {
			return nil, fmt.Errorf("device %s %s: no GPU, MIG instance or MPS share has this ID now (it was removed, ignored or relaid out since the allocation was placed)", id, contract.ReserveRefusedGone)
		}
		if !seen[id] {
			seen[id] = true
			slices = append(slices, s)
		}
	}
	typ := slices[0].typ
	for _, s := range slices[1:] {
		if s.typ != typ {
			return nil, fmt.Errorf("device IDs %q and %q are of different types (%s, %s); reserve each device request separately", slices[0].id, s.id, typ, s.typ)
		}
	}

	// Visible devices in GPU index order so ordinals are predictable.
	sort.SliceStable(slices, func(a, b int) bool {
		if slices[a].gpuIndex != slices[b].gpuIndex {
			return slices[a].gpuIndex < slices[b].gpuIndex
		}
		return slices[a].id < slices[b].id
	})
	var visible []string
	ordinal := map[string]int{}
	threads := map[string]int{}
	memMiB := map[string]uint64{}
	for _, s := range slices {
		u := s.visibleUUID()
		if _, ok := ordinal[u]; !ok {
			ordinal[u] = len(visible)
			visible = append(visible, u)
		}
		threads[u] += s.threadPercent
		memMiB[u] += s.memLimitMiB
	}
	idList := make([]string, len(slices))
	for i, s := range slices {
		idList[i] = s.id
	}
	// The environment is the contract with the gpu task driver (package
	// contract): EnvDeviceIDs and EnvSliceType tell it which Nomad devices
	// the task holds, as the client never passes device IDs to drivers.
	env := map[string]string{
		contract.EnvCUDAVisibleDevices:   contract.JoinList(visible),
		contract.EnvNvidiaVisibleDevices: contract.JoinList(visible),
		contract.EnvDeviceIDs:            contract.JoinList(idList),
		contract.EnvSliceType:            typ,
	}
	if typ == contract.SliceMPS {
		// One MPS control daemon serves each GPU; the task talks to the
		// daemon of its first GPU. Thread percentage is one number for the
		// whole client, so a task spanning GPUs gets its smallest sum.
		env[contract.EnvMPSPipeDirectory] = contract.MPSPipeDir(mpsPipeRoot, visible[0])
		minThreads := 100
		limits := make(map[int]uint64, len(visible))
		for _, u := range visible {
			if t := threads[u]; t < minThreads {
				minThreads = t
			}
			limits[ordinal[u]] = memMiB[u]
		}
		env[contract.EnvMPSThreadPercentage] = strconv.Itoa(minThreads)
		env[contract.EnvMPSPinnedMemLimit] = contract.FormatPinnedMemLimit(limits)
	}
	return &device.Reservation{Envs: env, Devices: deviceNodes(slices)}, nil
}

// deviceNodes lists the /dev entries a container needs for these slices,
// keeping only the ones that exist on this host.
func deviceNodes(slices []*slice) []device.DeviceSpec {
	paths := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
	seenGPU := map[int]bool{}
	var caps map[string]int
	for _, s := range slices {
		if !seenGPU[s.gpuIndex] {
			seenGPU[s.gpuIndex] = true
			// NVML's minor number equals the index on every system we know
			// of; a missing node is simply left out.
			paths = append(paths, fmt.Sprintf("nvidia%d", s.gpuIndex))
		}
		if s.migUUID != "" {
			if caps == nil {
				caps = readMIGMinors(procCapsFile)
			}
			for _, key := range []string{
				fmt.Sprintf("gpu%d/gi%d/access", s.gpuIndex, s.giID),
				fmt.Sprintf("gpu%d/gi%d/ci%d/access", s.gpuIndex, s.giID, s.ciID),
			} {
				if minor, ok := caps[key]; ok {
					paths = append(paths, fmt.Sprintf("nvidia-caps/nvidia-cap%d", minor))
				}
			}
		}
	}
	var out []device.DeviceSpec
	for _, p := range paths {
		host := filepath.Join(devRoot, p)
		if _, err := os.Stat(host); err != nil {
			continue
		}
		out = append(out, device.DeviceSpec{TaskPath: filepath.Join("/dev", p), HostPath: host, Permissions: "rw"})
	}
	return out
}

// readMIGMinors parses the driver's "gpu0/gi1/ci0/access 42" table.
func readMIGMinors(path string) map[string]int {
	out := map[string]int{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		if n, err := strconv.Atoi(fields[1]); err == nil {
			out[fields[0]] = n
		}
	}
	return out
}
