package e2e

// The device plugin against a real Nomad agent: what `nomad node status
// -verbose` shows, jobs asking for a whole GPU, a MIG instance and MPS shares
// running under raw_exec with exactly the promised environment, a request
// for more GPUs than exist staying blocked, and an injected XID marking the
// device unhealthy.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/gpu"
)

func devicePluginHCL(control string) string {
	return fmt.Sprintf(`
plugin "nomad-device-gpu" {
  config {
    backend            = "sim"
    fingerprint_period = "2s"
    sim {
      system       = "dgxh100"
      seed         = "e2e-device"
      control_file = %q
      mig {
        gpus     = [6, 7]
        profiles = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
      }
    }
    mps {
      gpus   = ["4", "5"]
      shares = 4
    }
  }
}`, control)
}

// envJob prints the task's GPU environment, one VAR=value a line.
func envJob(id, device string, count int) string {
	return fmt.Sprintf(`
job %q {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(CUDA|NVIDIA|NOMAD_GPU)_' | sort; echo END"]
      }
      resources {
        cpu    = 50
        memory = 32
        device %q {
          count = %d
        }
      }
    }
  }
}`, id, device, count)
}

func parseEnv(out string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			env[k] = v
		}
	}
	return env
}

// deviceGroups are the node's placeable device groups, by
// vendor/type/name: the per-GPU layout groups (no instances) are left out.
func deviceGroups(n *api.Node) map[string]*api.NodeDeviceResource {
	out := map[string]*api.NodeDeviceResource{}
	if n.NodeResources == nil {
		return out
	}
	for _, d := range n.NodeResources.Devices {
		if d.Type != contract.SliceLayout {
			out[d.Vendor+"/"+d.Type+"/"+d.Name] = d
		}
	}
	return out
}

// layoutGroups are the node's per-GPU layout groups, by GPU UUID.
func layoutGroups(n *api.Node) map[string]*api.NodeDeviceResource {
	out := map[string]*api.NodeDeviceResource{}
	if n.NodeResources == nil {
		return out
	}
	for _, d := range n.NodeResources.Devices {
		if d.Type == contract.SliceLayout {
			out[d.Name] = d
		}
	}
	return out
}

