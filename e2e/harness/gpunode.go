package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// GPUNode is the plugin config of a simulated GPU node running both
// plugins: a dgxh100 of 8 sim GPUs, split as its Layout says. With the
// default layout MPS shares only GPU 4, so two MPS tasks land on the same
// GPU. A test shapes it before the node starts and reads its directory
// (the driver's task state, the sim's control file) while it runs.
type GPUNode struct {
	// Dir is the node's own directory: the driver's state (state/), the
	// MPS pipes and logs, the checkpoints unless shared, the layout state.
	Dir string
	// Control is the sim's control file (gpu.OpenControl): a test sets a
	// GPU's utilisation or a process's memory through it.
	Control string
	// SharedCheckpoints is a checkpoint root the node shares with others,
	// as on a shared filesystem; "" for the node's own.
	SharedCheckpoints string
	// DriverHCL and DeviceHCL are extra HCL in the gpu driver's and the
	// device plugin's config blocks.
	DriverHCL, DeviceHCL string
	// Layout is how the node's GPUs are split; nil: DefaultLayout.
	Layout *NodeLayout
}

// NodeLayout says which of a sim node's 8 GPUs are in MIG mode (with
// which instances) and which are offered as MPS shares.
type NodeLayout struct {
	MIG         []int
	MIGProfiles []string
	MPS         []int
	MPSShares   int
}

// DefaultLayout: MIG on GPUs 6 and 7, GPU 4 as 4 MPS shares, 5 whole GPUs.
var DefaultLayout = NodeLayout{
	MIG: []int{6, 7}, MIGProfiles: []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"},
	MPS: []int{4}, MPSShares: 4,
}

// blocks is the layout's sim mig block and device plugin mps block.
func (l NodeLayout) blocks() (mig, mps string) {
	list := func(xs []int, quote bool) string {
		var b strings.Builder
		for i, x := range xs {
			if i > 0 {
				b.WriteString(", ")
			}
			if quote {
				fmt.Fprintf(&b, "%q", fmt.Sprint(x))
			} else {
				fmt.Fprint(&b, x)
			}
		}
		return b.String()
	}
	if len(l.MIG) > 0 {
		profiles, _ := json.Marshal(l.MIGProfiles)
		mig = fmt.Sprintf("\n      mig {\n        gpus     = [%s]\n        profiles = %s\n      }", list(l.MIG, false), profiles)
	}
	if len(l.MPS) > 0 {
		mps = fmt.Sprintf("\n    mps {\n      gpus   = [%s]\n      shares = %d\n    }", list(l.MPS, true), l.MPSShares)
	}
	return mig, mps
}

func NewGPUNode(t testing.TB) GPUNode {
	// Short: MPS pipes are unix sockets under the pipe root.
	dir, err := os.MkdirTemp("", "nge2e-gpu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopMPSDaemons(t, filepath.Join(dir, "mps"))
		os.RemoveAll(dir)
	})
	// Passable: tasks run as nobody reach their checkpoints below it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return GPUNode{Dir: dir, Control: filepath.Join(dir, "sim.json")}
}

// stopMPSDaemons kills the MPS control daemons serving pipe directories
// under pipeRoot: the node's own, started by its driver. A daemon outlives
// the node by design (its clients may be tasks that outlive the agent);
// the driver quits it when its last client goes, but a torn-down cluster's
// tasks are killed, not stopped through the driver. Each is checked to
// serve a pipe directory of this node before it is killed.
func stopMPSDaemons(t testing.TB, pipeRoot string) {
	pidFiles, _ := filepath.Glob(filepath.Join(pipeRoot, "*", "nvidia-cuda-mps-control.pid"))
	for _, f := range pidFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(env, []byte("CUDA_MPS_PIPE_DIRECTORY="+filepath.Dir(f)+"\x00")) {
			continue // gone, or a pid reused by a process not ours
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Logf("e2e: killing the MPS daemon %d of %s: %v", pid, filepath.Dir(f), err)
		}
	}
}

// CheckpointRoot is where the node's tasks checkpoint; nodes made with the
// same shared root restore each other's checkpoints, as on a shared
// filesystem.
func (n GPUNode) CheckpointRoot() string {
	if n.SharedCheckpoints != "" {
		return n.SharedCheckpoints
	}
	return filepath.Join(n.Dir, "checkpoints")
}

// HCL is the node's agent config for both plugins: a cluster client's
// ExtraHCL (cluster.ClientOptions).
func (n GPUNode) HCL(t testing.TB) string {
	fake := filepath.Join(cluster.RepoRoot(t), "driver/mps/testdata/fake-nvidia-cuda-mps-control")
	// The driver asks the local agent why a task stopped: its own client's,
	// unless the test points it elsewhere.
	driverHCL := n.DriverHCL
	if !strings.Contains(driverHCL, "nomad {") {
		driverHCL = fmt.Sprintf("nomad {\naddress = %q\n}\n%s", cluster.SelfHTTPAddr, driverHCL)
	}
	layout := DefaultLayout
	if n.Layout != nil {
		layout = *n.Layout
	}
	mig, mps := layout.blocks()
	sim := fmt.Sprintf(`
      system       = "dgxh100"
      seed         = "e2e-driver"
      control_file = %q%s`, n.Control, mig)
	return fmt.Sprintf(`
telemetry {
  publish_allocation_metrics = true
  collection_interval        = "1s"
}
plugin "nomad-device-gpu" {
  config {
    backend            = "sim"
    fingerprint_period = "2s"
    mps_pipe_root      = %[1]q
    sim {%[2]s
    }%[9]s%[8]s
  }
}
plugin "nomad-driver-gpu" {
  config {
    state_dir         = %[3]q
    watchdog_interval = "500ms"
    checkpoint {
      root = %[6]q
    }%[7]s
    mps {
      control_binary = %[4]q
      pipe_root      = %[1]q
      log_root       = %[5]q
    }
    gpu {
      backend = "sim"
      sim {%[2]s
      }
    }
  }
}`, filepath.Join(n.Dir, "mps"), sim, filepath.Join(n.Dir, "state"), fake, filepath.Join(n.Dir, "mpslog"), n.CheckpointRoot(), indentHCL(driverHCL, "    "), indentHCL(n.DeviceHCL, "    "), mps)
}

// indentHCL puts each line of block on a line of its own, indented.
func indentHCL(block, indent string) string {
	if strings.TrimSpace(block) == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		b.WriteString("\n" + indent + strings.TrimSpace(l))
	}
	return b.String()
}
