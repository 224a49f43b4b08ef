//go:build !linux

package cluster

import (
	"syscall"
	"testing"
	"time"
)

// On other systems agents get their own process group; leftover processes,
// mounts and cgroups are not tracked.

const markerEnv = "E2E_NOMAD_GPU_OWNER"

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func newMarker(dir string) string { return dir }

func killLeftovers(marker, dir string, d time.Duration) []int { return nil }

func unmountUnder(dir string, d time.Duration) []string { return nil }

func removeAllocCgroups(allocIDs []string) {}

func thawAllocCgroups(allocIDs []string) {}

func sweepStale(t testing.TB) {}

func taskLeaks(tasks []TaskRef) []string { return nil }

// TaskCgroups is not tracked here.
func TaskCgroups(r TaskRef) []string { return nil }

// TaskProcesses is not tracked here.
func TaskProcesses(r TaskRef) []int { return nil }

// PluginPIDs is not tracked here.
func (c *Cluster) PluginPIDs(name string) []int { return nil }
