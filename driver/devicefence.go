package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// devDir is where the GPU device nodes live; a variable for tests.
var devDir = "/dev"

var gpuNodeName = regexp.MustCompile(`^nvidia[0-9]+$`)

// gpuDeviceDeny lists the devices-cgroup rules that fence a task off every
// GPU and MIG capability node of this host except those the device plugin
// reserved for it. Rules are by the nodes' real major:minor, so nothing is
// assumed about NVIDIA's numbering; nodes shared by every CUDA process
// (nvidiactl, nvidia-uvm) stay open.
func gpuDeviceDeny(reserved []drivers.DeviceConfig) []string {
	allowed := map[uint64]bool{}
	for _, d := range reserved {
		var st unix.Stat_t
		if unix.Stat(d.HostPath, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			allowed[st.Rdev] = true
		}
	}
	var candidates []string
	if entries, err := os.ReadDir(devDir); err == nil {
		for _, e := range entries {
			if gpuNodeName.MatchString(e.Name()) {
				candidates = append(candidates, filepath.Join(devDir, e.Name()))
			}
		}
	}
	caps, _ := filepath.Glob(filepath.Join(devDir, "nvidia-caps", "nvidia-cap*"))
	candidates = append(candidates, caps...)

	var rules []string
	for _, p := range candidates {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || allowed[st.Rdev] {
			continue
		}
		rules = append(rules, fmt.Sprintf("c %d:%d rwm", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	}
	sort.Strings(rules)
	return rules
}
