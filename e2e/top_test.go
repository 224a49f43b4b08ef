package e2e

// `nomad-gpu top -json` against a real cluster with one simulated GPU
// node: every GPU of the node is listed, slices under their GPU, the
// running jobs' allocations on the devices they hold, and a job asking for
// more GPUs than exist in the queue with a wait and its reason.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/topview"
)

// buildTop builds cmd/nomad-gpu from this tree, so the test never runs a
// stale bin/nomad-gpu.
func buildTop(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nomad-gpu")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/nomad-gpu")
	cmd.Dir = cluster.RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building nomad-gpu: %v\n%s", err, out)
	}
	return bin
}

// runTopJSON runs `nomad-gpu top -json` against the cluster's server
// through NOMAD_ADDR, as an operator would.
func runTopJSON(t *testing.T, bin string, c *cluster.Cluster, args ...string) (*topview.View, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"top", "-json"}, args...)...)
	env := []string{"NOMAD_ADDR=" + c.Server().HTTPAddr()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, string(out) + stderr.String(), err
	}
	var v topview.View
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, string(out), err
	}
	return &v, string(out), nil
}

func TestTop(t *testing.T) {
	bin := buildTop(t)
	c, gnode := startGPUCluster(t)

	holders := map[string]string{"top-whole": "nvidia/gpu", "top-mig": "nvidia/mig/1g.10gb", "top-mps": "nvidia/mps"}
	for id, dev := range holders {
		c.RunJob(t, gpuJob(id, dev, 1, ""))
	}
	held := map[string]string{} // job → alloc ID
	devices := map[string][]string{}
	for id := range holders {
		a := c.WaitForAllocs(t, id, 1, 2*time.Minute)[0]
		full := c.WaitForAllocStatus(t, a.ID, "running", 2*time.Minute)
		held[id] = a.ID
		devices[id] = full.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs
	}
	c.RunJob(t, gpuJob("top-too-many", "nvidia/gpu", 9, ""))

	node := c.WaitForNode(t, "client-1", func(*api.Node) bool { return true }, time.Minute)
	var instances []string // every device instance of the node
	for _, d := range node.NodeResources.Devices {
		for _, in := range d.Instances {
			instances = append(instances, in.ID)
		}
	}
	slices.Sort(instances)

	// Telemetry and health the view must show: the held whole GPU busy,
	// another whole GPU fallen off the bus.
	busy := devices["top-whole"][0]
	var victim string
	for _, d := range node.NodeResources.Devices {
		if d.Type == "gpu" {
			for _, in := range d.Instances {
				if in.ID != busy && victim == "" {
					victim = in.ID
				}
			}
		}
	}
	ctl := gpu.OpenControl(gnode.Control)
	if err := ctl.SetUtilization(busy, 80, 30); err != nil {
		t.Fatal(err)
	}
	if err := ctl.InjectXID(victim, 79); err != nil {
		t.Fatal(err)
	}

	// Stats and the blocked evaluation arrive within seconds; poll until
	// the view has both, then check it whole.
	var v *topview.View
	var out string
	deadline := time.Now().Add(90 * time.Second)
	for {
		var err error
		v, out, err = runTopJSON(t, bin, c)
		if err != nil {
			t.Fatalf("nomad-gpu top -json: %v\n%s", err, out)
		}
		if ready(v, busy, victim) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(v.Nodes) != 1 {
		t.Fatalf("want 1 node, got %d:\n%s", len(v.Nodes), out)
	}
	n := v.Nodes[0]
	if n.Name != "client-1" || n.ID != node.ID || n.Status != "ready" || n.StatsError != "" {
		t.Errorf("node %+v", n)
	}

	t.Run("every sim GPU is listed with its slices", func(t *testing.T) {
		// dgxh100: 8 GPUs; 6 and 7 in MIG mode, 4 shared through MPS.
		if len(n.GPUs) != 8 {
			t.Fatalf("want 8 GPUs, got %d:\n%s", len(n.GPUs), out)
		}
		modes := map[string]int{}
		var listed []string
		for _, g := range n.GPUs {
			modes[g.Mode]++
			if g.Mode == topview.ModeWhole {
				listed = append(listed, g.UUID)
			}
			for _, s := range g.Slices {
				listed = append(listed, s.ID)
			}
			if g.Model != "NVIDIA H100 80GB HBM3" || g.PCIBusID == "" || g.MemoryTotalMiB == nil {
				t.Errorf("GPU %+v", g)
			}
			// Every GPU row has its index and UUID, temperature and
			// power, whatever its mode (the device stats name each
			// device's physical GPU).
			if g.Index == nil || !strings.HasPrefix(g.UUID, "GPU-") || g.TemperatureC == nil || g.PowerW == nil {
				t.Errorf("GPU %s: index %v, uuid %q, temperature %v, power %v", g.PCIBusID, g.Index, g.UUID, utilText(g.TemperatureC), utilText(g.PowerW))
			}
			switch {
			case g.UUID == victim:
				if g.Healthy || !strings.Contains(g.HealthDescription, "XID 79") {
					t.Errorf("GPU %s after XID 79: healthy %v %q", g.UUID, g.Healthy, g.HealthDescription)
				}
			case !g.Healthy:
				t.Errorf("GPU %+v unhealthy", g)
			case g.UUID == busy:
				if g.UtilizationPct == nil || *g.UtilizationPct != 80 {
					t.Errorf("busy GPU %s utilization %v, want 80", g.UUID, utilText(g.UtilizationPct))
				}
			}
			switch g.Mode {
			case topview.ModeWhole:
				if g.MemoryUsedMiB == nil || g.UtilizationPct == nil {
					t.Errorf("whole GPU %s without stats: %+v", g.UUID, g)
				}
			case topview.ModeMPS:
				if g.Index == nil || *g.Index != 4 || len(g.Slices) != 4 || g.MemoryUsedMiB == nil {
					t.Errorf("MPS GPU %+v", g)
				}
			case topview.ModeMIG:
				if g.Index == nil || (*g.Index != 6 && *g.Index != 7) || len(g.Slices) != 4 {
					t.Errorf("MIG GPU %+v", g)
				}
			}
		}
		if modes[topview.ModeWhole] != 5 || modes[topview.ModeMIG] != 2 || modes[topview.ModeMPS] != 1 {
			t.Errorf("modes %v", modes)
		}
		slices.Sort(listed)
		if !slices.Equal(listed, instances) {
			t.Errorf("devices listed %v\nnode has %v", listed, instances)
		}
	})

	t.Run("running allocations sit on their GPUs", func(t *testing.T) {
		for job, allocID := range held {
			found := false
			for _, g := range n.GPUs {
				onGPU := slices.ContainsFunc(g.Allocations, func(a topview.AllocRef) bool {
					return a.AllocID == allocID && a.Job == job && a.Group == "g" && a.Task == "t" && a.Namespace == "default"
				})
				// gpuJob's jobs are services: no prediction.
				for _, a := range g.Allocations {
					if a.AllocID == allocID && a.Prediction != nil {
						t.Errorf("%s: service predicted: %+v", job, a.Prediction)
					}
				}
				if onGPU && g.Mode == topview.ModeWhole {
					for _, a := range g.Allocations {
						if a.AllocID == allocID && (a.MemoryUsedMiB == nil || g.MemoryUsedMiB == nil || *a.MemoryUsedMiB != *g.MemoryUsedMiB) {
							t.Errorf("%s: memory used %s on a whole GPU using %s", job, memText(a.MemoryUsedMiB), memText(g.MemoryUsedMiB))
						}
					}
				}
				switch g.Mode {
				case topview.ModeWhole:
					if onGPU != (g.UUID == devices[job][0]) {
						t.Errorf("%s (holds %v): on GPU %s = %v", job, devices[job], g.UUID, onGPU)
					}
					found = found || onGPU
				default:
					for _, s := range g.Slices {
						mine := s.ID == devices[job][0]
						if mine && (s.Alloc == nil || s.Alloc.AllocID != allocID) {
							t.Errorf("%s: slice %s alloc %+v", job, s.ID, s.Alloc)
						}
						if mine && !onGPU {
							t.Errorf("%s: slice %s held but not listed on its GPU %+v", job, s.ID, g.Allocations)
						}
						found = found || mine
					}
				}
			}
			if !found {
				t.Errorf("%s (alloc %s, devices %v) not found:\n%s", job, allocID, devices[job], out)
			}
		}
	})

	t.Run("the unplaceable job waits in the queue", func(t *testing.T) {
		var q *topview.QueueEntry
		for i := range v.Queue {
			if v.Queue[i].Job == "top-too-many" {
				q = &v.Queue[i]
			}
		}
		if q == nil {
			t.Fatalf("top-too-many not queued:\n%s", out)
		}
		if q.State != topview.StateBlocked || q.Group != "g" || q.Namespace != "default" || q.Count != 1 ||
			!slices.Equal(q.Devices, []topview.DeviceAsk{{Name: "nvidia/gpu", Count: 9}}) {
			t.Errorf("queue entry %+v", q)
		}
		if q.WaitingSeconds < 1 || q.Since.IsZero() || !strings.Contains(q.Reason, "missing devices") {
			t.Errorf("queue entry wait/reason %+v", q)
		}
		// 9 GPUs on 8-GPU nodes: it never fits, and top says so first.
		if !q.NeverFits || !strings.HasPrefix(q.Reason, "never fits: asks 9 GPUs on one node") {
			t.Errorf("queue entry not said never to fit: %+v", q)
		}
		for _, e := range v.Queue {
			if _, holder := holders[e.Job]; holder {
				t.Errorf("running job %s queued: %+v", e.Job, e)
			}
		}
	})

	t.Run("one frame as a table", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "top", "-once", "-address", c.Server().HTTPAddr())
		cmd.Env = append(os.Environ(), "NOMAD_ADDR=http://127.0.0.1:1") // the flag wins
		frame, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("top -once: %v\n%s", err, frame)
		}
		t.Logf("nomad-gpu top -once:\n%s", frame)
		for _, want := range []string{"NODE client-1", "top-whole/g/t", held["top-whole"][:8], "top-too-many/g", "gpu x9", "3g.40gb", "share 3", "PRED LEFT"} {
			if !strings.Contains(string(frame), want) {
				t.Errorf("frame lacks %q", want)
			}
		}
		if strings.Contains(string(frame), "\x1b[") {
			t.Errorf("-once frame has ANSI escapes")
		}
		// Not a terminal: 80 columns.
		for _, line := range strings.Split(string(frame), "\n") {
			if n := utf8.RuneCountInString(line); n > 80 {
				t.Errorf("line of %d columns: %q", n, line)
			}
		}
	})

	t.Run("filters", func(t *testing.T) {
		// What does not exist is an error naming the flag (exit 2), not
		// an empty view.
		for _, f := range []struct{ args, want []string }{
			{[]string{"-node-pool", "nope"}, []string{`-node-pool "nope": no such node pool`, "all", "default"}},
			{[]string{"-node", "no-such-node"}, []string{`-node: no node is named or has an ID starting "no-such-node"`}},
		} {
			_, out, err := runTopJSON(t, bin, c, f.args...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("%v: %v, want exit status 2\n%s", f.args, err, out)
			}
			for _, w := range f.want {
				if !strings.Contains(out, w) {
					t.Errorf("%v: no %q in\n%s", f.args, w, out)
				}
			}
		}
		v, out, err := runTopJSON(t, bin, c, "-node-pool", "all")
		if err != nil || len(v.Nodes) != 1 {
			t.Errorf("-node-pool all: %v\n%s", err, out)
		}
		v, out, err = runTopJSON(t, bin, c, "-node", node.ID[:8])
		if err != nil || len(v.Nodes) != 1 || len(v.Nodes[0].GPUs) != 8 {
			t.Errorf("-node %s: %v\n%s", node.ID[:8], err, out)
		}
	})
}

// ready reports whether the view has the node's stats, the busy GPU's
// utilisation, the victim's XID and the queued job.
func ready(v *topview.View, busy, victim string) bool {
	if len(v.Nodes) != 1 || v.Nodes[0].StatsError != "" {
		return false
	}
	for _, g := range v.Nodes[0].GPUs {
		if g.Mode == topview.ModeWhole && g.UtilizationPct == nil ||
			g.UUID == busy && *g.UtilizationPct != 80 ||
			g.UUID == victim && g.Healthy {
			return false
		}
	}
	return slices.ContainsFunc(v.Queue, func(q topview.QueueEntry) bool {
		return q.Job == "top-too-many" && q.WaitingSeconds >= 1
	})
}

func memText(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

func utilText(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}
