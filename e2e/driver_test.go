package e2e

// The task driver against a real Nomad client with the device plugin: whole
// GPU, MIG and two MPS tasks running together, each confined to its slice;
// logs, exec, signal and stats; recovery after a client SIGKILL and after the
// driver plugin alone dies; the GPU-memory watchdog killing the offender but
// not its neighbour; and bad input rejected with the field named.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// gpuJob is a service job whose task prints its GPU env, then loops; it
// answers SIGHUP in its log.
func gpuJob(id, device string, count int, user string) string {
	userLine := ""
	if user != "" {
		userLine = fmt.Sprintf("user = %q", user)
	}
	return fmt.Sprintf(`
job %q {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "gpu"
      %s
      kill_timeout = "3s"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo got-HUP' HUP; env | grep -E '^(CUDA|NOMAD_GPU)_' | sort; echo READY; while true; do sleep 0.2; done"]
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
}`, id, userLine, device, count)
}

// startGPUCluster starts one server and one simulated GPU client running
// both plugins, and waits until the gpu driver is healthy and the node has
// its 5 device groups (whole GPUs, three MIG profiles, MPS shares of GPU 4).
// edits change the node's config before it starts.
func startGPUCluster(t *testing.T, edits ...func(*harness.GPUNode)) (*cluster.Cluster, harness.GPUNode) {
	t.Helper()
	return startGPUClusterWhen(t, func(n *api.Node) bool { return len(deviceGroups(n)) == 5 }, edits...)
}

// startGPUClusterWhen is startGPUCluster waiting until the gpu driver is
// healthy and ready says the node's devices are.
func startGPUClusterWhen(t *testing.T, ready func(*api.Node) bool, edits ...func(*harness.GPUNode)) (*cluster.Cluster, harness.GPUNode) {
	t.Helper()
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	node := harness.NewGPUNode(t)
	for _, edit := range edits {
		edit(&node)
	}
	c := cluster.Start(t, cluster.Options{
		Clients: 1,
		Client:  cluster.ClientOptions{PluginDir: cluster.PluginDir(t), ExtraHCL: node.HCL(t)},
	})
	c.WaitForNode(t, "client-1", func(n *api.Node) bool {
		d := n.Drivers["gpu"]
		return d != nil && d.Healthy && ready(n)
	}, 2*time.Minute)
	return c, node
}

