package sim

import (
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/nomad-gpu/nomad-gpu/gpu/internal/migprofile"
)

// system is one simulated machine: a go-nvml mock server plus the facts the
// mock does not model (bus topology, SM count, power and clocks), taken from
// the real DGX of that name so attributes look like the real thing.
type system struct {
	name      string
	newServer func() *server.Server
	gpu       gpus.Config
	busIDs    [8]uint32 // PCI bus numbers of GPUs 0-7, as on the real chassis
	sms       uint32    // streaming multiprocessors of a whole GPU
	idleW     uint32
	maxW      uint32
	smMHz     [2]uint32 // idle, busy
	memMHz    uint32
	idleTempC uint32
}

var systems = map[string]*system{
	"dgxa100": {
		name: "dgxa100", newServer: dgxa100.New, gpu: gpus.A100_SXM4_40GB,
		busIDs: [8]uint32{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd},
		sms:    108, idleW: 55, maxW: 400, smMHz: [2]uint32{210, 1410}, memMHz: 1215, idleTempC: 31,
	},
	"dgxh100": {
		name: "dgxh100", newServer: dgxh100.New, gpu: gpus.H100_SXM5_80GB,
		busIDs: [8]uint32{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb},
		sms:    132, idleW: 70, maxW: 700, smMHz: [2]uint32{345, 1980}, memMHz: 2619, idleTempC: 33,
	},
	"dgxh200": {
		name: "dgxh200", newServer: dgxh200.New, gpu: gpus.H200_SXM5_141GB,
		busIDs: [8]uint32{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb},
		sms:    132, idleW: 75, maxW: 700, smMHz: [2]uint32{345, 1980}, memMHz: 3201, idleTempC: 33,
	},
	"dgxb200": {
		name: "dgxb200", newServer: dgxb200.New, gpu: gpus.B200_SXM5_180GB,
		busIDs: [8]uint32{0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf},
		sms:    148, idleW: 140, maxW: 1000, smMHz: [2]uint32{120, 1965}, memMHz: 3996, idleTempC: 30,
	},
}

// Systems lists the simulated systems, sorted.
func Systems() []string {
	out := make([]string, 0, len(systems))
	for n := range systems {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// productName is what the sim's GetName reports. The dgxa100 mock calls its
// GPU "Mock NVIDIA A100-SXM4-40GB"; Nomad device names come from this string,
// so a jobspec written against the sim must see the real product name.
func (s *system) productName() string {
	return strings.TrimPrefix(s.gpu.Name, "Mock ")
}

func (s *system) memoryBytes() uint64 { return s.gpu.MemoryMB << 20 }

// giProfile is a GPU instance profile of a system, under the name the
// inventory will report for an instance of it.
type giProfile struct {
	name string
	info nvml.GpuInstanceProfileInfo
	ci   nvml.ComputeInstanceProfileInfo // the compute instance that spans the whole GPU instance
}

// profiles returns the system's GPU instance profiles ordered by slices,
// then memory, then name.
func (s *system) profiles() []giProfile {
	var out []giProfile
	for id, info := range s.gpu.MIGProfiles.GpuInstanceProfiles {
		var full nvml.ComputeInstanceProfileInfo
		found := false
		for _, ci := range s.gpu.MIGProfiles.ComputeInstanceProfiles[id] {
			if ci.SliceCount == info.SliceCount && (!found || ci.Id < full.Id) {
				full, found = ci, true
			}
		}
		if !found {
			continue
		}
		name := migprofile.Name(id, int(info.SliceCount), int(full.SliceCount), info.MemorySizeMB, s.memoryBytes())
		out = append(out, giProfile{name: name, info: info, ci: full})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].info, out[j].info
		if a.SliceCount != b.SliceCount {
			return a.SliceCount < b.SliceCount
		}
		if a.MemorySizeMB != b.MemorySizeMB {
			return a.MemorySizeMB < b.MemorySizeMB
		}
		return out[i].name < out[j].name
	})
	return out
}

func (s *system) profileByName(name string) (giProfile, bool) {
	for _, p := range s.profiles() {
		if p.name == name {
			return p, true
		}
	}
	return giProfile{}, false
}

// ProfileNames lists the MIG profiles a simulated system accepts in a layout,
// ordered by slices then memory; nil for an unknown system.
func ProfileNames(systemName string) []string {
	s, ok := systems[systemName]
	if !ok {
		return nil
	}
	var out []string
	for _, p := range s.profiles() {
		out = append(out, p.name)
	}
	return out
}
