package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// AutoscalerPlugins makes the autoscaler's plugin dir: our APM and
// strategy from bin/, and the e2e target built for the test.
func AutoscalerPlugins(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nomad-gpu-apm", "gpu-queue"} {
		if err := os.Symlink(cluster.RequireBinary(t, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "nomad-gpu-e2e-target"), "./e2e/autoscaletarget")
	cmd.Dir = cluster.RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the e2e target plugin: %v\n%s", err, out)
	}
	return dir
}

// AutoscalerAgentHCL is the autoscaler agent's plugin blocks: our APM and
// gpu-queue, and the e2e target that drives a SimPool.
const AutoscalerAgentHCL = `
apm "nomad-gpu" {
  driver = "nomad-gpu-apm"
}
strategy "gpu-queue" {
  driver = "gpu-queue"
}
target "sim-pool" {
  driver = "nomad-gpu-e2e-target"
}
`

// GPUQueuePolicy is the gpu-queue scaling policy of the sim pool: out on
// the nodes the queue needs (nodes of gpusPerNode whole GPUs) or on any
// queued allocation, in when the GPUs allocated stay under the floor.
// With anyDevice (a pool whose layouts follow the queue) its checks ask
// device=any and its queue check counts blocked GPU-equivalents against
// activation 0.25, as docs/autoscaling.md tells such a pool to. With
// p.Beyond its nodes_needed query has beyond=p.Beyond: queued work the
// runtime forecast places on the pool within it needs no new node.
func GPUQueuePolicy(controlURL string, min, max, gpusPerNode int, p tracereplay.Policy, boot time.Duration, anyDevice bool) string {
	device, queue, activation := "", "allocs_queued{node_pool=gpu}", 1.0
	if anyDevice {
		device, queue, activation = ",device=any", "gpus_queued{node_pool=gpu,device=any,state=blocked}", 0.25
	}
	beyond := ""
	if p.Beyond > 0 {
		beyond = ",beyond=" + p.Beyond.String()
	}
	return fmt.Sprintf(`
scaling "gpu-pool" {
  enabled = true
  min     = %d
  max     = %d

  policy {
    cooldown            = %q
    evaluation_interval = %q

    check "capacity" {
      source       = "nomad-gpu"
      query        = "nodes_needed{node_pool=gpu%s,gpus_per_node=%d%s}"
      query_window = "1m"
      strategy "gpu-queue" {
        signal       = "nodes_needed"
        pool         = "gpu"
        max_scale_up = %d
        boot_time    = %q
      }
    }
    check "queue" {
      source = "nomad-gpu"
      query  = %q
      strategy "gpu-queue" {
        signal     = "queued"
        pool       = "gpu"
        activation = %g
      }
    }
    check "nodes" {
      source = "nomad-gpu"
      query  = "nodes_ready{node_pool=gpu%s}"
      strategy "gpu-queue" {
        signal = "nodes"
        pool   = "gpu"
      }
    }
    check "idle" {
      source = "nomad-gpu"
      query  = "gpu_alloc_pct{node_pool=gpu%s}"
      strategy "gpu-queue" {
        signal         = "util"
        pool           = "gpu"
        floor          = %g
        scale_in_after = %q
        max_scale_down = %d
      }
    }

    target "sim-pool" {
      control_url = %q
    }
  }
}
`, min, max, p.Cooldown, p.EvalInterval, device, gpusPerNode, beyond, p.MaxScaleUp, boot, queue, activation, device, device, p.IdleFloor, p.ScaleInAfter, p.MaxScaleDown, controlURL)
}

// RemovableCheck is the gpu-queue check that scales the pool in by the
// nodes the controller emptied for removal (docs/autoscaling.md,
// Scale-in): what a pool of movable work whose controller runs
// -scale-in-pools adds to its policy.
const RemovableCheck = `    check "removable" {
      source = "nomad-gpu"
      query  = "nodes_removable{node_pool=gpu}"
      strategy "gpu-queue" {
        signal = "removable"
        pool   = "gpu"
      }
    }
`

// WithRemovable is a GPUQueuePolicy with RemovableCheck among its checks.
func WithRemovable(policy string) string {
	const target = `    target "sim-pool" {`
	if strings.Count(policy, target) != 1 {
		panic("harness: WithRemovable: the policy has no single sim-pool target to put the check before")
	}
	return strings.Replace(policy, target, RemovableCheck+"\n"+target, 1)
}

// TargetValuePolicy scales the pool with the built-in target-value on the
// GPUs allocated.
func TargetValuePolicy(controlURL string, min, max int, p tracereplay.Policy) string {
	return fmt.Sprintf(`
scaling "gpu-pool" {
  enabled = true
  min     = %d
  max     = %d

  policy {
    cooldown            = %q
    evaluation_interval = %q

    check "allocated" {
      source = "nomad-gpu"
      query  = "gpu_alloc_pct{node_pool=gpu}"
      strategy "target-value" {
        target = %g
      }
    }

    target "sim-pool" {
      control_url = %q
    }
  }
}
`, min, max, p.Cooldown, p.EvalInterval, p.TargetAlloc, controlURL)
}

// FreeAddr is a loopback address whose port was free a moment ago: for a
// plugin's or an exporter's metrics_address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