func TestDriver(t *testing.T) {
	c, node := startGPUCluster(t)

	jobs := []struct{ id, device string }{
		{"whole", "nvidia/gpu"}, {"mig", "nvidia/mig/1g.10gb"}, {"mps-a", "nvidia/mps"}, {"mps-b", "nvidia/mps"},
	}
	allocs := map[string]string{}
	for _, j := range jobs {
		c.RunJob(t, gpuJob(j.id, j.device, 1, ""))
	}
	envs := map[string]map[string]string{}
	for _, j := range jobs {
		allocs[j.id] = c.WaitForAllocs(t, j.id, 1, 2*time.Minute)[0].ID
		c.WaitForAllocStatus(t, allocs[j.id], "running", 2*time.Minute)
		envs[j.id] = parseEnv(c.WaitForAllocLogs(t, allocs[j.id], "t", "stdout", "READY", time.Minute))
	}
	t.Run("each task sees only its slice", func(t *testing.T) {
		for _, j := range jobs {
			a, _, err := c.API().Allocations().Info(allocs[j.id], nil)
			if err != nil {
				t.Fatal(err)
			}
			ids := a.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs
			vis := envs[j.id]["CUDA_VISIBLE_DEVICES"]
			switch j.id {
			case "whole", "mig":
				if vis != ids[0] {
					t.Errorf("%s: CUDA_VISIBLE_DEVICES=%q, allocated %v", j.id, vis, ids)
				}
			default:
				if !strings.HasPrefix(ids[0], vis+"-mps-") {
					t.Errorf("%s: CUDA_VISIBLE_DEVICES=%q, allocated %v", j.id, vis, ids)
				}
			}
		}
		if envs["mps-a"]["CUDA_VISIBLE_DEVICES"] != envs["mps-b"]["CUDA_VISIBLE_DEVICES"] {
			t.Errorf("the MPS tasks are on different GPUs: %v / %v", envs["mps-a"], envs["mps-b"])
		}
	})

	t.Run("exec, signal, stats", func(t *testing.T) {
		out := nomadCLI(t, c, "alloc", "exec", "-task", "t", allocs["mig"], "/bin/sh", "-c", "id -un; echo $CUDA_VISIBLE_DEVICES")
		if !strings.Contains(out, "nobody") || !strings.Contains(out, envs["mig"]["CUDA_VISIBLE_DEVICES"]) {
			t.Errorf("alloc exec output %q: want the task's user and slice", out)
		}
		nomadCLI(t, c, "alloc", "signal", "-s", "SIGHUP", allocs["whole"], "t")
		c.WaitForAllocLogs(t, allocs["whole"], "t", "stdout", "got-HUP", 30*time.Second)
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := c.API().Allocations().Stats(&api.Allocation{ID: allocs["whole"], NodeID: nodeID(t, c)}, nil)
			if err == nil && st.Tasks["t"] != nil && st.Tasks["t"].ResourceUsage.MemoryStats.RSS > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no task stats: %+v, %v", st, err)
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("alloc restart", func(t *testing.T) {
		nomadCLI(t, c, "alloc", "restart", allocs["whole"], "t")
		deadline := time.Now().Add(time.Minute)
		for {
			a, _, err := c.API().Allocations().Info(allocs["whole"], nil)
			if err == nil && a.TaskStates["t"] != nil && a.TaskStates["t"].Restarts == 1 && a.TaskStates["t"].State == "running" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task not restarted and running: %v", cluster.AllocSummary(a))
			}
			time.Sleep(300 * time.Millisecond)
		}
	})

	t.Run("client SIGKILL and restart: tasks keep running and are reattached", func(t *testing.T) {
		before := taskPIDs(t, node)
		if len(before) != 4 {
			t.Fatalf("want 4 live tasks, have %v", before)
		}
		client := c.Client(t, "client-1")
		client.Kill(t)
		client.Restart(t)
		c.WaitForNode(t, "client-1", func(n *api.Node) bool { return n.Drivers["gpu"] != nil && n.Drivers["gpu"].Healthy }, 2*time.Minute)
		after := taskPIDs(t, node)
		if !sameSet(before, after) {
			t.Fatalf("task processes changed across the client restart: %v → %v", before, after)
		}
		// Reattached: signals still reach the task through the driver.
		nomadCLI(t, c, "alloc", "signal", "-s", "SIGHUP", allocs["mig"], "t")
		c.WaitForAllocLogs(t, allocs["mig"], "t", "stdout", "got-HUP", 30*time.Second)
	})

	t.Run("driver plugin killed: tasks keep running and are reattached", func(t *testing.T) {
		before := taskPIDs(t, node)
		client := c.Client(t, "client-1")
		// Only the plugin this test's own client runs: a make dev agent or a
		// node's driver elsewhere on the host is none of its business.
		plugin := clusterPluginPID(t, c, "nomad-driver-gpu")
		recovered := func() map[string]int { return recoveredTasks(client.CurrentLog()) }
		base := recovered()
		if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Nomad relaunches the plugin when a task runner's wait stream breaks,
		// and each task runner then recovers its task on the new plugin;
		// until it has, the task's handle is the dead plugin's and a signal
		// fails with "plugin is shut down". So wait for every task's recovery.
		deadline := time.Now().Add(time.Minute)
		for {
			now, missing := recovered(), []string(nil)
			for id, alloc := range allocs {
				if now[alloc] <= base[alloc] {
					missing = append(missing, id)
				}
			}
			if len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tasks of %v not recovered on a new driver plugin within a minute\n%s", missing, client.LogTail(60))
			}
			time.Sleep(300 * time.Millisecond)
		}
		if now := clusterPluginPID(t, c, "nomad-driver-gpu"); now == plugin {
			t.Fatalf("driver plugin pid %d still the killed one", now)
		}
		nomadCLI(t, c, "alloc", "signal", "-s", "SIGHUP", allocs["mps-a"], "t")
		c.WaitForAllocLogs(t, allocs["mps-a"], "t", "stdout", "got-HUP", 30*time.Second)
		if after := taskPIDs(t, node); !sameSet(before, after) {
			t.Fatalf("task processes changed across the plugin restart: %v → %v", before, after)
		}
	})

	t.Run("GPU memory over the MPS limit kills the offender, not its neighbour", func(t *testing.T) {
		pids := map[string]int{}
		for _, id := range []string{"mps-a", "mps-b"} {
			pids[id] = allocTaskPID(t, c, node, allocs[id])
		}
		gpuUUID := envs["mps-a"]["CUDA_VISIBLE_DEVICES"]
		ctl := gpu.OpenControl(node.Control)
		if err := ctl.SetProcessMemory(uint32(pids["mps-a"]), gpuUUID, 30000); err != nil {
			t.Fatal(err)
		}
		if err := ctl.SetProcessMemory(uint32(pids["mps-b"]), gpuUUID, 1000); err != nil {
			t.Fatal(err)
		}
		a := c.WaitForAllocStatus(t, allocs["mps-a"], "failed", time.Minute)
		var found bool
		for _, ev := range a.TaskStates["t"].Events {
			if ev.Type == "Driver" && strings.Contains(ev.DisplayMessage, "GPU memory limit exceeded on "+gpuUUID+": using 30000 MiB, limit 20480 MiB") {
				found = true
				// Nomad keeps the driver's annotations as the event's
				// details: what the sizer reads, not the message.
				if ev.Details[contract.EventDetailAction] != contract.EventActionKill || ev.Details[contract.EventDetailLimitMiB] != "20480" {
					t.Errorf("the kill event's details: %v", ev.Details)
				}
			}
		}
		if !found {
			t.Errorf("no driver event naming the device, usage and limit: %s", cluster.AllocSummary(a))
		}
		b, _, err := c.API().Allocations().Info(allocs["mps-b"], nil)
		if err != nil || b.ClientStatus != "running" {
			t.Fatalf("neighbour: %v %v", b.ClientStatus, err)
		}
		// The neighbour's own use of its share shows in its device stats.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var used int64 = -1
			st, err := c.API().Allocations().Stats(b, nil)
			if err == nil && st.Tasks["t"] != nil {
				for _, g := range st.Tasks["t"].ResourceUsage.DeviceStats {
					for _, inst := range g.InstanceStats {
						if inst.Summary != nil && inst.Summary.IntNumeratorVal != nil {
							used = *inst.Summary.IntNumeratorVal
						}
					}
				}
			}
			if used == 1000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("neighbour's share shows %d MiB used, want 1000 (stats %+v, %v)", used, st, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	t.Run("stop leaves nothing behind", func(t *testing.T) {
		for _, j := range jobs {
			c.StopJob(t, j.id, false)
		}
		for _, j := range jobs {
			if j.id != "mps-a" { // already failed by the watchdog
				c.WaitForAllocStatus(t, allocs[j.id], "complete", 2*time.Minute)
			}
		}
		deadline := time.Now().Add(time.Minute)
		for {
			left := taskPIDs(t, node)
			entries, _ := os.ReadDir(filepath.Join(node.Dir, "state", "tasks"))
			var cgroups []string
			for _, j := range jobs {
				cgroups = append(cgroups, cluster.TaskCgroups(cluster.TaskRef{AllocID: allocs[j.id], Task: "t"})...)
			}
			if len(left) == 0 && len(entries) == 0 && len(cgroups) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("left behind: processes %v, task state %v, cgroups %v", left, entries, cgroups)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}

func TestDriverBadInput(t *testing.T) {
	c, _ := startGPUCluster(t)
	cases := []struct {
		name, job, want string
	}{
		{"missing command", strings.Replace(gpuJob("no-command", "nvidia/gpu", 1, ""), `command = "/bin/sh"`, "", 1), "command"},
		{"unknown user", gpuJob("bad-user", "nvidia/gpu", 1, "no-such-user-e2e"), `user "no-such-user-e2e" does not exist`},
		{"root not allowed", gpuJob("root", "nvidia/gpu", 1, "root"), "denied_host_uids"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := c.RunJob(t, strings.Replace(tc.job, `job "`, `job "`, 1))
			alloc := c.WaitForAllocs(t, *job.ID, 1, time.Minute)[0]
			a := c.WaitForAllocStatus(t, alloc.ID, "failed", time.Minute)
			var msgs []string
			for _, ev := range a.TaskStates["t"].Events {
				msgs = append(msgs, ev.DisplayMessage)
			}
			if !strings.Contains(strings.Join(msgs, " | "), tc.want) {
				t.Fatalf("events %q do not name %q", msgs, tc.want)
			}
		})
	}
	t.Run("unknown signal name", func(t *testing.T) {
		c.RunJob(t, gpuJob("sig", "nvidia/gpu", 1, ""))
		alloc := c.WaitForAllocs(t, "sig", 1, time.Minute)[0]
		c.WaitForAllocStatus(t, alloc.ID, "running", time.Minute)
		err := c.API().Allocations().Signal(&api.Allocation{ID: alloc.ID, NodeID: nodeID(t, c)}, nil, "t", "SIGNOPE")
		if err == nil || !strings.Contains(err.Error(), "SIGNOPE") {
			t.Fatalf("signal SIGNOPE: %v", err)
		}
	})
}

func nomadCLI(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.NomadBinary(t), args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Server().HTTPAddr())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func nodeID(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	nodes, _, err := c.API().Nodes().List(nil)
	if err != nil || len(nodes) == 0 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	return nodes[0].ID
}

// taskPIDs lists the live task processes of this node, from the
// supervisors' records.
func taskPIDs(t *testing.T, n harness.GPUNode) []string {
	t.Helper()
	var out []string
	files, _ := filepath.Glob(filepath.Join(n.Dir, "state", "tasks", "*", "supervisor", "task.json"))
	for _, f := range files {
		pid, err := pidFromTaskJSON(f)
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && !st.Dead() {
			out = append(out, fmt.Sprint(pid))
		}
	}
	return out
}

func pidFromTaskJSON(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.PID <= 0 {
		return 0, fmt.Errorf("task.json %s: %v", b, err)
	}
	return rec.PID, nil
}

// allocTaskPID reads the task's pid from the supervisor's task.json.
func allocTaskPID(t *testing.T, c *cluster.Cluster, n harness.GPUNode, allocID string) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(n.Dir, "state", "tasks", allocID+".t.*", "supervisor", "task.json"))
	if len(files) != 1 {
		t.Fatalf("task state for %s: %v", allocID, files)
	}
	pid, err := pidFromTaskJSON(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// recoveredTasks counts, per allocation ID, the client log's lines saying
// a task runner recovered its task on a relaunched driver plugin (Nomad's
// task runner logs them at debug level, which the e2e agents run at).
func recoveredTasks(log string) map[string]int {
	n := map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "task successfully recovered on driver") {
			continue
		}
		if _, rest, ok := strings.Cut(line, "alloc_id="); ok {
			id, _, _ := strings.Cut(rest, " ")
			n[id]++
		}
	}
	return n
}