func TestDevicePlugin(t *testing.T) {
	cluster.RequirePlugin(t, "nomad-device-gpu")
	control := filepath.Join(t.TempDir(), "sim-control.json")
	c := cluster.Start(t, cluster.Options{
		Clients: 1,
		Client:  cluster.ClientOptions{PluginDir: cluster.PluginDir(t), ExtraHCL: devicePluginHCL(control)},
	})
	node := c.WaitForNode(t, "client-1", func(n *api.Node) bool { return len(deviceGroups(n)) == 6 }, 2*time.Minute)

	const h100 = "NVIDIA H100 80GB HBM3"
	groups := deviceGroups(node)
	wantCounts := map[string]int{
		"nvidia/gpu/" + h100: 4,
		"nvidia/mig/3g.40gb": 2, "nvidia/mig/2g.20gb": 2, "nvidia/mig/1g.10gb": 4,
	}
	// MPS shares come in one group per shared GPU, named by its UUID, so a
	// task's shares always sit on one GPU (behind one MPS daemon).
	var mpsGroup string
	for k, g := range groups {
		if g.Type == "mps" {
			wantCounts[k] = 4
			mpsGroup = k
		}
	}
	if len(wantCounts) != 6 {
		t.Fatalf("want two MPS groups; node: %s", cluster.NodeSummary(node))
	}
	for k, n := range wantCounts {
		if g := groups[k]; g == nil || len(g.Instances) != n {
			t.Fatalf("group %s: %v, want %d instances; node: %s", k, g, n, cluster.NodeSummary(node))
		}
	}
	attr := func(group, name string) string {
		a := groups[group].Attributes[name]
		if a == nil {
			t.Errorf("%s lacks attribute %s", group, name)
			return ""
		}
		return a.String()
	}
	for group, want := range map[string]map[string]string{
		"nvidia/gpu/" + h100: {"memory": "81920 MiB", "compute_capability": "9.0", "architecture": "hopper",
			"driver_version": "550.54.15", "cuda_version": "12.4", "multiprocessors": "132"},
		"nvidia/mig/1g.10gb": {"memory": "10240 MiB", "mig_profile": "1g.10gb", "parent_product": h100, "parent_memory": "81920 MiB"},
		mpsGroup:             {"memory": "20480 MiB", "mps_shares": "4", "mps_thread_percentage": "25", "mps_memory_limit": "20480 MiB", "parent_product": h100},
	} {
		for name, v := range want {
			if got := attr(group, name); got != v {
				t.Errorf("%s attribute %s = %q, want %q", group, name, got, v)
			}
		}
	}
	// Without layout { enabled = true } the plugin takes no part in
	// layouts: it publishes no layout group (TestLayoutsFollowTheQueue
	// reads them where it does).
	if layouts := layoutGroups(node); len(layouts) != 0 {
		t.Errorf("%d layout groups with layouts off, want none; node: %s", len(layouts), cluster.NodeSummary(node))
	}
	for _, inst := range groups["nvidia/gpu/"+h100].Instances {
		if inst.Locality == nil || len(inst.Locality.PciBusID) != len("0000:00:00.0") {
			t.Errorf("%s: locality %+v: want a trimmed PCI bus id", inst.ID, inst.Locality)
		}
	}

	t.Run("nomad node status -verbose", func(t *testing.T) {
		cmd := exec.Command(cluster.NomadBinary(t), "node", "status", "-verbose", node.ID)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Server().HTTPAddr())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, want := range []string{
			"Device Group = nvidia/gpu/" + h100,
			"Device Group = nvidia/mig/1g.10gb",
			"Device Group = " + mpsGroup,
			"nvidia/mig/3g.40gb[MIG-",
			mpsGroup + "[GPU-",
			"mps_thread_percentage = 25",
			"mig_profile = 1g.10gb",
			"compute_capability = 9.0",
		} {
			// Column alignment differs per group: compare with single spaces.
			if !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	// Every job runs at once; each must see exactly its own devices.
	cases := []struct {
		job, device string
		count       int
		check       func(t *testing.T, ids []string, env map[string]string)
	}{
		{"whole-gpu", "nvidia/gpu", 2, func(t *testing.T, ids []string, env map[string]string) {
			// The plugin lists devices in GPU index order, not ID order.
			wantEnv(t, env, map[string]string{
				"NVIDIA_VISIBLE_DEVICES": env["CUDA_VISIBLE_DEVICES"], "NOMAD_GPU_SLICE_TYPE": "gpu",
			})
			if got := env["CUDA_VISIBLE_DEVICES"]; !sameSet(strings.Split(got, ","), ids) {
				t.Errorf("CUDA_VISIBLE_DEVICES=%q, allocated %v", got, ids)
			}
		}},
		{"mig", "nvidia/mig/1g.10gb", 1, func(t *testing.T, ids []string, env map[string]string) {
			wantEnv(t, env, map[string]string{
				"CUDA_VISIBLE_DEVICES": ids[0], "NVIDIA_VISIBLE_DEVICES": ids[0], "NOMAD_GPU_SLICE_TYPE": "mig",
			})
			if !strings.HasPrefix(ids[0], "MIG-") {
				t.Errorf("MIG device ID %q", ids[0])
			}
		}},
		{"mps", "nvidia/mps", 2, func(t *testing.T, ids []string, env map[string]string) {
			gpus := map[string]int{}
			for _, id := range ids {
				gpus[strings.SplitN(id, "-mps-", 2)[0]]++
			}
			var uuids []string
			for u := range gpus {
				uuids = append(uuids, u)
			}
			if len(uuids) != 1 {
				t.Fatalf("shares %v span GPUs; they must come from one GPU", ids)
			}
			// Two shares of one GPU: the limits are summed.
			wantEnv(t, env, map[string]string{
				"CUDA_VISIBLE_DEVICES": uuids[0], "NVIDIA_VISIBLE_DEVICES": uuids[0], "NOMAD_GPU_SLICE_TYPE": "mps",
				"CUDA_MPS_PIPE_DIRECTORY":           "/run/nomad-gpu/mps/" + uuids[0],
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=40960M",
			})
		}},
	}
	allocs := map[string]string{}
	for _, tc := range cases {
		c.RunJob(t, envJob(tc.job, tc.device, tc.count))
	}
	for _, tc := range cases {
		allocs[tc.job] = c.WaitForAllocs(t, tc.job, 1, 2*time.Minute)[0].ID
	}
	for _, tc := range cases {
		t.Run(tc.job, func(t *testing.T) {
			a := c.WaitForAllocStatus(t, allocs[tc.job], "complete", 2*time.Minute)
			var ids []string
			for _, d := range a.AllocatedResources.Tasks["t"].Devices {
				ids = append(ids, d.DeviceIDs...)
			}
			sort.Strings(ids)
			if len(ids) != tc.count {
				t.Fatalf("allocated %v, want %d devices", ids, tc.count)
			}
			out := c.WaitForAllocLogs(t, allocs[tc.job], "t", "stdout", "END", 30*time.Second)
			env := parseEnv(out)
			if got := env["NOMAD_GPU_DEVICE_IDS"]; !sameSet(strings.Split(got, ","), ids) {
				t.Errorf("NOMAD_GPU_DEVICE_IDS=%q, allocated %v", got, ids)
			}
			tc.check(t, ids, env)
		})
	}

	t.Run("more GPUs than exist stay blocked", func(t *testing.T) {
		c.RunJob(t, envJob("too-many", "nvidia/gpu", 9))
		deadline := time.Now().Add(time.Minute)
		for {
			evals, _, err := c.API().Jobs().Evaluations("too-many", nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evals {
				for _, m := range e.FailedTGAllocs {
					if m.ConstraintFiltered["missing devices"] > 0 {
						allocs, _, _ := c.API().Jobs().Allocations("too-many", false, nil)
						if len(allocs) != 0 {
							t.Fatalf("%d allocations placed", len(allocs))
						}
						return
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no 'missing devices' placement failure; evals: %+v", evals)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	t.Run("injected XID marks the device unhealthy", func(t *testing.T) {
		gpuGroup := groups["nvidia/gpu/"+h100]
		victim := gpuGroup.Instances[0].ID
		if err := gpu.OpenControl(control).InjectXID(victim, 79); err != nil {
			t.Fatal(err)
		}
		n := c.WaitForNode(t, "client-1", func(n *api.Node) bool {
			for _, inst := range deviceGroups(n)["nvidia/gpu/"+h100].Instances {
				if inst.ID == victim {
					return !inst.Healthy
				}
			}
			return false
		}, time.Minute)
		for _, inst := range deviceGroups(n)["nvidia/gpu/"+h100].Instances {
			if inst.ID == victim && !strings.Contains(inst.HealthDescription, "XID 79") {
				t.Errorf("health description %q", inst.HealthDescription)
			}
			if inst.ID != victim && !inst.Healthy {
				t.Errorf("%s unhealthy too: %s", inst.ID, inst.HealthDescription)
			}
		}
	})
}

func wantEnv(t *testing.T, env, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q (env: %v)", k, env[k], v, env)
		}
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	as := append([]string(nil), a...)
	bs := append([]string(nil), b...)
	sort.Strings(as)
	sort.Strings(bs)
	for i := range as {
		if as[i] != bs[i] {
			return false
		}
	}
	return true
}

// A bad plugin config stops the agent at start with a message naming the key,
// and a sim node that restarts reports the same devices (stable IDs).
func TestDevicePluginConfigAndRestart(t *testing.T) {
	cluster.RequirePlugin(t, "nomad-device-gpu")
	control := filepath.Join(t.TempDir(), "sim-control.json")
	c := cluster.Start(t, cluster.Options{
		Clients: 1,
		Client:  cluster.ClientOptions{PluginDir: cluster.PluginDir(t), ExtraHCL: devicePluginHCL(control)},
	})

	t.Run("bad config refuses to start", func(t *testing.T) {
		bad := strings.Replace(devicePluginHCL(control), "shares = 4", "shares = 1", 1)
		a, err := c.TryAddClient(cluster.ClientOptions{Name: "bad-config", PluginDir: cluster.PluginDir(t), ExtraHCL: bad})
		if err == nil {
			t.Fatal("client with mps.shares = 1 started")
		}
		if log := a.LogTail(200); !strings.Contains(log, "mps[0].shares: 1 is out of range; allowed: 2 to 48") {
			t.Fatalf("agent log does not name the key:\n%s", log)
		}
	})

	t.Run("restart keeps device IDs", func(t *testing.T) {
		ids := func(n *api.Node) []string {
			var out []string
			for _, g := range deviceGroups(n) {
				for _, inst := range g.Instances {
					out = append(out, inst.ID)
				}
			}
			sort.Strings(out)
			return out
		}
		first := c.WaitForNode(t, "client-1", func(n *api.Node) bool { return len(deviceGroups(n)) == 6 }, 2*time.Minute)
		before := ids(first)
		client := c.Client(t, "client-1")
		client.Kill(t)
		client.Restart(t)
		// The restarted client registers its node again: wait for that
		// registration, not the server's copy from before the crash.
		after := ids(c.WaitForNode(t, "client-1", func(n *api.Node) bool {
			return n.ModifyIndex > first.ModifyIndex && len(deviceGroups(n)) == 6
		}, 2*time.Minute))
		if len(before) != 20 || !sameSet(before, after) {
			t.Fatalf("device IDs changed across a restart:\nbefore (%d) %v\nafter  (%d) %v", len(before), before, len(after), after)
		}
	})
}
